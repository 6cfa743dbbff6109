"""Suite discovery through the ``rlbench.suites`` entry points: built-ins found, broken plugins named, names checked."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlbench import registry
from rlbench.errors import UsageError
from rlbench.metrics import Metric
from rlbench.registry import ENTRY_POINT_GROUP, BenchmarkSpec

BUILT_INS = {
    "ppo-cartpole": "rlbench.suites.ppo",
    "sac-pendulum": "rlbench.suites.offpolicy",
    "ddpg-pendulum": "rlbench.suites.offpolicy",
    "gae": "rlbench.suites.micro.runner",
    "micro": "rlbench.suites.micro.runner",
    "transports": "rlbench.suites.transports.benchmark",
    "sb3-sac-pendulum": "rlbench.suites.external",
}


@dataclass
class _Cfg:
    seed: int = 0


def _run(cfg: _Cfg, ctx: object) -> list[Metric]:
    return [Metric("sps", "steps/s", "higher", [1.0])]


def _spec(name: str) -> BenchmarkSpec:
    return BenchmarkSpec(name, f"fake {name}", _Cfg, _run)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):
    """An empty discovery cache (restored after the test), so the next lookup discovers again."""
    monkeypatch.setattr(registry, "_CACHE", [])


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch, fresh):
    """``plugins({"module": BENCHMARKS}, [(ep_name, ep_value), ...])``: the installed entry points plus fake ones."""
    real = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))

    def install(modules: dict[str, object], eps: list[tuple[str, str]]) -> None:
        for mod_name, benchmarks in modules.items():  # importable modules holding BENCHMARKS
            mod = types.ModuleType(mod_name)
            mod.BENCHMARKS = benchmarks  # type: ignore[attr-defined]
            monkeypatch.setitem(sys.modules, mod_name, mod)
        fake = [importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in eps]

        def entry_points(**kw: object):
            assert kw == {"group": ENTRY_POINT_GROUP}
            return [*real, *fake]

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    return install


def test_built_in_benchmarks_are_discovered_with_their_source(fresh) -> None:
    specs = {s.name: s for s in registry.all_specs()}
    for name, module in BUILT_INS.items():
        assert name in specs, f"{name} not discovered; load errors: {registry.load_errors()}"
        assert module in specs[name].source, specs[name].source  # names the entry point's module
        assert registry.get_spec(name) is specs[name]
    assert [s.name for s in registry.all_specs()] == sorted(specs)
    assert registry.load_errors() == []


def test_discovery_is_cached(fresh, monkeypatch: pytest.MonkeyPatch) -> None:
    first = registry.all_specs()
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: pytest.fail("discovered twice"))
    assert registry.all_specs() == first


def test_unknown_benchmark_suggests_a_close_name() -> None:
    with pytest.raises(UsageError, match=r"unknown benchmark 'ppo-cartpol': did you mean 'ppo-cartpole'"):
        registry.get_spec("ppo-cartpol")
    with pytest.raises(UsageError) as info:
        registry.get_spec("zzzzzzzz")
    assert "did you mean" not in str(info.value) and "`rlbench list`" in str(info.value)


def test_broken_entry_point_is_reported_and_hides_nothing(plugins) -> None:
    def explode() -> list[BenchmarkSpec]:
        raise RuntimeError("plugin import failed")

    plugins(
        {"fake_rlbench_suite_ok": [_spec("fake-ok")], "fake_rlbench_suite_raises": explode},
        [
            ("missing", "fake_rlbench_suite_that_does_not_exist"),
            ("raises", "fake_rlbench_suite_raises"),
            ("ok", "fake_rlbench_suite_ok"),
        ],
    )
    names = [s.name for s in registry.all_specs()]
    assert "fake-ok" in names and set(BUILT_INS) <= set(names)
    assert "fake_rlbench_suite_ok" in registry.get_spec("fake-ok").source
    errors = registry.load_errors()
    assert len(errors) == 2, errors
    missing = next(e for e in errors if "'missing'" in e)
    assert "fake_rlbench_suite_that_does_not_exist" in missing and "ModuleNotFoundError" in missing
    raises = next(e for e in errors if "'raises'" in e)
    assert "RuntimeError: plugin import failed" in raises
    with pytest.raises(UsageError, match=r"2 suite\(s\) failed to load"):
        registry.get_spec("nope")


def test_duplicate_benchmark_name_is_reported_and_the_first_kept(plugins) -> None:
    # entry points load in (value, name) order: this one comes after rlbench's own suites
    plugins({"zzz_fake_rlbench_dup": [_spec("ppo-cartpole"), _spec("fake-unique")]}, [("dup", "zzz_fake_rlbench_dup")])
    assert "rlbench.suites.ppo" in registry.get_spec("ppo-cartpole").source
    assert "zzz_fake_rlbench_dup" in registry.get_spec("fake-unique").source
    (error,) = registry.load_errors()
    assert "'ppo-cartpole'" in error and "zzz_fake_rlbench_dup" in error and "rlbench.suites.ppo" in error


def test_specs_of_accepts_every_documented_shape() -> None:
    a, b = _spec("a"), _spec("b")
    assert registry._specs_of(a) == [a]
    assert registry._specs_of([a, b]) == [a, b]
    assert registry._specs_of((a, b)) == [a, b]
    assert registry._specs_of(types.SimpleNamespace(BENCHMARKS=[a])) == [a]
    assert registry._specs_of(types.SimpleNamespace(BENCHMARKS=lambda: [b])) == [b]
    assert registry._specs_of(lambda: a) == [a]
    assert registry._specs_of(lambda: [a, b]) == [a, b]
    for bad in (42, [a, "b"], types.SimpleNamespace(BENCHMARKS=None)):
        with pytest.raises(TypeError, match="expected BenchmarkSpec"):
            registry._specs_of(bad)


def test_defaults_are_the_config_fields() -> None:
    assert _spec("x").defaults() == {"seed": 0}


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_listing_benchmarks_never_imports_torch(tmp_path: Path) -> None:
    proc = _python(
        "import rlbench; import rlbench.registry; specs = rlbench.registry.all_specs(); import sys; "
        "print('torch' in sys.modules, len(specs))",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    imported, count = proc.stdout.split()
    assert imported == "False" and int(count) >= len(BUILT_INS)


def test_rlbench_list_json_never_imports_torch(tmp_path: Path) -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from rlbench.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = main(['list', '--json'])\n"
        "print(json.dumps({'rc': rc, 'names': [b['name'] for b in json.loads(buf.getvalue())], "
        "'torch': 'torch' in sys.modules}))\n"
    )
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rc"] == 0 and set(BUILT_INS) <= set(out["names"]) and out["torch"] is False
    # the real command too: -X importtime lists every module imported, on stderr
    cmd = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlbench", "list", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cmd.returncode == 0
    assert {b["name"] for b in json.loads(cmd.stdout)} >= set(BUILT_INS)
    assert "rlbench.registry" in cmd.stderr  # the trace is there ...
    assert "torch" not in cmd.stderr  # ... and torch is not in it

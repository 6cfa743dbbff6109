"""Suite discovery through the ``rlbench.suites`` entry points: built-ins found, broken plugins named, names checked."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlbench.core.errors import UsageError
from rlbench.results.metrics import Metric
from rlbench.run import registry
from rlbench.run.registry import ENTRY_POINT_GROUP, BenchmarkSpec

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
    """Empty discovery caches (restored after the test), so the next lookup discovers again."""
    monkeypatch.setattr(registry, "_CACHE", [])
    monkeypatch.setattr(registry, "_USER_CACHE", {})
    yield
    for name in [m for m in sys.modules if m.startswith(registry.USER_MODULE_PREFIX)]:
        del sys.modules[name]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh):
    """``project({"suites/a.py": source, ...})`` writes a project in ``tmp_path`` and makes it the working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suites").mkdir()

    def write(files: dict[str, str]) -> Path:
        for rel, text in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
        return tmp_path

    yield write
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]  # the next test's project has its own mypkg


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


@pytest.mark.slow
def test_listing_benchmarks_never_imports_torch(tmp_path: Path) -> None:
    proc = _python(
        "import rlbench; import rlbench.run.registry; specs = rlbench.run.registry.all_specs(); import sys; "
        "print('torch' in sys.modules, len(specs))",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    imported, count = proc.stdout.split()
    assert imported == "False" and int(count) >= len(BUILT_INS)


@pytest.mark.slow
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
    assert "rlbench.run.registry" in cmd.stderr  # the trace is there ...
    assert "torch" not in cmd.stderr  # ... and torch is not in it


DECORATED = """
from rlbench.run.userbench import benchmark
import mypkg


@benchmark
def my_gae(steps: int = 8) -> dict:
    \"\"\"My GAE, decorated.\"\"\"
    return {"v": float(mypkg.double(steps))}


@benchmark(name="other-one", summary="a second one")
def helper(x: float = 1.0) -> dict:
    return {"x": x}


def not_a_benchmark(y=1):
    return y
"""

LISTED = """
from dataclasses import dataclass

from rlbench.results.metrics import Metric
from rlbench.run.registry import BenchmarkSpec


@dataclass
class Cfg:
    seed: int = 0


def run(cfg, ctx):
    return [Metric("sps", "steps/s", "higher", [1.0])]


BENCHMARKS = [BenchmarkSpec("listed-bench", "from a BENCHMARKS list", Cfg, run)]
"""

MYPKG = {"mypkg/__init__.py": "def double(n):\n    return 2 * n\n"}


def test_user_suites_are_discovered_with_their_source(project) -> None:
    path_before = list(sys.path)
    project({**MYPKG, "suites/decorated.py": DECORATED, "suites/listed.py": LISTED})
    specs = {s.name: s for s in registry.all_specs()}
    assert {"my-gae", "other-one", "listed-bench"} <= set(specs) and set(BUILT_INS) <= set(specs)
    assert specs["my-gae"].source == "./suites/decorated.py" and specs["other-one"].source == "./suites/decorated.py"
    assert specs["listed-bench"].source == "./suites/listed.py"
    assert specs["my-gae"].summary == "My GAE, decorated." and specs["other-one"].summary == "a second one"
    assert "not-a-benchmark" not in specs
    assert registry.load_errors() == []
    assert registry.get_spec("my-gae") is specs["my-gae"]
    assert sys.path == path_before  # the working directory was on sys.path only while importing


def test_underscore_conftest_and_pytest_files_are_not_imported(project) -> None:
    raising = "raise RuntimeError('must not be imported')\n"
    project(
        {
            "suites/_helpers.py": raising,
            "suites/conftest.py": raising,
            "suites/test_speed.py": raising,
            "suites/bench_test.py": raising,
            "suites/notes.txt": raising,
            "suites/fixture_user.py": "def test_it(benchmark):\n    raise RuntimeError\n",
            "suites/listed.py": LISTED,
        }
    )
    assert "listed-bench" in {s.name for s in registry.all_specs()}
    assert registry.load_errors() == []
    assert [p.name for p in registry.user_pytest_files()] == ["bench_test.py", "fixture_user.py", "test_speed.py"]


def test_broken_user_suite_is_named_and_hides_nothing(project) -> None:
    project(
        {
            "suites/a_broken.py": "import no_such_module_for_rlbench_tests\n",
            "suites/b_exits.py": "import sys\nsys.exit(3)\n",
            "suites/c_empty.py": "X = 1\n",
            "suites/d_ok.py": LISTED,
        }
    )
    names = {s.name for s in registry.all_specs()}
    assert "listed-bench" in names and set(BUILT_INS) <= names
    errors = registry.load_errors()
    assert len(errors) == 3, errors
    assert "./suites/a_broken.py" in errors[0] and "ModuleNotFoundError" in errors[0] and "a_broken.py:1" in errors[0]
    assert "./suites/b_exits.py" in errors[1] and "SystemExit: exit status 3" in errors[1]
    assert "./suites/c_empty.py" in errors[2] and "defines no benchmark: add a BENCHMARKS list" in errors[2]
    with pytest.raises(UsageError, match=r"3 suite\(s\) failed to load"):
        registry.get_spec("nope")


def test_an_entry_point_name_resolves_without_importing_the_project(project) -> None:
    project({"suites/slow_import.py": "raise RuntimeError('imported')\n"})
    assert registry.resolve_target("ppo-cartpole").source == "rlbench.suites.ppo"
    assert registry.get_spec("ppo-cartpole").source == "rlbench.suites.ppo"
    assert not [m for m in sys.modules if m.startswith(registry.USER_MODULE_PREFIX)] and not registry._USER_CACHE


def test_user_benchmark_colliding_with_an_existing_name_is_reported_first_wins(project) -> None:
    clash = "from rlbench.run.userbench import benchmark\n\n@benchmark(name={!r})\ndef f():\n    return {{}}\n"
    project({"suites/a.py": clash.format("ppo-cartpole"), "suites/b.py": LISTED, "suites/c.py": clash.format("listed-bench")})
    assert registry.get_spec("ppo-cartpole").source == "rlbench.suites.ppo"
    assert registry.get_spec("listed-bench").source == "./suites/b.py"
    first, second = registry.load_errors()
    assert "'ppo-cartpole' from ./suites/a.py is already defined by rlbench.suites.ppo" in first
    assert "'listed-bench' from ./suites/c.py is already defined by ./suites/b.py" in second


def test_user_discovery_follows_the_working_directory(project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project({"suites/listed.py": LISTED})
    assert "listed-bench" in {s.name for s in registry.all_specs()}
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert "listed-bench" not in {s.name for s in registry.all_specs()}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suites" / "later.py").write_text(LISTED.replace("listed-bench", "later-bench"))
    assert "later-bench" not in {s.name for s in registry.all_specs()}  # cached for this directory ...
    registry.reset_cache()
    assert {"listed-bench", "later-bench"} <= {s.name for s in registry.all_specs()}  # ... until reset


def test_rlbench_own_suites_directory_is_not_a_user_suite_dir(tmp_path: Path) -> None:
    found = importlib.util.find_spec("rlbench.suites")
    assert found is not None and found.submodule_search_locations
    own_root = Path(next(iter(found.submodule_search_locations))).parent
    if (own_root / "suites").is_dir():  # a checkout (editable install): its suites/ is rlbench.suites
        assert registry.user_suites_dir(own_root) is None
    (tmp_path / "suites").mkdir()
    assert registry.user_suites_dir(tmp_path) == tmp_path / "suites"
    assert registry.user_suites_dir(tmp_path / "suites") is None  # no suites/ in there


def test_decorated_functions_in_entry_point_modules(plugins) -> None:
    from rlbench.run.userbench import benchmark

    @benchmark(name="ep-decorated")
    def ep_fn(n: int = 1) -> dict:
        return {}

    mod = types.ModuleType("fake_rlbench_decorated_suite")
    mod.ep_fn = ep_fn  # type: ignore[attr-defined]
    mod.again = ep_fn  # type: ignore[attr-defined]  # one function under two names: one benchmark
    sys.modules["fake_rlbench_decorated_suite"] = mod
    try:
        plugins({}, [("dec", "fake_rlbench_decorated_suite"), ("dec-fn", "fake_rlbench_decorated_suite:ep_fn")])
        assert "fake_rlbench_decorated_suite" in registry.get_spec("ep-decorated").source
        assert registry.load_errors() == []  # the module and its function name the same benchmark: no clash
    finally:
        del sys.modules["fake_rlbench_decorated_suite"]


def test_is_pytest_benchmark_file(tmp_path: Path) -> None:
    cases = {
        "test_a.py": "",
        "a_test.py": "",
        "b.py": "import pytest\n\ndef test_speed(benchmark, n):\n    benchmark(sum, [1])\n",
        "c.py": "from rlbench.run.userbench import benchmark\n\n@benchmark\ndef c(n: int = 1):\n    return {}\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    assert [n for n in cases if registry.is_pytest_benchmark_file(tmp_path / n)] == ["test_a.py", "a_test.py", "b.py"]


# --- targets that are not names ---------------------------------------------------------------------------------

SEVERAL = LISTED.replace(
    "BENCHMARKS = [",
    "ONE = BenchmarkSpec('one-more', 'one', Cfg, run)\nBENCHMARKS = [ONE, BenchmarkSpec('two-more', 'two', Cfg, run), ",
)


def _resolve(target: str) -> BenchmarkSpec:
    return registry.resolve_target(target, pytest_file=lambda p: BenchmarkSpec(p.stem, "pytest", _Cfg, _run, report="micro"))


def test_file_and_module_targets(project) -> None:
    root = project(
        {
            **MYPKG,
            "suites/decorated.py": DECORATED,
            "bench/only.py": "from rlbench import benchmark\n\n@benchmark\ndef solo(k: int = 2):\n    return {}\n",
            "bench/several.py": SEVERAL,
            "mypkg/benches.py": LISTED,
            "mypkg/multi.py": SEVERAL,
        }
    )
    spec = _resolve("suites/decorated.py:my_gae")
    assert spec.name == "my-gae" and spec.source == "./suites/decorated.py"
    assert _resolve("./suites/decorated.py:other-one").name == "other-one"  # a benchmark name works as NAME too
    assert _resolve(str(root / "bench" / "only.py")).name == "solo"  # the file's one benchmark
    assert _resolve("bench/several.py:ONE").name == "one-more"
    assert _resolve("bench/several.py:two-more").name == "two-more"
    spec = _resolve("mypkg.benches:BENCHMARKS")
    assert spec.name == "listed-bench" and spec.source == "mypkg.benches"
    assert _resolve("mypkg.multi:ONE").name == "one-more"
    assert _resolve("mypkg:benches").name == "listed-bench"  # a module attribute holding BENCHMARKS
    assert _resolve("my-gae").source == "./suites/decorated.py"  # by name: ./suites/


def test_pytest_file_targets_go_to_the_pytest_runner(project) -> None:
    project({"suites/test_speed.py": "def test_x(benchmark):\n    benchmark(sum, [1])\n", "other/bench_x.py": "x = 1\n"})
    assert _resolve("suites/test_speed.py").report == "micro"
    assert _resolve("test_speed").name == "test_speed"  # a pytest file of ./suites/ by its stem
    with pytest.raises(UsageError, match="is a pytest-benchmark file"):
        registry.resolve_target("suites/test_speed.py")  # nobody to run it
    with pytest.raises(UsageError, match="unknown benchmark 'test_speed'"):
        registry.resolve_target("test_speed")


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ("nope.py", r"no such file: 'nope.py' \(relative to .*\); give a benchmark name, FILE.py"),
        ("suites", "'suites' is a directory: name a .py file in it"),
        ("notes.txt:x", "'notes.txt' is not a Python file"),
        (
            "bench/several.py",
            r"defines 3 benchmarks \(one-more, two-more, listed-bench\): pick one with `./bench/several.py:NAME`",
        ),
        ("bench/several.py:nothing", "has no attribute 'nothing'; it defines one-more, two-more, listed-bench"),
        ("bench/several.py:Cfg", "is a type, not a benchmark"),
        ("bench/several.py:run", "is a plain function: decorate it with @rlbench.benchmark"),
        ("bench/several.py:Metric", "is a type, not a benchmark"),
        ("bench/empty.py", "defines no benchmark: add a BENCHMARKS list"),
        ("bench/broken.py", r"importing ./bench/broken.py failed: ZeroDivisionError: division by zero \(broken.py:2\)"),
        ("bench/syntax.py:x", "importing ./bench/syntax.py failed: SyntaxError"),
        ("bench/empty.py:X", "is a int, not a benchmark"),
        ("no_such_pkg_rlb.mod:x", "no module named 'no_such_pkg_rlb'"),
        ("mypkg.broken:x", "importing mypkg.broken failed: ZeroDivisionError"),
        ("mypkg.needs:x", "importing mypkg.needs failed: ModuleNotFoundError: No module named 'absent_dep_rlb'"),
        ("bad name:x", "neither a .py file nor a package.module name"),
        (":x", "cannot read the benchmark target"),
        ("bench/several.py:", "cannot read the benchmark target"),
    ],
)
def test_target_errors_are_one_line_usage_errors(project, target: str, match: str) -> None:
    project(
        {
            **MYPKG,
            "notes.txt": "",
            "bench/several.py": SEVERAL,
            "bench/empty.py": "X = 1\n",
            "bench/broken.py": "import os\n1 / 0\n",
            "bench/syntax.py": "def (\n",
            "mypkg/broken.py": "1 / 0\n",
            "mypkg/needs.py": "import absent_dep_rlb\n",
        }
    )
    with pytest.raises(UsageError, match=match) as info:
        _resolve(target)
    assert "\n" not in str(info.value)

"""``@rlbench.benchmark``: the spec it attaches, the options its parameters become, and how a repeat calls the function."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from typing import Any

import pytest

from rlbench.cli.run import build_run_parser
from rlbench.core.errors import UsageError
from rlbench.results.metrics import Metric
from rlbench.run.registry import SPEC_ATTRIBUTE, BenchmarkSpec, RunContext
from rlbench.run.userbench import arg_docs, benchmark


@benchmark
def my_gae(steps: int = 2048, lam: float = 0.95, mode: str = "numpy", fast: bool = False) -> dict[str, float]:
    """GAE of my own.

    Args:
        steps: rollout length T.
        lam: GAE lambda,
            between 0 and 1.

    Returns:
        Nothing of interest.
    """
    return {"adv_mean": steps * lam}


@benchmark(name="seeded-one", summary="with a seed", version=3)
def seeded(*, seed: int = 7, scale: float = 2) -> dict[str, float]:
    return {"value": seed * scale}


def _spec(fn: Any) -> BenchmarkSpec:
    spec = getattr(fn, SPEC_ATTRIBUTE)
    assert isinstance(spec, BenchmarkSpec)
    return spec


def test_bare_decorator_defaults_and_the_function_unchanged() -> None:
    spec = _spec(my_gae)
    assert (spec.name, spec.summary, spec.version, spec.report) == ("my-gae", "GAE of my own.", 1, "function")
    assert my_gae(steps=2, lam=0.5) == {"adv_mean": 1.0}  # still a plain function
    assert my_gae.__name__ == "my_gae" and not hasattr(my_gae, "__wrapped__")
    assert spec.defaults() == {"steps": 2048, "lam": 0.95, "mode": "numpy", "fast": False, "seed": 0, "timeout": 0.0}
    hints = {f.name: f.type for f in dataclasses.fields(spec.config_factory)}
    assert hints == {"steps": int, "lam": float, "mode": str, "fast": bool, "seed": int, "timeout": float}


def test_decorator_with_arguments_and_an_own_seed() -> None:
    spec = _spec(seeded)
    assert (spec.name, spec.summary, spec.version) == ("seeded-one", "with a seed", 3)
    cfg = spec.config_factory()
    assert [f.name for f in dataclasses.fields(cfg)] == ["seed", "scale", "timeout"]  # rlbench's --timeout last
    assert cfg.seed == 7 and cfg.scale == 2.0 and isinstance(cfg.scale, float)  # an int default of a float parameter


@benchmark()  # empty parentheses work too
def _free(x: int = 1) -> dict[str, float]:
    return {}


def test_no_docstring_gives_a_summary_naming_the_function() -> None:
    spec = _spec(_free)
    assert spec.name == "free" and "_free" in spec.summary


def test_parameters_become_run_options_with_help() -> None:
    spec = _spec(my_gae)
    parser = build_run_parser(spec, spec.config_factory())
    text = parser.format_help()
    assert "--steps N" in text and "rollout length T. (default: 2,048)" in text
    assert "GAE lambda, between 0 and 1. (default: 0.95)" in text
    assert "--mode MODE" in text and "parameter of my_gae (default: numpy)" in text
    assert "--fast, --no-fast" in text and "--seed N" in text and "my_gae takes no seed" in text
    args = parser.parse_args(["--steps", "16", "--lam", "0.5", "--mode", "torch", "--fast", "--seed", "3"])
    assert (args.steps, args.lam, args.mode, args.fast, args.seed) == (16, 0.5, "torch", True, 3)
    with pytest.raises(UsageError, match="--steps"):
        parser.parse_args(["--steps", "many"])


@pytest.fixture
def fake_session(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in ``rlbench.profiling.session`` whose ``profile_call`` records its arguments and calls the function."""
    calls: list[dict[str, Any]] = []

    def profile_call(
        fn: Any, kwargs: dict[str, Any], *, device: Any = None, callback: Any = None, timeout: Any = None
    ) -> list[Metric]:
        calls.append({"fn": fn, "kwargs": dict(kwargs), "device": device, "callback": callback, "timeout": timeout})
        return [Metric(k, "", "none", [float(v)]) for k, v in fn(**kwargs).items()]

    module = types.ModuleType("rlbench.profiling.session")
    module.profile_call = profile_call  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rlbench.profiling.session", module)
    return calls


def test_run_calls_profile_call_with_the_config_as_keywords(fake_session: list[dict[str, Any]]) -> None:
    spec = _spec(my_gae)
    cfg = dataclasses.replace(spec.config_factory(), steps=10, lam=0.5, seed=4)
    metrics = spec.run(cfg, RunContext(device="cpu", callback="cb"))
    assert [(m.name, m.samples) for m in metrics] == [("adv_mean", [5.0])]
    (call,) = fake_session
    assert call["fn"] is my_gae and call["device"] == "cpu" and call["callback"] == "cb" and call["timeout"] is None
    assert call["kwargs"] == {"steps": 10, "lam": 0.5, "mode": "numpy", "fast": False}  # no seed: it has none
    _spec(seeded).run(dataclasses.replace(_spec(seeded).config_factory(), seed=11), RunContext(device=None))
    assert fake_session[-1]["kwargs"] == {"seed": 11, "scale": 2.0}  # its own seed is passed
    _spec(seeded).run(dataclasses.replace(_spec(seeded).config_factory(), timeout=2.5), RunContext(device=None))
    assert fake_session[-1]["timeout"] == 2.5 and "timeout" not in fake_session[-1]["kwargs"]  # rlbench's, not passed


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("def f(x): pass", "needs a default value"),
        ("def f(*args): pass", "keyword parameter"),
        ("def f(**kw): pass", "keyword parameter"),
        ("def f(x=1, /): pass", "keyword parameter"),
        ("def f(x: list = None): pass", "of type list"),
        ("def f(x=None): pass", "of type NoneType"),
        ("def f(x: 'int | None' = 1): pass", "int, float, str or bool"),
        ("def f(x: int = 'a'): pass", "default 'a', not of its type int"),
        ("def f(x: int = True): pass", "not of its type int"),
        ("def f(seed: float = 1.0): pass", "must be an int"),
        ("def f(repeats: int = 1): pass", "shadows the `rlbench run` option --repeats"),
        ("def f(json: bool = False): pass", "shadows"),
    ],
)
def test_parameters_that_cannot_be_options_are_refused(source: str, match: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(TypeError, match=match):
        benchmark(namespace["f"])


def test_bad_names_and_objects_are_refused() -> None:
    with pytest.raises(ValueError, match="name"):
        benchmark(name="a b")(_free)
    with pytest.raises(ValueError, match="name"):
        benchmark(name="x.py")(_free)
    with pytest.raises(TypeError, match="version"):
        benchmark(version="2")(_free)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="plain function"):
        benchmark(print)
    with pytest.raises(TypeError, match="decorates a function"):
        benchmark(42)  # type: ignore[call-overload]


def test_arg_docs_reads_google_style_sections() -> None:
    doc = "Title.\n\nArgs:\n    a: first\n        continued\n    b (int): second\n    *rest: ignored\n\nReturns:\n    c: no\n"
    assert arg_docs(doc) == {"a": "first continued", "b": "second", "rest": "ignored"}
    assert arg_docs("No sections here.") == {}


@pytest.mark.skipif(importlib.util.find_spec("rlbench.profiling") is None, reason="rlbench.profiling.session not there yet")
def test_run_through_the_real_profile_call() -> None:
    spec = _spec(my_gae)
    metrics = spec.run(dataclasses.replace(spec.config_factory(), steps=4, lam=0.5), RunContext(device=None))
    by_name = {m.name: m for m in metrics}
    assert by_name["adv_mean"].samples == [2.0]  # the function's own {name: float}, beside the session's metrics
    assert all(isinstance(m, Metric) for m in metrics)


def test_records_of_user_code_carry_the_users_commit(tmp_path: Any) -> None:
    """A user's benchmark is stamped with the commit of the user's repository, not rlbench's own (kept beside it), so a
    history of the user's project files it under the user's commits."""
    import json
    import subprocess

    def git(*args: str) -> str:
        env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
        import os

        out = subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, env={**os.environ, **env})
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "mine.py").write_text(
        "import rlbench\n\n\n@rlbench.benchmark\ndef tiny(n: int = 10):\n    return {'total': float(sum(range(n)))}\n"
    )
    git("init", "-q")
    git("add", "suites/mine.py")
    git("commit", "-qm", "my benchmark")
    head = git("rev-parse", "HEAD")
    proc = subprocess.run(
        [sys.executable, "-m", "rlbench", "run", "tiny", "--repeats", "1", "--quiet", "--store", "s"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for f in (tmp_path / "s").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert lines and {r["fingerprint"]["git"]["commit"] for r in lines} == {head}
    assert all(r["fingerprint"]["git"]["repo"] == tmp_path.name for r in lines)
    assert all("rlbench_git" in r["fingerprint"] for r in lines)

"""The runner: repeats and their seeds, one record per metric, records kept when a repeat fails or is interrupted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from rlbench.core.errors import UsageError
from rlbench.results.metrics import Metric
from rlbench.results.records import definition_hash
from rlbench.results.store import RunWriter, read_records
from rlbench.run.registry import BenchmarkSpec, RunContext
from rlbench.run.runner import params_of, run_benchmark, to_records


@dataclass(frozen=True)
class _Cfg:
    size: int = 4
    hidden: tuple[int, ...] = (8, 8)
    name: str = "x"
    seed: int = 0


def _metrics(cfg: _Cfg) -> list[Metric]:
    return [
        Metric("sps", "steps/s", "higher", [100.0 + cfg.seed], meta={"note": "m"}),
        Metric("time/call", "s", "lower", [0.1, 0.2], x=[1.0, 2.0], params={"impl": "numpy"}),
    ]


def _spec(run, version: int = 1) -> BenchmarkSpec:
    return BenchmarkSpec("fake", "a fake benchmark", _Cfg, run, version=version)


def test_params_of_drops_the_seed_and_lists_tuples() -> None:
    assert params_of(_Cfg(size=5, hidden=(3, 2), seed=7)) == {"size": 5, "hidden": [3, 2], "name": "x"}


def test_to_records_one_per_metric_with_the_definition_hash() -> None:
    spec = _spec(lambda cfg, ctx: _metrics(cfg))
    cfg = _Cfg(size=9, seed=3)
    fp = {"machine": {"id": "m"}}
    recs = to_records(spec, cfg, _metrics(cfg), "run-1", 2, "cpu", fp, {"command": "test"})
    assert [r.metric for r in recs] == ["sps", "time/call"]
    expected_hash = definition_hash("fake", 1, {"size": 4, "hidden": [8, 8], "name": "x"})  # the defaults, not this run's
    for r in recs:
        assert r.definition_hash == expected_hash
        assert (r.run_id, r.benchmark, r.repeat, r.seed, r.device, r.fingerprint) == ("run-1", "fake", 2, 3, "cpu", fp)
        assert r.meta["command"] == "test"
    assert recs[0].params == {"size": 9, "hidden": [8, 8], "name": "x"}
    assert recs[1].params == {"size": 9, "hidden": [8, 8], "name": "x", "impl": "numpy"}  # the metric's case parameters
    assert (
        recs[0].meta == {"command": "test", "note": "m", "report": "training"}
        and recs[1].samples == [0.1, 0.2]
        and recs[1].x == [1.0, 2.0]
    )
    assert (recs[0].unit, recs[0].direction, recs[0].samples) == ("steps/s", "higher", [103.0])
    # the hash names the definition: a new version is a different benchmark
    bumped = to_records(_spec(spec.run, version=2), cfg, _metrics(cfg), "r", 0, "cpu", fp, {})
    assert bumped[0].definition_hash != expected_hash


def test_every_repeat_written_with_its_seed(tmp_path: Path) -> None:
    seen: list[tuple[int, RunContext]] = []

    def run(cfg: _Cfg, ctx: RunContext) -> list[Metric]:
        seen.append((cfg.seed, ctx))
        return _metrics(cfg)

    writer = RunWriter(tmp_path)
    extra = [Metric("startup_s", "s", "lower", [0.5])]
    outcome = run_benchmark(
        _spec(run),
        _Cfg(seed=5),
        writer,
        repeats=3,
        device="cpu",
        callback_factory=lambda k: f"cb{k}",
        meta={"command": "t"},
        first_repeat_extra=extra,
    )
    assert outcome.error is None and not outcome.interrupted and outcome.repeats_done == 3
    assert [s for s, _ in seen] == [5, 6, 7]
    assert [ctx.callback for _, ctx in seen] == ["cb0", "cb1", "cb2"] and all(ctx.device == "cpu" for _, ctx in seen)
    assert outcome.records_path == writer.path and outcome.run_id == writer.run_id
    recs = read_records(writer.path)
    measured = [r for r in recs if not r.metric.startswith("machine/")]
    assert sorted((r.repeat, r.seed, r.metric) for r in measured) == sorted(
        [(0, 5, "startup_s")] + [(k, 5 + k, m) for k in range(3) for m in ("sps", "time/call")]
    )
    # every repeat also says what else the machine was doing during it
    load = [r for r in recs if r.metric == "machine/other_cpu"]
    assert sorted(r.repeat for r in load) == [0, 1, 2] and all(0.0 <= r.samples[0] <= 1.0 for r in load)
    assert all(r.meta["repeats"] == 3 and r.meta["command"] == "t" and r.run_id == writer.run_id for r in recs)
    assert [m[0].name for m in outcome.metrics] == ["startup_s", "sps", "sps"]


def test_failing_repeat_keeps_the_finished_ones(tmp_path: Path) -> None:
    def run(cfg: _Cfg, ctx: RunContext) -> list[Metric]:
        if cfg.seed == 1:
            raise RuntimeError("env worker died")
        return _metrics(cfg)

    writer = RunWriter(tmp_path)
    outcome = run_benchmark(_spec(run), _Cfg(), writer, repeats=3, device="cpu")
    assert outcome.repeats_done == 1 and not outcome.interrupted
    assert outcome.error == "repeat 1 (seed 1) raised RuntimeError: env worker died"
    assert outcome.error_log is not None and outcome.error_log.parent == tmp_path
    log = outcome.error_log.read_text()
    assert "Traceback" in log and "env worker died" in log
    assert {r.repeat for r in read_records(writer.path)} == {0}


def test_ctrl_c_keeps_the_finished_repeats(tmp_path: Path) -> None:
    def run(cfg: _Cfg, ctx: RunContext) -> list[Metric]:
        if cfg.seed == 2:
            raise KeyboardInterrupt
        return _metrics(cfg)

    writer = RunWriter(tmp_path)
    outcome = run_benchmark(_spec(run), _Cfg(), writer, repeats=5, device="cpu")
    assert outcome.interrupted and outcome.error is None and outcome.repeats_done == 2
    assert {r.repeat for r in read_records(writer.path)} == {0, 1}


def test_usage_error_propagates(tmp_path: Path) -> None:
    def run(cfg: _Cfg, ctx: RunContext) -> list[Metric]:
        raise UsageError("bad env id")

    writer = RunWriter(tmp_path)
    with pytest.raises(UsageError, match="bad env id"):
        run_benchmark(_spec(run), _Cfg(), writer, repeats=2, device="cpu")
    assert not writer.path.exists()


def test_profiler_runs_around_each_repeat_even_a_failing_one(tmp_path: Path) -> None:
    calls: list[str] = []

    class Profiler:
        def start(self) -> None:
            calls.append("start")

        def stop(self) -> None:
            calls.append("stop")

    def run(cfg: _Cfg, ctx: RunContext) -> list[Metric]:
        assert ctx.profiler is profiler and calls[-1] == "start"
        calls.append(f"run{cfg.seed}")
        if cfg.seed == 1:
            raise ValueError("x")
        return _metrics(cfg)

    profiler = Profiler()
    outcome = run_benchmark(_spec(run), _Cfg(), RunWriter(tmp_path), repeats=3, device="cpu", profiler=profiler)
    assert calls == ["start", "run0", "stop", "start", "run1", "stop"] and outcome.repeats_done == 1

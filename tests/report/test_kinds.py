"""Report kinds: the runner records its benchmark's kind, one table maps a kind to its renderer, and sniffing is only
the fallback for records that name no kind."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from rlbench.report.kinds import KINDS, MATPLOTLIB_KINDS, kind_of, render_run, renderer, sniff
from rlbench.results.metrics import Metric
from rlbench.results.records import Record
from rlbench.results.store import RunWriter
from rlbench.run.registry import BenchmarkSpec
from rlbench.run.runner import to_records


def _rec(metric: str = "time/call", meta: dict | None = None, **params: object) -> Record:
    return Record(
        run_id="20260101T000000Z-aaaaaa",
        timestamp="t",
        benchmark="b",
        params={"group": "g", "impl": "fast", "size": "8", **params},
        definition_hash="h",
        metric=metric,
        unit="s",
        direction="lower",
        samples=[1e-6, 2e-6, 3e-6],
        meta=meta or {"elements": 8},
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_module_offers_the_same_three_functions(kind: str) -> None:
    module = renderer(kind)
    for name in ("render", "summary", "print_summary"):
        assert callable(getattr(module, name, None)), f"{KINDS[kind]} has no {name}()"
    assert list(inspect.signature(module.render).parameters)[:3] == ["records", "chart_stem", "context"]


@dataclass
class _Config:
    seed: int = 0


def test_the_runner_writes_the_spec_kind_into_every_record() -> None:
    spec = BenchmarkSpec(name="mine", summary="s", config_factory=_Config, run=lambda c, ctx: [], report="micro")
    metrics = [
        Metric("time/call", "s", "lower", [1e-6], params={"group": "g", "impl": "x", "size": "1"}),
        Metric("sps", "steps/s", "higher", [5.0]),
    ]
    records = to_records(spec, _Config(), metrics, "r", 0, "cpu", {}, {"command": "c"})
    assert {r.meta["report"] for r in records} == {"micro"} and records[0].meta["command"] == "c"


def test_the_recorded_kind_wins_over_what_the_metrics_look_like() -> None:
    # an `sps` metric would never sniff as micro; the kind the run wrote decides
    recs = [_rec(meta={"report": "micro", "elements": 8}), _rec("sps", meta={"report": "micro"})]
    assert sniff(recs) == "training" and kind_of(recs) == "micro"


def test_records_without_a_kind_are_sniffed_and_an_unknown_kind_falls_back() -> None:
    assert kind_of([_rec()]) == "micro"  # imported pytest-benchmark JSON names no kind
    assert kind_of([_rec(meta={"report": "from-a-newer-rlbench"})]) == "micro"
    assert kind_of([replace(_rec("sps"), meta={"kind": "profile"})]) == "profile"
    assert kind_of([_rec("sps"), _rec("updates")]) == "offpolicy"


def test_render_run_writes_the_report_and_charts_and_summarizes(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "st", "20260101T000000Z-aaaaaa")
    writer.write([_rec(meta={"report": "micro", "elements": 8}), _rec(meta={"report": "micro", "elements": 8}, impl="slow")])
    out = tmp_path / "r.md"
    rendered = render_run(writer.path, out)
    assert rendered.kind == "micro" and out.read_text() == rendered.text
    assert (tmp_path / "r-g-call.png").is_file()
    cases = rendered.summary()["cases"]
    assert {c["impl"] for c in cases} == {"fast", "slow"} and cases[0]["median_s"] == pytest.approx(2e-6)


def test_the_kinds_that_start_a_chart_worker_are_those_whose_reports_hold_matplotlib_charts() -> None:
    """`rlbench run` starts a worker importing matplotlib (about a second of CPU) only for MATPLOTLIB_KINDS: the kinds
    whose `render` may return a scaling or timeline chart, as its return annotation says."""
    returns = {kind: str(inspect.signature(renderer(kind).render).return_annotation) for kind in KINDS}
    drawn = {kind for kind, annotation in returns.items() if "ScalingChart" in annotation or "TimelineChart" in annotation}
    assert drawn == set(MATPLOTLIB_KINDS) == {"micro", "pipeline", "transports"}

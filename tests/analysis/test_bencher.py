"""`rlbench export --format bencher`: Bencher Metric Format (BMF) JSON, medians with their 95% intervals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rlbench.analysis.interop import to_bencher
from rlbench.cli import main
from rlbench.core.errors import DataError
from rlbench.results.records import Record
from rlbench.results.store import RunWriter

COMMON = dict(run_id="r", timestamp="2026-11-22T00:00:00+00:00", definition_hash="h")


def _record(metric: str, samples: list[float], params: dict | None = None, **kw: object) -> Record:
    fields = dict(
        COMMON,
        benchmark="gae",
        params={"T": 128} if params is None else params,
        metric=metric,
        unit="s",
        direction="lower",
        samples=samples,
    )
    fields.update(kw)
    return Record(**fields)


def check_bmf(doc: object) -> None:
    """The BMF JSON schema (bencher.dev/bmf.json): objects of objects of {value: number, lower_value?, upper_value?}."""
    assert isinstance(doc, dict) and doc
    for bench, measures in doc.items():
        assert isinstance(bench, str) and bench and isinstance(measures, dict) and measures
        for measure, metric in measures.items():
            assert isinstance(measure, str) and 0 < len(measure) <= 64
            assert isinstance(metric, dict) and "value" in metric and set(metric) <= {"value", "lower_value", "upper_value"}
            for v in metric.values():
                assert isinstance(v, float) and math.isfinite(v)


def test_medians_and_intervals_per_case_and_metric() -> None:
    times = [3e-5, 4e-5, 5e-5, 4e-5, 4.5e-5]
    records = [
        _record("time/call", times),
        _record("sps", [100.0, 120.0, 110.0], unit="steps/s", direction="higher"),
        _record("time/call", [9e-5, 8e-5, 1e-4], params={"T": 256}),
    ]
    doc = json.loads(json.dumps(to_bencher(records)))
    check_bmf(doc)
    assert set(doc) == {"gae[T=128]", "gae[T=256]"}  # one Bencher benchmark per case, named by what differs
    m = doc["gae[T=128]"]["time/call"]
    assert m["value"] == pytest.approx(float(np.median(times)))
    assert min(times) <= m["lower_value"] <= m["value"] <= m["upper_value"] <= max(times)
    assert m["lower_value"] < m["upper_value"]  # five different samples: the median is not pinned
    assert doc["gae[T=128]"]["sps"]["value"] == pytest.approx(110.0)
    assert doc["gae[T=256]"]["time/call"]["value"] == pytest.approx(9e-5)


def test_one_case_is_named_by_its_benchmark_and_one_sample_has_no_bounds() -> None:
    doc = to_bencher([_record("wall_s", [2.5]), _record("ops/iteration", [40.0, 40.0], unit="count")])
    check_bmf(doc)
    counted = {"value": 40.0, "lower_value": 40.0, "upper_value": 40.0}
    assert doc == {"gae": {"wall_s": {"value": 2.5}, "ops/iteration": counted}}


def test_context_and_empty_metrics_are_left_out() -> None:
    records = [
        _record("wall_s", [1.0, 1.2]),
        _record("machine/other_cpu", [0.3, 0.4], unit="fraction", direction="none"),
        _record("sps", [math.nan, math.nan], unit="steps/s", direction="higher"),
    ]
    assert set(to_bencher(records)["gae"]) == {"wall_s"}
    with pytest.raises(DataError):
        to_bencher([])
    with pytest.raises(DataError, match="no metric with a finite sample"):
        to_bencher([_record("sps", [math.nan])])


def test_cli_export_bencher(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    RunWriter(tmp_path / "st", run_id="20261122T000000Z-abcdef").write([_record("wall_s", [1.0, 1.1, 1.2])])
    assert main(["export", str(tmp_path / "st"), "--format", "bencher"]) == 0
    doc = json.loads(capsys.readouterr().out)
    check_bmf(doc)
    assert doc["gae"]["wall_s"]["value"] == pytest.approx(1.1)
    out = tmp_path / "bmf.json"
    assert main(["export", str(tmp_path / "st"), "--format", "bencher", "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == doc
    assert main(["export", str(tmp_path / "missing"), "--format", "bencher"]) == 2

"""Export to and import from pytest-benchmark / github-action-benchmark formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlbench.analysis.interop import from_pytest_benchmark, to_github_action, to_pytest_benchmark
from rlbench.cli import main
from rlbench.core.errors import DataError
from rlbench.results.records import Record
from rlbench.results.store import read_records


def _records() -> list[Record]:
    common = dict(run_id="r", timestamp="2026-11-22T00:00:00+00:00", benchmark="gae", params={"T": 128}, definition_hash="h")
    return [
        Record(metric="time/call", unit="s", direction="lower", samples=[3e-5, 4e-5, 5e-5, 4e-5], **common),
        Record(metric="sps", unit="steps/s", direction="higher", samples=[100.0, 120.0], **common),
    ]


def test_pytest_benchmark_round_trip() -> None:
    out = to_pytest_benchmark(_records())
    assert [b["name"] for b in out["benchmarks"]] == ["gae::time/call"]  # only time-valued metrics
    stats = out["benchmarks"][0]["stats"]
    assert stats["median"] == pytest.approx(4e-5) and stats["min"] == 3e-5 and stats["rounds"] == 4
    assert stats["q1"] == pytest.approx(float(np.quantile([3e-5, 4e-5, 5e-5, 4e-5], 0.25)))
    back = from_pytest_benchmark(json.loads(json.dumps(out)))
    assert back[0].samples == [3e-5, 4e-5, 5e-5, 4e-5] and back[0].unit == "s" and back[0].direction == "lower"
    assert back[0].params == {"T": 128} and not back[0].meta["summary_only"]


def test_import_without_raw_data_keeps_the_median() -> None:
    data = {
        "benchmarks": [{"name": "test_x", "fullname": "t.py::test_x", "params": None, "stats": {"median": 2.0, "mean": 2.1}}]
    }
    (rec,) = from_pytest_benchmark(data)
    assert rec.samples == [2.0] and rec.meta["summary_only"] and rec.benchmark == "t.py::test_x"


def test_github_action_format() -> None:
    bigger = to_github_action(_records(), "higher")
    assert bigger == [{"name": "gae::sps", "unit": "steps/s", "value": 110.0, "range": "IQR 10", "extra": "n=2 run r"}]
    assert [e["name"] for e in to_github_action(_records(), "lower")] == ["gae::time/call"]


def test_cli_import_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "pb.json"
    src.write_text(json.dumps(to_pytest_benchmark(_records())))
    assert main(["import", str(src), "--store", str(tmp_path / "st")]) == 0
    assert read_records(tmp_path / "st")[0].metric == "time/call"
    assert main(["export", str(tmp_path / "st"), "--format", "pytest-benchmark", "-o", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["benchmarks"][0]["stats"]["rounds"] == 4
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    assert main(["import", str(tmp_path / "bad.json")]) == 2
    assert main(["export", str(tmp_path / "st"), "--format", "github-action"]) == 2
    err = capsys.readouterr().err
    assert "not pytest-benchmark JSON" in err and "--direction" in err
    with pytest.raises(DataError):
        from_pytest_benchmark([1, 2])

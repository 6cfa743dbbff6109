"""Export to and import from pytest-benchmark / github-action-benchmark formats."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# --- issue 57: import accepts only what the store reads back, and says what is wrong ------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
#: where a fault goes: a path into a valid pytest-benchmark document (a last element None: the whole list or object)
WHERE = [
    ("machine_info",),
    ("machine_info", "cpu"),
    ("machine_info", "cpu", "count"),
    ("machine_info", "cpu", "brand_raw"),
    ("machine_info", "system"),
    ("machine_info", "python_version"),
    ("commit_info",),
    ("commit_info", "id"),
    ("commit_info", "dirty"),
    ("datetime",),
    ("version",),
    ("benchmarks",),
    ("benchmarks", 0),
    ("benchmarks", 0, "name"),
    ("benchmarks", 0, "fullname"),
    ("benchmarks", 0, "group"),
    ("benchmarks", 0, "params"),
    ("benchmarks", 0, "extra_info"),
    ("benchmarks", 0, "stats"),
    ("benchmarks", 0, "stats", "median"),
    ("benchmarks", 0, "stats", "data"),
    ("benchmarks", 0, "stats", "data", 1),
    ("benchmarks", 0, "stats", "min"),
]


def _valid() -> dict:
    return {
        "machine_info": {"cpu": {"brand_raw": "CPU", "count": 2}, "machine": "x86_64", "system": "Linux", "release": "6"},
        "commit_info": {"id": "abc", "dirty": False, "project": "p"},
        "datetime": "2026-01-02T03:04:05.000006+00:00",
        "version": "5.1.0",
        "benchmarks": [
            {
                "name": "test_a[8]",
                "fullname": "t.py::test_a[8]",
                "group": None,
                "params": {"n": 8},
                "extra_info": {"impl": "numpy"},
                "stats": {"min": 1e-6, "median": 2e-6, "data": [1e-6, 2e-6, 3e-6]},
            }
        ],
    }


def _put(doc: dict, where: tuple, value: object) -> dict:
    node = doc
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(faults=st.lists(st.tuples(st.sampled_from(WHERE), JSON_VALUES), min_size=1, max_size=3))
def test_import_stores_only_what_every_reader_reads_back_or_says_what_is_wrong(faults: list) -> None:
    """Whatever the file holds, `rlbench import` either stores records that every reader reads back (timings finite and
    at least 0) or exits 2 with one line that is not an internal error; it never stores a run the readers skip."""
    doc = _valid()
    for where, value in faults:
        try:
            _put(doc, where, value)
        except (KeyError, IndexError, TypeError):  # an earlier fault replaced the parent: nothing to put it in
            pass
    with tempfile.TemporaryDirectory() as tmp:
        src, store, err = Path(tmp) / "pb.json", Path(tmp) / "st", io.StringIO()
        src.write_text(json.dumps(doc))  # NaN and infinities as JSON's NaN / Infinity, which json.loads reads back
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["import", str(src), "--store", str(store)])
        message = err.getvalue().strip()
        if code == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a reader that skips the run warns: that is the defect
                records = read_records(store)
            assert records and all(r.metric == "time/call" for r in records)
            assert all(math.isfinite(v) and v >= 0 for r in records for v in r.samples)
        else:
            assert code == 2 and message.startswith("rlbench: error:") and message.count("\n") == 0, message
            assert "internal error" not in message, message
            assert not store.exists() or not list(store.glob("*.jsonl"))  # nothing half-imported


@pytest.mark.parametrize(
    ("where", "value", "words"),
    [
        (("benchmarks", 0, "params"), "n=8", "benchmark 't.py::test_a[8]': params must be a JSON object"),
        (("machine_info",), [1], "machine_info must be a JSON object"),
        (("benchmarks", 0, "fullname"), 7, "benchmark #0: fullname must be a string, got 7"),
        (("datetime",), 7, "datetime must be an ISO 8601 time string, got 7"),
        (("benchmarks", 0, "stats", "data", 1), float("nan"), "stats.data[1] is NaN: a timing is a finite number"),
        (("benchmarks", 0, "stats", "data", 1), float("inf"), "stats.data[1] is inf"),
        (("benchmarks", 0, "stats", "data", 1), -2e-6, "stats.data[1] is -2e-06"),
    ],
)
def test_import_names_the_benchmark_and_field_that_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: tuple, value: object, words: str
) -> None:
    src = tmp_path / "pb.json"
    src.write_text(json.dumps(_put(_valid(), where, value)))
    assert main(["import", str(src), "--store", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlbench: error:") and err.count("\n") == 0 and words in err, err
    assert not (tmp_path / "st").exists() or not list((tmp_path / "st").glob("*.jsonl"))


def test_import_of_a_folder_says_to_give_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    (saved / "0001_first.json").write_text(json.dumps(_valid()))
    assert main(["import", str(tmp_path / ".benchmarks"), "--store", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a folder: give one pytest-benchmark JSON file" in err, err
    assert "0001_first.json" in err and "IsADirectoryError" not in err

"""One odd file never blocks a directory: any decode failure is "unreadable", and only regular files are read
(issue 30, class 6; and `--run ''`, class 9)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlbench.core.errors import DataError
from rlbench.results.store import RecordsWarning, RunWriter, read_file, read_records, read_run
from tests.faults.fault_helpers import one_line_error, record, rlbench

RUN = "20260101T000000Z-aaaaaa"
DEEP = "[" * 100_000 + "]" * 100_000 + "\n"  # valid JSON nested past the recursion limit


def _good(store: Path) -> Path:
    w = RunWriter(store, RUN)
    w.write([record(RUN, metric="sps"), record(RUN, metric="time/work", unit="s")])
    return w.path


@pytest.mark.parametrize(
    "content",
    [
        DEEP.encode(),
        b"\xff\xfe not utf-8\n",
        b'{"schema": 1, "run_id": "x", "benchmark": "b", "metric": "m", "samples": ' + DEEP.encode(),
    ],
    ids=["deeply-nested", "not-utf8", "deep-record"],
)
def test_any_decode_failure_is_unreadable_and_skipped(store: Path, content: bytes) -> None:
    _good(store)
    odd = store / "20991231T000000Z-ffffff.jsonl"
    odd.write_bytes(content)
    with pytest.raises(DataError, match="20991231T000000Z-ffffff"):
        read_file(odd)
    with pytest.warns(RecordsWarning, match="skipped .*20991231T000000Z-ffffff"):
        assert {r.run_id for r in read_records(store)} == {RUN}
    with pytest.warns(RecordsWarning):
        assert read_run(store)[0].run_id == RUN


def test_fifos_and_devices_are_refused_not_read(store: Path) -> None:
    _good(store)
    os.mkfifo(store / "20991231T000000Z-ffffff.jsonl")  # no writer: reading it would wait forever
    with pytest.raises(DataError, match="not a regular file"):
        read_file(store / "20991231T000000Z-ffffff.jsonl")
    with pytest.raises(DataError, match="not a regular file"):
        read_file(Path("/dev/zero"))  # would never end
    with pytest.warns(RecordsWarning, match="skipped"):
        assert {r.run_id for r in read_records(store)} == {RUN}


def test_report_of_a_store_with_a_deeply_nested_line_renders(tmp_path: Path) -> None:
    _good(tmp_path / "s")
    (tmp_path / "s" / "20991231T000000Z-ffffff.jsonl").write_text(DEEP)
    proc = rlbench(["report", "s", "-o", "-"], tmp_path, timeout=60)
    assert proc.returncode == 0 and "# rlbench bottleneck report" in proc.stdout, proc.stderr
    assert proc.stderr.startswith("rlbench: warning: skipped") and "internal error" not in proc.stderr


def test_report_run_beside_a_fifo_and_of_dev_zero_never_hang(tmp_path: Path) -> None:
    _good(tmp_path / "s")
    os.mkfifo(tmp_path / "s" / "20991231T000000Z-ffffff.jsonl")
    proc = rlbench(["report", "s", "--run", RUN[:18], "-o", "-"], tmp_path, timeout=30)
    assert proc.returncode == 0 and "# rlbench bottleneck report" in proc.stdout, proc.stderr
    assert "not a regular file" in one_line_error(rlbench(["report", "/dev/zero", "-o", "-"], tmp_path, timeout=30))
    assert "not a regular file" in one_line_error(rlbench(["report", "s", "--run", "20991231", "-o", "-"], tmp_path, 30))
    assert "not a regular file" in one_line_error(rlbench(["import", "/dev/zero", "--store", "s"], tmp_path, timeout=30))


def test_empty_run_id_is_bad_input(tmp_path: Path) -> None:
    _good(tmp_path / "s")
    err = one_line_error(rlbench(["report", "s", "--run", "", "-o", "-"], tmp_path, timeout=60))
    assert "empty run id" in err
    with pytest.raises(DataError, match="empty run id"):
        read_run(tmp_path / "s", "")


@pytest.mark.slow
def test_run_into_a_store_with_an_undecodable_file_writes_its_report(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(
        "import rlbench\n\n@rlbench.benchmark\ndef tiny(n: int = 3) -> dict:\n    return {'value': float(n)}\n"
    )
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "20000101T000000Z-000000.jsonl").write_text(DEEP)
    (tmp_path / "s" / "20000101T000000Z-000001.jsonl").write_bytes(b"\xff\xfe\n")
    proc = rlbench(["run", "bench.py:tiny", "--quiet", "--store", "s", "--json"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(tmp_path / out["report"]).is_file() and Path(tmp_path / out["records"]).is_file()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "list", "deep", "wrong-shape"])
def test_calibrate_render_reads_regular_json_files_only_and_says_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Issue 57: `calibrate --render` of a FIFO hung, of /dev/zero grew without bound, of `[]` or deeply nested JSON
    was an "internal error"."""
    from rlbench.cli import main

    path = tmp_path / "cal.json"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: an open for reading would wait forever
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text({"list": "[]", "deep": DEEP, "wrong-shape": '{"benchmarks": {"ppo": 3}}'}[kind])
    assert main(["calibrate", "--render", str(path), "--out", str(tmp_path / "cal.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlbench: error: --render") and err.count("\n") == 0, err
    assert "internal error" not in err and str(path) in err
    words = {"fifo": "a FIFO", "dev-zero": "a character device", "folder": "a directory"}.get(kind, "calibration's results")
    assert words in err
    assert not (tmp_path / "cal.md").exists()

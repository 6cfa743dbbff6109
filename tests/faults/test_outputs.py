"""An output path never replaces what is there: a link, FIFO or device stays as it was (issue 30, class 1).

The rule (``rlbench.results.outputs``): a regular or absent path is written whole through a renamed temporary file; a
character device (``/dev/null``) is written through and nothing is put beside it; a link, FIFO, socket, block device
or directory is refused with exit 2 and one line, before any work starts.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlbench.core.errors import StoreError, UsageError
from rlbench.profiling.trace import write_chrome_trace
from rlbench.results.outputs import check_output, write_output
from rlbench.results.store import RunWriter
from tests.faults.fault_helpers import one_line_error, record, rlbench

BENCH = """
import rlbench

@rlbench.benchmark
def tiny(n: int = 3) -> dict:
    with rlbench.phase("work"):
        sum(range(1000))
    return {"value": float(n)}
"""


def _odd_paths(tmp_path: Path) -> dict[str, Path]:
    """A symlink to a precious file, a dangling symlink, a FIFO and a directory."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    link, dangling, fifo, folder = tmp_path / "link", tmp_path / "dangling", tmp_path / "fifo", tmp_path / "folder"
    link.symlink_to(precious)
    dangling.symlink_to(tmp_path / "nowhere")
    os.mkfifo(fifo)
    folder.mkdir()
    return {"link": link, "dangling": dangling, "fifo": fifo, "folder": folder}


def _unchanged(tmp_path: Path) -> None:
    assert (tmp_path / "link").is_symlink() and (tmp_path / "precious.txt").read_text() == "keep me"
    assert (tmp_path / "dangling").is_symlink() and not (tmp_path / "nowhere").exists()
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    assert (tmp_path / "folder").is_dir() and not list((tmp_path / "folder").iterdir())
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".part"))]


def test_the_writer_refuses_links_fifos_and_directories(tmp_path: Path) -> None:
    for name, path in _odd_paths(tmp_path).items():
        with pytest.raises(UsageError, match="rlbench never replaces one") as err:
            check_output(path, "--report")
        assert str(path) in str(err.value), name
        with pytest.raises(UsageError):  # a FIFO without a reader would block an open for writing: refused at once
            write_output(path, "x", "--report")
    _unchanged(tmp_path)


def test_a_regular_file_is_replaced_whole_and_a_device_is_written_through(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "report.md"
    write_output(out, "one")
    write_output(out, "two")
    assert out.read_text() == "two" and [p.name for p in out.parent.iterdir()] == ["report.md"]
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)  # the umask's mode, not a temporary file's
    before = os.stat("/dev/null")
    write_output("/dev/null", "nothing")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev


def test_trace_never_replaces_a_link_fifo_or_device(tmp_path: Path) -> None:
    r = SimpleNamespace(started=0.0, iterations=[], trace=[], layers={}, trace_dropped=0)  # what chrome_trace reads
    paths = _odd_paths(tmp_path)
    for name in ("link", "dangling", "fifo"):
        with pytest.raises(UsageError, match="--trace"):
            write_chrome_trace(r, paths[name])
    _unchanged(tmp_path)
    before = os.stat("/dev/null").st_ino
    write_chrome_trace(r, Path("/dev/null"))  # written through, not renamed onto
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.stat("/dev/null").st_ino == before
    out = write_chrome_trace(r, tmp_path / "t.json")
    assert "traceEvents" in json.loads(out.read_text()) and not (tmp_path / "t.json.part").exists()


def test_a_run_file_that_is_a_link_or_fifo_is_never_written_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    w = RunWriter(tmp_path / "s", "20260101T000000Z-aaaaaa")
    w.path.symlink_to(target)
    with pytest.raises(StoreError, match="cannot write results"):
        w.write([record()])
    assert target.read_text() == ""
    w2 = RunWriter(tmp_path / "s", "20260101T000000Z-bbbbbb")
    os.mkfifo(w2.path)
    with pytest.raises(StoreError, match=r"not a regular file|cannot write results"):  # at once: no reader to wait for
        w2.write([record()])


def _store_with_a_run(tmp_path: Path) -> Path:
    store = tmp_path / "s"
    RunWriter(store, "20260101T000000Z-aaaaaa").write([record(metric="sps"), record(metric="time/work", unit="s")])
    return store


@pytest.mark.parametrize("kind", ["link", "dangling", "fifo", "folder"])
def test_report_output_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    _store_with_a_run(tmp_path)
    path = _odd_paths(tmp_path)[kind]
    err = one_line_error(rlbench(["report", "s", "-o", str(path)], tmp_path, timeout=60))
    assert str(path) in err and "never replaces" in err
    _unchanged(tmp_path)


def test_export_to_a_fifo_is_refused_not_blocked(tmp_path: Path) -> None:
    _store_with_a_run(tmp_path)
    fifo = _odd_paths(tmp_path)["fifo"]
    proc = rlbench(["export", "s", "--format", "pytest-benchmark", "-o", str(fifo)], tmp_path, timeout=60)
    assert "FIFO" in one_line_error(proc)


def test_report_to_dev_null_draws_nothing_beside_it(tmp_path: Path) -> None:
    _store_with_a_run(tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in Path("/dev").glob("null?*")}
    proc = rlbench(["report", "s", "-o", "/dev/null"], tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert {p.name: p.stat().st_mtime_ns for p in Path("/dev").glob("null?*")} == before


@pytest.mark.slow
def test_run_with_report_dev_null_writes_records_and_nothing_beside_dev_null(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(BENCH)
    before = {p.name: p.stat().st_mtime_ns for p in Path("/dev").glob("null?*")}  # another process's leftovers stay
    proc = rlbench(["run", "bench.py:tiny", "--quiet", "--store", "s", "--report", "/dev/null"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.stat().st_mtime_ns for p in Path("/dev").glob("null?*")} == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert len(list((tmp_path / "s").glob("*.jsonl"))) == 1


@pytest.mark.slow
def test_run_with_a_report_symlink_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(BENCH)
    link = _odd_paths(tmp_path)["link"]
    err = one_line_error(rlbench(["run", "bench.py:tiny", "--quiet", "--store", "s", "--report", str(link)], tmp_path))
    assert "symbolic link" in err
    assert not list((tmp_path / "s").glob("*.jsonl")) if (tmp_path / "s").exists() else True
    _unchanged(tmp_path)

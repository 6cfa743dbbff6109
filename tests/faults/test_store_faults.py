"""A torn or corrupt file never poisons a store: complete records survive, and appends are all-or-nothing."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rlbench.core.errors import DataError, StoreError
from rlbench.results.store import RecordsWarning, RunWriter, read_file, read_records, read_run
from tests import child_env
from tests.faults.fault_helpers import one_line_error, record, rlbench


def _write(store: Path, run_id: str, n: int) -> Path:
    w = RunWriter(store, run_id)
    for k in range(n):
        w.write([record(run_id, repeat=k, seed=k)])
    return w.path


def test_torn_last_line_is_skipped_with_a_warning_naming_the_file(store: Path) -> None:
    path = _write(store, "20260101T000000Z-aaaaaa", 3)
    full = path.read_bytes()
    path.write_bytes(full + full.splitlines(keepends=True)[0][:57])  # a fourth record cut mid-write
    with pytest.warns(RecordsWarning, match=f"{path.name}:4: skipped a torn last record"):
        recs = read_file(path)
    assert [r.repeat for r in recs] == [0, 1, 2]


def test_corrupt_middle_line_is_refused_with_file_and_line(store: Path) -> None:
    path = _write(store, "20260101T000000Z-aaaaaa", 3)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json\n" + lines[2])
    with pytest.raises(DataError, match=rf"{path.name}:2: not JSON"):
        read_file(path)


def test_one_unreadable_file_does_not_block_the_other_runs(store: Path) -> None:
    good = _write(store, "20260101T000000Z-aaaaaa", 2)
    (store / "20260102T000000Z-bbbbbb.jsonl").write_text("garbage\n")
    with pytest.warns(RecordsWarning, match="skipped .*20260102T000000Z-bbbbbb.jsonl"):
        recs = read_records(store)
    assert {r.run_id for r in recs} == {"20260101T000000Z-aaaaaa"}
    # a run asked for by id opens only its own file: no warning at all
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_run(store, "20260101T000000Z-aaaa")) == 2
    # the latest run is the newest readable one
    with pytest.warns(RecordsWarning):
        assert read_run(store)[0].run_id == "20260101T000000Z-aaaaaa"
    assert good.is_file()


@pytest.mark.slow
def test_append_is_all_or_nothing_at_the_file_size_limit(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stops the third append: the file keeps exactly the first two records, no partial line."""
    code = f"""
import resource
from tests.faults.fault_helpers import record
from rlbench.results.store import RunWriter
from rlbench.core.errors import StoreError
w = RunWriter({str(tmp_path)!r}, "20260101T000000Z-aaaaaa")
w.write([record(repeat=0)])
size = w.path.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (int(size * 2.5), int(size * 2.5)))
w.write([record(repeat=1)])
try:
    w.write([record(repeat=2)])
except StoreError as exc:
    print("refused:", exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=child_env())
    assert "refused: cannot write results" in out.stdout, out.stdout + out.stderr
    path = tmp_path / "20260101T000000Z-aaaaaa.jsonl"
    text = path.read_text()
    assert text.endswith("\n") and [json.loads(line)["repeat"] for line in text.splitlines()] == [0, 1]


@pytest.mark.slow
def test_disk_full_run_says_which_repeats_were_saved(tmp_path: Path) -> None:
    """A real `rlbench run` whose store fills up: exit 2, one line naming the saved repeats, and they load."""
    probe = rlbench(
        ["run", "ppo-cartpole", "--total-steps", "1024", "--eval-episodes", "1", "--quiet", "--store", "p"], tmp_path
    )
    assert probe.returncode == 0, probe.stderr
    per_repeat = next((tmp_path / "p").glob("*.jsonl")).stat().st_size
    limit = int(per_repeat * 2.5)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlbench",
            "run",
            "ppo-cartpole",
            "--total-steps",
            "1024",
            "--eval-episodes",
            "1",
            "--repeats",
            "4",
            "--quiet",
            "--store",
            "s",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        preexec_fn=cap,
    )
    err = one_line_error(proc)
    assert "while saving repeat 2" in err and "repeats 0-1 are saved in" in err, err
    assert sorted({r.repeat for r in read_records(tmp_path / "s")}) == [0, 1]


@pytest.mark.slow
def test_report_with_run_id_ignores_a_corrupt_sibling(tmp_path: Path) -> None:
    run = rlbench(
        ["run", "ppo-cartpole", "--total-steps", "1024", "--eval-episodes", "1", "--quiet", "--json", "--store", "s"], tmp_path
    )
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)["run_id"]
    (tmp_path / "s" / "20991231T000000Z-ffffff.jsonl").write_text('{"schema": 1, "run_id"')  # newest, torn, useless
    proc = rlbench(["report", "s", "--run", run_id, "-o", "-"], tmp_path)
    assert proc.returncode == 0 and "# rlbench bottleneck report" in proc.stdout, proc.stderr
    assert proc.stderr == ""
    latest = rlbench(["report", "s", "-o", "-"], tmp_path)  # the latest *readable* run, with a one-line warning
    assert latest.returncode == 0 and "# rlbench bottleneck report" in latest.stdout
    assert latest.stderr.strip().startswith("rlbench: warning: skipped") and latest.stderr.count("\n") == 1


def test_store_error_is_a_store_error_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="pass --store DIR"):
        RunWriter(blocker / "store")

"""``rlbench run grpo-pipeline`` end to end: records, the pipeline report with its charts, what-ifs, bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlbench.core.errors import UsageError
from rlbench.results.store import read_records
from tests.cli.cli_helpers import run_cli
from tests.faults.fault_helpers import cmdline, descendants, foreground_signals, gone, shm_held_by


@pytest.mark.slow
def test_grpo_pipeline_run_records_and_report(tmp_path):
    store = tmp_path / "store"
    args = ["run", "grpo-pipeline", "--updates", "40", "--generators", "1", "--what-if", "generators=2"]
    r = run_cli([*args, "--store", str(store), "--report", str(tmp_path / "p.md"), "--json"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["pipeline/samples_per_s"] > 0 and summary["pipeline/updates_per_s"] > 0
    records = read_records(store)
    variants = {rec.params.get("variant", "baseline") for rec in records}
    assert variants == {"baseline", "generators=2"}
    metrics = {rec.metric for rec in records if rec.params.get("variant", "baseline") == "baseline"}
    for m in ("pipeline/weight_sync_s", "pipeline/policy_lag", "pipeline/queue_depth", "pipeline/capacity/learner"):
        assert m in metrics
    assert {"actor/learner/busy_s", "actor/generator-0/wait_s", "actor/scorer/idle_s"} <= metrics
    text = (tmp_path / "p.md").read_text()
    for section in ("Bounding stage", "## What-ifs", "## Weight sync", "## Policy lag", "## Where each actor's time goes"):
        assert section in text
    assert (tmp_path / "p-timeline.png").stat().st_size > 1000 and (tmp_path / "p-lag.png").is_file()


@pytest.mark.slow
def test_bad_settings_are_one_line_errors(tmp_path):
    r = run_cli(["run", "grpo-pipeline", "--weight-sync", "store", "--store", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "--weight-sync store is not available on --engine local" in r.stderr
    r = run_cli(["run", "grpo-pipeline", "--group-size", "1", "--store", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "--group-size must be >= 2" in r.stderr


def test_an_engine_without_its_library_names_the_install(monkeypatch):
    import importlib.util

    from rlbench.engines import get_engine

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(UsageError, match=r"--engine ray needs ray, which is not installed: pip install 'rlbench\[ray\]'"):
        get_engine("ray")
    with pytest.raises(UsageError, match="unknown engine 'spark'"):
        get_engine("spark")


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_stop_every_process_and_free_shared_memory(tmp_path, sig, code):
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", "run", "grpo-pipeline", "--updates", "1000000", "--store", str(tmp_path), "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )

    def forkserver_and_roles() -> list[int]:  # the forkserver and what it forked: two generators and the scorer
        return [p for p in descendants(proc.pid) if "multiprocessing.forkserver" in cmdline(p)]

    deadline = time.monotonic() + 60
    while len(forkserver_and_roles()) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(forkserver_and_roles()) >= 4, [cmdline(p) for p in descendants(proc.pid)]
    time.sleep(1.0)
    children = descendants(proc.pid)  # the resource tracker and the plot server too
    # this run's own segment and semaphores (its queues' locks, the stop event): whatever other tests running beside
    # this one under xdist create or leave is not this run's to free
    ours = shm_held_by([proc.pid, *children])
    assert any(n.startswith("sem.") for n in ours) and any(n.startswith("rlbench_") for n in ours), ours
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "0 of 1 repeats saved" in err
    deadline = time.monotonic() + 10
    while [p for p in children if not gone(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [cmdline(p) for p in children if not gone(p)] == []
    assert sorted(n for n in ours if (Path("/dev/shm") / n).exists()) == []

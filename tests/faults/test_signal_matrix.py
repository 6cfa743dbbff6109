"""SIGTERM, SIGINT and SIGKILL at seeded random points of PPO, SAC, micro and ab runs: the same promises for all.

TERM and INT: exit 143 / 130 with one `rlbench:` line and no traceback; every finished repeat loadable and whole;
no child process, temporary directory or worktree left. KILL (nothing can clean up after it): the store still
loads, children die with rlbench, and what was left on disk is removed by the next run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from rlbench.core.children import pid_alive, remove_orphan_dirs
from rlbench.results.store import RecordsWarning, read_records
from tests.cli.cli_helpers import own_worktrees
from tests.faults.fault_helpers import descendants, foreground_signals

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RUNS = {
    "ppo": ["run", "ppo-cartpole", "--total-steps", "4096", "--eval-episodes", "1", "--repeats", "40", "--quiet"],
    "sac": [
        "run",
        "sac-pendulum",
        "--total-steps",
        "400",
        "--learning-starts",
        "300",
        "--eval-episodes",
        "1",
        "--repeats",
        "40",
        "--quiet",
    ],
    "micro": ["run", "gae", "--select", "numpy and T128xN8", "--max-time", "0.05", "--repeats", "40", "--quiet"],
    "ab": [
        "ab",
        "HEAD",
        "HEAD",
        "--rounds",
        "8",
        "--",
        "run",
        "ppo-cartpole",
        "--total-steps",
        "4096",
        "--eval-episodes",
        "1",
    ],
}
SIGNALS = {"TERM": (signal.SIGTERM, 143), "INT": (signal.SIGINT, 130), "KILL": (signal.SIGKILL, -signal.SIGKILL)}


def _tmp_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("rlbench-*")}


def _worktrees() -> list[str]:
    return own_worktrees(REPO)


def _started(run: str, cwd: Path, pid: int) -> bool:
    if run == "micro":
        return any(
            "benchmark-json" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")
            for c in descendants(pid)
            if Path(f"/proc/{c}/cmdline").exists()
        )
    if run == "ab":
        return any(Path(tempfile.gettempdir()).glob(f"rlbench-ab-{pid}-*/store-*/*.jsonl"))
    return any(f.stat().st_size > 0 for f in (cwd / "s").glob("*.jsonl"))


# one seeded point per command and signal (twelve points in all); RLBENCH_SIGNAL_SEEDS=N tries N points each
@pytest.mark.parametrize("seed", range(int(os.environ.get("RLBENCH_SIGNAL_SEEDS", "1"))))
@pytest.mark.parametrize("sig_name", sorted(SIGNALS))
@pytest.mark.parametrize("run", sorted(RUNS))
def test_signal_at_a_random_point(tmp_path: Path, run: str, sig_name: str, seed: int) -> None:
    if run == "ab" and not (REPO / ".git").exists():
        pytest.skip("ab needs rlbench's own git checkout")
    sig, code = SIGNALS[sig_name]
    cwd = REPO if run == "ab" else tmp_path
    args = RUNS[run] if run == "ab" else [*RUNS[run], "--store", str(tmp_path / "s")]
    before_tmp, before_trees = _tmp_dirs(), _worktrees() if run == "ab" else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None and not _started(run, tmp_path, proc.pid):
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before the signal could be sent"
    time.sleep(random.Random(f"{run}-{sig_name}-{seed}").uniform(0.0, 1.0))  # a random point, the same every time
    family = descendants(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    if sig != signal.SIGKILL:
        lines = err.strip().splitlines()
        assert "Traceback" not in err and lines and lines[-1].startswith("rlbench: "), err
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(pid_alive(p) for p in family):
        time.sleep(0.05)
    assert not [p for p in family if pid_alive(p)], "a child of the signalled run is still running"
    if run != "ab":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordsWarning)  # after KILL, a torn last line is skipped
            records = read_records(tmp_path / "s") if list((tmp_path / "s").glob("*.jsonl")) else []
        repeats: dict[int, set[str]] = {}
        for r in records:
            repeats.setdefault(r.repeat, set()).add(r.metric)
        assert sorted(repeats) == list(range(len(repeats)))  # no finished repeat skipped
        if repeats:
            whole = repeats[max(repeats)] - {"startup_s"}
            assert all(m >= whole for m in repeats.values())
    if sig == signal.SIGKILL:  # nothing could clean up: the next run does
        remove_orphan_dirs("rlbench-micro-")
        if run == "ab":
            from rlbench.analysis.ab import _remove_orphans

            _remove_orphans(REPO)
            remove_orphan_dirs("rlbench-ab-")
    assert _tmp_dirs() <= before_tmp, _tmp_dirs() - before_tmp
    if run == "ab":
        assert _worktrees() == before_trees

"""SIGKILL at random points (seeded, so the points are the same every run) never leaves a store unreadable."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from fault_helpers import foreground_signals

from rlbench.store import RecordsWarning, read_records

pytestmark = pytest.mark.slow

RUNS = {
    "ppo": ["run", "ppo-cartpole", "--total-steps", "4096", "--eval-episodes", "1", "--repeats", "40"],
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
    ],
}


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _alive_with(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_text().replace("\0", " ") and _running(int(cmdline.parent.name)):
                out.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            pass
    return out


def _kill_after_first_repeat(tmp_path: Path, args: list[str], delay: float) -> Path:
    store = tmp_path / "s"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args, "--quiet", "--store", str(store)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not any(f.stat().st_size for f in store.glob("*.jsonl")):
        time.sleep(0.005)
    if not any(f.stat().st_size for f in store.glob("*.jsonl")):
        proc.kill()
        pytest.fail("no repeat finished within 600 s: nothing to test the kill against")
    time.sleep(delay)  # a random point of a later repeat: training, evaluation, writing records
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    return store


@pytest.mark.parametrize("bench", sorted(RUNS))
@pytest.mark.parametrize("seed", range(3))
def test_sigkill_at_a_random_point_leaves_a_loadable_store(tmp_path: Path, bench: str, seed: int) -> None:
    delay = random.Random(f"{bench}-{seed}").uniform(0.0, 1.5)
    store = _kill_after_first_repeat(tmp_path, RUNS[bench], delay)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecordsWarning)
        records = read_records(store)  # never raises: at most a torn last line is skipped, with a warning
    assert all("torn last record" in str(w.message) for w in caught)
    by_repeat: dict[int, set[str]] = {}
    for r in records:
        by_repeat.setdefault(r.repeat, set()).add(r.metric)
    assert sorted(by_repeat) == list(range(len(by_repeat))) and by_repeat  # finished repeats, none skipped
    first = by_repeat[0] - {"startup_s"}
    assert all(metrics >= first for metrics in by_repeat.values())  # every kept repeat is whole
    # no child of the killed run goes on running (they die with their parent)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive_with(str(store)):
        time.sleep(0.05)
    assert not _alive_with(str(store))


def test_sigkill_of_a_micro_run_ends_its_pytest_child(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", "run", "gae", "--max-time", "0.5", "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=foreground_signals,
    )
    child = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child is None:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_text()
            except OSError:
                continue
            if int(fields[1]) == proc.pid and "benchmark-json" in cmdline:
                child = int(stat.parent.name)
        time.sleep(0.01)
    assert child is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(child):
        time.sleep(0.05)
    assert not _running(child), "the pytest-benchmark child outlived the killed rlbench"

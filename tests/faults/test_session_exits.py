"""``rlbench.session`` checks its store before the training and keeps what it measured however the block ends; two
threads entering it at once get exactly one session."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rlbench.results.store import read_records

SCRIPT = """
import argparse, sys, torch
import rlbench

def main():
    with rlbench.session("ends", store=sys.argv[2], params={"mode": sys.argv[1]}):
        net = torch.nn.Linear(4, 2)
        for _ in range(3):
            net(torch.ones(8, 4)).sum().backward()
        rlbench.record("loss", 0.5)
        mode = sys.argv[1]
        if mode == "exit0":
            sys.exit(0)
        if mode == "help":
            argparse.ArgumentParser().parse_args(["--help"])
        if mode == "exit4":
            sys.exit(4)
        if mode == "raise":
            raise ValueError("diverged")
        if mode == "interrupt":
            raise KeyboardInterrupt
    print("after the block")

main()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, code, ended",
    [
        ("end", 0, None),
        ("exit0", 0, None),
        ("help", 0, None),
        ("exit4", 4, "sys.exit(4)"),
        ("raise", 1, "raised ValueError: diverged"),
        ("interrupt", -signal.SIGINT, "interrupted"),  # Python re-raises SIGINT on exit
    ],
)
def test_every_way_out_of_the_block_keeps_the_measurements(tmp_path: Path, mode: str, code: int, ended: str | None) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "train.py", mode, "st"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr[-2000:]
    records = read_records(tmp_path / "st")
    by = {r.metric: r for r in records}
    assert by["loss"].samples == [0.5] and "time/train/forward" in by, sorted(by)
    assert all(r.meta.get("ended") == ended for r in records), {r.meta.get("ended") for r in records}
    assert ("after the block" in proc.stdout) == (mode == "end")


@pytest.mark.parametrize("store", ["a_file", "a_file/sub"])
def test_a_store_that_cannot_be_written_fails_before_the_training(tmp_path: Path, store: str) -> None:
    import rlbench
    from rlbench.core.errors import StoreError
    from rlbench.profiling.session import Session

    (tmp_path / "a_file").write_text("not a directory")
    trained = []
    with pytest.raises(StoreError) as info, rlbench.session("x", store=tmp_path / store):
        trained.append(1)
    assert not trained and Session.current is None
    message = str(info.value)
    assert message.count("\n") == 0 and "rlbench.session" in message and "store=" in message, message


@pytest.mark.parametrize("kw", [{"params": {"lr": object()}}, {"seed": "1"}, {"params": {"x": float("nan")}}])
def test_parameters_records_cannot_hold_fail_before_the_training(tmp_path: Path, kw: dict) -> None:
    import rlbench

    trained = []
    with pytest.raises(ValueError, match=r"^rlbench\.session: "), rlbench.session("x", store=tmp_path, **kw):
        trained.append(1)
    assert not trained and not list(tmp_path.glob("*.jsonl"))


def _race(n: int) -> tuple[list, list]:
    """``n`` threads start a session at the same moment: the sessions that started, and the refusals."""
    from rlbench.profiling.session import Session, Settings

    barrier = threading.Barrier(n)
    won: list[Session] = []
    refused: list[BaseException] = []

    def enter() -> None:
        s = Session(Settings(memory=False, libraries=False))
        barrier.wait()
        try:
            s.start()
        except RuntimeError as exc:
            refused.append(exc)
            return
        won.append(s)

    threads = [threading.Thread(target=enter) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in won:
        s.stop()
    return won, refused


def test_threads_entering_a_session_at_once_get_exactly_one_process_session_and_the_others_join_it() -> None:
    from rlbench.profiling.session import Session

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(5):
            won, refused = _race(4)
            assert len(won) == 4 and not refused, (won, refused)
            owners = [s for s in won if s.parent is None]
            assert len(owners) == 1 and all(s.parent is owners[0] for s in won if s is not owners[0])
            assert Session.current is None
    finally:
        sys.setswitchinterval(previous)


def test_a_second_session_in_the_same_thread_is_refused() -> None:
    from rlbench.profiling.session import Session, Settings

    with Session(Settings(memory=False, libraries=False)), pytest.raises(RuntimeError, match="sessions do not nest"):
        Session(Settings(memory=False, libraries=False)).start()

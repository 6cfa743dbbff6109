"""Helpers of the fault-injection tests: the real `rlbench` command in a subprocess, records to corrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rlbench.results.records import Record


def rlbench(args: list[str], cwd: Path, timeout: float = 180, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run `python -m rlbench ARGS` in `cwd` and wait for it."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "rlbench", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


def foreground_signals() -> None:
    """In the child: Ctrl-C and SIGTERM as a foreground command has them (a background shell job ignores SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The process exited ``code`` with exactly one line on stderr, starting ``rlbench: error:``."""
    err = proc.stderr.strip()
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and err.count("\n") == 0, proc.stderr[-2000:]
    assert err.startswith("rlbench: error:"), err
    return err


def record(run_id: str = "20260101T000000Z-aaaaaa", metric: str = "sps", samples: list | None = None, **kw: object) -> Record:
    """A valid record (override any field)."""
    base = dict(
        run_id=run_id,
        timestamp="2026-01-01T00:00:00+00:00",
        benchmark="bench",
        params={"n": 1},
        definition_hash="h",
        metric=metric,
        unit="steps/s",
        direction="higher",
        samples=[1.0, 2.0] if samples is None else samples,
        repeat=0,
        seed=0,
        fingerprint={"machine": {"id": "m"}, "software": {}, "git": {}},
    )
    base.update(kw)
    return Record(**base)


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...); zombies excluded."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for a reaper counts: it runs nothing and holds no memory)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def cmdline(pid: int) -> str:
    """The first 120 characters of a process's command line (``?`` once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120]
    except OSError:
        return "?"


def shm_held_by(pids: list[int]) -> set[str]:
    """The entries of /dev/shm (segments, ``sem.*`` semaphores) that the processes ``pids`` have open or mapped."""
    held: set[str] = set()
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            held.update(
                line.rsplit("/dev/shm/", 1)[1].split(" ")[0]
                for line in (proc / "maps").read_text().splitlines()
                if "/dev/shm/" in line
            )
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    held.add(target.removeprefix("/dev/shm/"))
        except OSError:  # gone meanwhile
            continue
    return held

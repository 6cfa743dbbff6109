"""Child processes that never outlive rlbench: ended on Ctrl-C, SIGTERM, a timeout or any error of ours.

:func:`run_child` is :func:`subprocess.run` with a gentler exit: when anything interrupts the wait, the child gets
SIGTERM first (so an rlbench child can keep its finished work and remove its own temporary files), then SIGKILL
if it has not exited within ``grace_s``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


def die_with_parent() -> None:
    """In a child, before exec: get SIGTERM when the parent dies, even by SIGKILL (Linux; elsewhere a no-op).

    Used as ``preexec_fn`` so that ``kill -9`` of rlbench leaves no benchmark child running on its own.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def end_child(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """Terminate ``proc`` (SIGTERM, then SIGKILL after ``grace_s``) and reap it."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def own_group_dying_with_parent() -> None:
    """In a child, before exec: lead a new process group (so rlbench can end it and everything the child starts, as a
    whole) and get SIGTERM when rlbench dies, even by SIGKILL (:func:`die_with_parent`).

    Used as ``preexec_fn`` with ``start_new_session=True``'s effect but only the group: the child stays in rlbench's
    session (its terminal), while Ctrl-C at that terminal reaches rlbench alone, which then ends the group.
    """
    os.setpgid(0, 0)
    die_with_parent()


def group_alive(pgid: int) -> bool:
    """Whether any process that has not exited is left in process group ``pgid``.

    Zombies count as gone, as in :func:`pid_alive`: a script's exited children whose parent is gone wait for init to
    reap them, and in a container whose init reaps nothing (Docker without ``--init``) they stay forever. Counting them
    made every profile of such a script wait out :func:`end_stragglers`' grace after it ended (TorchRL's DQN: 1.1 s).
    """
    if not _answers_signal_0(os.killpg, pgid):
        return False
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:  # no /proc (another system): signal 0 is all there is
        return True
    for pid in pids:
        fields = _proc_stat(pid)  # None: it just went
        if fields is not None and len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def _proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, ...), or ``None`` where it cannot be
    read (no /proc, or the process just went)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def end_stragglers(pgid: int, grace_s: float = 2.0) -> None:
    """End what is left in process group ``pgid`` once its leader has exited: SIGTERM, then SIGKILL after ``grace_s``.

    A script's ``multiprocessing.Pool`` workers or ``subprocess.Popen`` children are in its group: they never outlive
    the repeat that started them. (Zombies whose parent is gone are reaped by init; they run nothing.)
    """
    if not group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)


def end_group(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """End ``proc``, which leads its own process group (:func:`own_group_dying_with_parent`), and all of that group.

    SIGTERM goes to the leader first, so that it can save what it measured and its code can clean up as it would on
    Ctrl-C (a ``with Pool()`` block ends its workers); SIGKILL goes to the whole group after ``grace_s``. The leader
    is reaped, and whatever it left in its group is ended too (:func:`end_stragglers`).
    """
    pgid = proc.pid
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            proc.wait()
    end_stragglers(pgid, grace_s=min(grace_s, 2.0))


def watch_parent(grace_s: float = 5.0, poll_s: float = 0.2) -> None:
    """In a child that leads its own process group: when rlbench (its parent) dies, even by SIGKILL, end the group.

    A daemon thread polls the parent's pid. Once the parent is gone it sends SIGTERM to the group (the child itself
    included, so it can save what it measured), then SIGKILL to the group after ``grace_s``. This covers what
    ``PR_SET_PDEATHSIG`` cannot: the grandchildren (a ``multiprocessing.Pool``'s workers, a ``Popen`` child), and
    systems other than Linux.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        pgid = os.getpgrp()
        _signal_group(pgid, signal.SIGTERM)
        time.sleep(grace_s)
        _signal_group(pgid, signal.SIGKILL)

    threading.Thread(target=watch, name="rlbench-watch-parent", daemon=True).start()


def run_child(
    cmd: Sequence[str], *, timeout: float | None = None, grace_s: float = 10.0, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to completion with its output captured as text; end it on timeout or interruption.

    Args:
        cmd: The command.
        timeout: Seconds to wait before ending the child and raising :class:`subprocess.TimeoutExpired`.
        grace_s: Seconds between SIGTERM and SIGKILL when the child must be ended.
        **popen: Further :class:`subprocess.Popen` arguments (``cwd``, ``env``).
    """
    popen.setdefault("preexec_fn", die_with_parent)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            end_child(proc, grace_s)
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (a record written whole, a cleanup finished), then deliver them."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Put back rlbench's SIGINT and SIGTERM handlers after the block, whatever it installed at the C level.

    ``ray.init`` installs a native SIGTERM handler in the driver that logs a stack trace and exits 1: rlbench's own
    handler (exit 143 with what was saved) must stay in charge of the command.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def child_pythonpath(env: dict[str, str] | None = None) -> str:
    """``PYTHONPATH`` for a child that runs elsewhere: the working directory first, every entry made absolute.

    As under pytest, modules in the directory rlbench was started from (``mygae.py``) are importable by the code
    rlbench runs for the user, and a relative ``PYTHONPATH`` keeps meaning what it meant where the user typed it.
    """
    entries = [os.getcwd(), *((env or os.environ).get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(os.path.abspath(p) for p in entries if p))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (one owned by another user counts as alive).

    A zombie (exited, not yet reaped) counts as gone: a process killed by ``kill -9`` stays a zombie until its parent
    waits for it, and a parent that first reads the dead process's output to its end (``communicate()``) waits for
    the pipes to close, which the children watching the pid hold open.
    """
    if not _answers_signal_0(os.kill, pid):
        return False
    fields = _proc_stat(pid)  # None: no /proc (another system), or it just went
    return fields is None or fields[:1] != ["Z"]


def _answers_signal_0(send: Callable[[int, int], None], target: int) -> bool:
    """Whether ``send(target, 0)`` finds a process (one owned by another user counts)."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphan_dirs(prefix: str) -> list[str]:
    """Remove ``<tmp>/<prefix><pid>-*`` directories whose process is gone (left by a ``kill -9``); return their names.

    rlbench names its temporary directories after the pid that owns them, so the next run can tell an orphan from
    a directory another live rlbench is using.
    """
    removed = []
    for d in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        m = re.match(rf"{re.escape(prefix)}(\d+)-", d.name)
        if not m or not d.is_dir() or pid_alive(int(m.group(1))):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d.name)
    return removed


class ProcessWatch:
    """Every process descended from ``root`` while it runs, found in the process table (``/proc``; elsewhere nothing).

    A background thread scans the table every ``every_s`` seconds and remembers each descendant it sees (by its
    parent links, so one that leaves the group or daemonizes stays known once seen) with its command line.
    :meth:`stop` scans once more; :meth:`end_leftovers` ends the remembered ones still running (SIGTERM, then SIGKILL),
    so a grandchild that double-forked away from the group does not outlive the run. With ``subreaper``, this process
    becomes the Linux child subreaper of its descendants: an orphan is re-parented here, not to init, and stays
    findable.
    """

    def __init__(self, root: int, every_s: float = 1.0, *, subreaper: bool = False) -> None:
        self.root = root
        self.every_s = every_s
        self.seen: dict[int, dict[str, Any]] = {}
        self._starts: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.subreaper = subreaper and become_subreaper()

    def start(self) -> ProcessWatch:
        if Path("/proc").is_dir():
            self._thread = threading.Thread(target=self._run, name="rlbench-process-watch", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.scan()

    def scan(self) -> None:
        """Remember every descendant of ``root`` (or of one remembered) that the table holds now."""
        try:
            pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
        except OSError:
            return
        parents: dict[int, int] = {}
        for pid in pids:
            fields = _proc_stat(pid)
            if fields is None or len(fields) < 20 or fields[0] == "Z":
                continue
            parents[pid] = int(fields[1])
            if pid in self._starts and self._starts[pid] != fields[19]:  # the pid was reused: not ours
                self.seen.pop(pid, None)
                del self._starts[pid]
        # descendants of the root, or of one seen before (this process's own other children, a git its fingerprint
        # runs, are not the script's; an orphan re-parented here was seen before it was orphaned, or is lost)
        known = {self.root, *self.seen}
        changed = True
        while changed:
            changed = False
            for pid, ppid in parents.items():
                if pid not in known and ppid in known:
                    known.add(pid)
                    self._remember(pid)
                    changed = True

    def _remember(self, pid: int) -> None:
        fields = _proc_stat(pid)
        if pid == self.root or fields is None or len(fields) < 20:
            return
        try:
            argv = [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            argv = []
        self.seen[pid] = {"argv": argv[:8], "python": bool(argv) and "python" in Path(argv[0]).name}
        self._starts[pid] = fields[19]

    def stop(self) -> dict[int, dict[str, Any]]:
        """Stop watching (one last scan first); returns what was seen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.scan()
        return self.seen

    def alive(self) -> list[int]:
        """The remembered descendants still running (not zombies), the same processes as when first seen."""
        out = []
        for pid, start in list(self._starts.items()):
            fields = _proc_stat(pid)
            if fields is not None and len(fields) >= 20 and fields[19] == start and fields[0] != "Z":
                out.append(pid)
        return out

    def orphans(self) -> list[int]:
        """With ``subreaper``: this process's children other than ``root``: the script's descendants re-parented here
        when their parent exited (a daemon that double-forked away from the group)."""
        out = []
        for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()) if Path("/proc").is_dir() else ():
            fields = _proc_stat(pid)
            if fields is not None and len(fields) >= 20 and fields[0] != "Z" and int(fields[1]) == os.getpid():
                if pid != self.root and pid not in self._starts:
                    self._remember(pid)
                if pid != self.root:
                    out.append(pid)
        return out

    def end_leftovers(self, grace_s: float = 2.0) -> list[int]:
        """End the remembered descendants still running (and, as subreaper, the orphans re-parented here): SIGTERM,
        then SIGKILL after ``grace_s``. Returns their pids."""
        if self.subreaper:
            self.orphans()
        left = self.alive()
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.alive():
            self._reap()
            time.sleep(0.02)
        for pid in self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._reap()
        return left

    def _reap(self) -> None:
        """Reap the remembered processes that were re-parented here (the subreaper's zombies)."""
        for pid in list(self._starts):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux ``PR_SET_CHILD_SUBREAPER``); whether it is."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False

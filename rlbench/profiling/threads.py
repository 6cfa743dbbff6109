"""Every thread of a profiled process attributed on its own: one :class:`~rlbench.profiling.attribution.Attributor` per
thread, and the routing that gives each thread's hooked calls to its own.

The hooks are built for the thread that started the session (its compiled fast path is unchanged). A call from any
other thread goes to the hook's :class:`Router`, which keeps, per thread, the same hook built for that thread's own
attributor (made on the thread's first hooked call, by the factory the hook was installed with). So an actor thread
stepping an env and a learner thread running the update each book their own phases, with their own iteration rhythm.

A thread gets an attributor on its first hooked call (a thread that never calls a hooked function, a library's
feeder or writer thread, adds nothing); its role is what :func:`rlbench.role` named, else its name. When the thread
ends, its attribution is finished in the thread itself and kept; threads still running when the session ends are
finished then. rlbench's own threads (named ``rlbench-*``) are never followed.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from threading import get_ident as _get_ident
from typing import Any

from rlbench.profiling.attribution import OWN_THREAD_PREFIX, Attribution, Attributor

ROLE_ENV = "RLBENCH_ROLE"  # a process's role, where the command that started it said it (rlbench's own children)
ROLES: dict[int, str] = {}
"""Roles named by :func:`role`, per thread ident (the main thread's is the process's)."""
_ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def role(name: str) -> None:
    """Name the role of the calling thread in ``rlbench profile``'s report: ``rlbench.role("learner")``.

    Called from a process's main thread, it names the process (``rlbench.role("actor")`` at the top of an actor
    process's function); from another thread, that thread. Outside a profile it only remembers the name (no cost).

    Raises:
        ValueError: For a name that is not 1-64 letters, digits, ``_ . -`` (starting with a letter or digit).
    """
    if not isinstance(name, str) or not _ROLE.match(name):
        raise ValueError(
            f"rlbench.role: a role is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit "
            f"(e.g. 'learner', 'actor-0'), got {name!r}"
        )
    ROLES[_get_ident()] = name


def thread_role(thread: threading.Thread) -> str:
    """A thread's role from its name: ``Thread-3 (actor_loop)`` is ``actor_loop``, ``actor-2`` is ``actor`` (numbered
    threads of one kind are one role), a ``Thread`` subclass's default name is its class's; letters, digits and
    ``_ . -`` only."""
    role = _role_of_name(thread)
    role = re.sub(r"[^A-Za-z0-9_.-]+", "-", role).strip("-_.")[:64]
    return role if role and role[0].isalnum() else "thread"


def _role_of_name(thread: threading.Thread) -> str:
    name = thread.name or ""
    m = re.match(r"^Thread-\d+ \((.+)\)$", name)  # Python >= 3.10 names a thread after its target
    if m:
        return m.group(1)
    if re.match(r"^Thread-\d+$", name):
        cls = type(thread).__name__
        return cls if cls not in ("Thread", "_DummyThread") else "thread"
    m = re.match(r"^ThreadPoolExecutor-\d+_\d+$", name)
    if m:
        return "thread-pool"
    base = re.sub(r"[-_ ]?\d+$", "", name.strip())
    return base or "thread"


MACHINERY = (
    "QueueFeederThread",  # multiprocessing.Queue's feeder: hands items to the pipe
    "_handle_workers",  # multiprocessing.Pool's workers, tasks and results handlers
    "_handle_tasks",
    "_handle_results",
    "_pin_memory_loop",  # torch DataLoader's pin-memory thread
    "ray_",  # Ray's own threads in a worker
    "RendezvousKeepAliveTimer",  # torch.distributed.elastic's keep-alive timer
    "PythonGCThread",  # Ray's garbage-collection thread
    "_serve",  # multiprocessing.resource_sharer's (torch shares tensors between processes through it)
    # the trackers' own writers (rlbench profile --log-to writes into the script's runs): they move logged values to a
    # file, a queue or a service, as the script's SummaryWriter, wandb.init or MLflow's async logging start them
    "AsyncWriterThread",  # TensorBoard's event-file writer (torch's SummaryWriter, SB3's tensorboard_log)
    "EventLoggerThread",  # tensorboardX's
    "wandb-",  # W&B's asyncio manager, service finalizer
    "NetStatThr",  # W&B's network status
    "(_emulator_write)",  # W&B's console capture
    "(_pipe_relay)",
    "MLflowAsync",  # MLflow's async logging loops
)
"""Threads of libraries' machinery (named so, or after their target): not followed. They only move data between the
roles that do the work; their blocking would read as waits of a role nobody wrote."""


def machinery(thread: threading.Thread) -> bool:
    name = f"{thread.name or ''} {type(thread).__name__}"  # (a Thread subclass keeps a default name: its class says)
    return any(m in name for m in MACHINERY)


class Router:
    """A hook's calls from threads other than its attributor's: each followed thread's own hook, made on its first
    call (``make(attributor)``); a thread that is not followed calls ``fn`` itself."""

    __slots__ = ("cache", "fn", "make", "threads")

    def __init__(self, threads: ThreadSet, fn: Callable[..., Any]) -> None:
        self.threads = threads
        self.fn = fn
        self.make: Callable[[Attributor], Callable[..., Any]] | None = None
        self.cache: dict[int, Callable[..., Any]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hook = self.cache.get(_get_ident())
        if hook is None:
            hook = self._made()
        return hook(*args, **kwargs)

    def _made(self) -> Callable[..., Any]:
        ident = _get_ident()
        a = self.threads.attributor(ident)
        hook = self.fn if a is None or self.make is None else self.make(a)
        self.cache[ident] = hook
        return hook


@dataclass
class ThreadResult:
    """One thread's attribution, with who it was."""

    ident: int
    name: str
    role: str
    native_id: int | None
    attribution: Attribution
    started: float  # perf_counter when the thread started (or when it was first seen)


class ThreadSet:
    """The attributors of one process's threads but the session's own (``main``)."""

    def __init__(self, main: Attributor, make: Callable[[], Attributor]) -> None:
        self.main = main
        self._make = make  # a new attributor for the calling thread (its settings are the session's)
        self.live: dict[int, Attributor] = {}
        self.started: dict[int, float] = {}  # perf_counter at each thread's start, seen by the thread hook
        self.ended: list[ThreadResult] = []
        self.routers: list[Router] = []
        self.closed = False
        self.lock = threading.Lock()

    def router(self, fn: Callable[..., Any]) -> Router:
        """A new hook's router (its ``make`` is set by the caller)."""
        r = Router(self, fn)
        self.routers.append(r)
        return r

    def attributor(self, ident: int) -> Attributor | None:
        """The calling thread's attributor (``ident`` is its ident), made on its first call; ``None`` for rlbench's
        own threads and once the session has ended."""
        a = self.live.get(ident)
        if a is not None or self.closed:
            return a
        if ident == self.main.thread:
            return self.main
        t = threading.current_thread()
        if t.name.startswith(OWN_THREAD_PREFIX) or machinery(t):
            return None
        a = self._make()
        start = self.started.get(ident)
        if start is not None:  # the thread's time before its first hooked call is its own "other"
            a.t = a.t_begin = start
        with self.lock:
            if self.closed:
                return None
            self.live[ident] = a
        return a

    def thread_started(self, ident: int) -> None:
        self.started[ident] = time.perf_counter()

    def thread_ended(self, ident: int, thread: threading.Thread) -> None:
        """``thread``'s end, in the thread itself (``ident`` is its ident): finish its attribution, drop its hooks."""
        with self.lock:
            a = self.live.pop(ident, None)
        if a is not None:
            self._keep(thread, a)
        self.started.pop(ident, None)
        ROLES.pop(ident, None)  # a later thread may get the same ident
        for r in self.routers:
            r.cache.pop(ident, None)

    def _keep(self, thread: threading.Thread | None, a: Attributor) -> None:
        try:
            result = a.finish()
        except Exception:  # a thread stopped mid-call (the session ended inside it): what was booked is kept
            return
        name = thread.name if thread is not None else f"thread {a.thread}"
        named = ROLES.get(a.thread)
        self.ended.append(
            ThreadResult(
                a.thread,
                name,
                named or (thread_role(thread) if thread is not None else "thread"),
                getattr(thread, "native_id", None),
                result,
                a.t_begin,
            )
        )

    def close(self) -> list[ThreadResult]:
        """Finish every thread still running (the session ends): their attribution up to now. Returns every thread's."""
        with self.lock:
            self.closed = True
            live, self.live = self.live, {}
        by_ident = {t.ident: t for t in threading.enumerate()}
        for ident, a in live.items():
            a.depth = 1  # its hooks pass through from now on
            self._keep(by_ident.get(ident), a)
        for r in self.routers:
            r.cache.clear()
        return self.ended

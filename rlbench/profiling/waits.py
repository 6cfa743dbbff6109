"""Blocking waits as phases of their own: who waits on whom.

A thread that blocks in a queue's ``get`` (or ``put`` on a full one), a pipe's ``recv``, a future's ``result``, an
event, a barrier, ``ray.get`` or a collective (``all_reduce``) is not working: it waits for another thread, process
or rank. Each of these calls, at top level, is the phase ``wait/<what>`` in layer ``wait`` (:data:`WAITS`), so a
role's time splits into busy and waiting. Nested in another phase (a vector env's ``step`` receiving its workers'
results, a queue's ``get`` inside a library's labelled call) it belongs to that phase.

Where rlbench can see the other side, a wait names it: every call notes the *channel* it used (a queue, the pipe
under a ``multiprocessing`` queue, by its inode, which every process sharing it sees alike; the thread that set a
future's result; the process group of a collective) and the side it took (``get`` / ``put``), so the report can say
"the learner waited on the queue the actors put into" (:func:`channel_of`, :attr:`Attributor.channels`).

Every wrapper is Python: a wait is a blocking call, where a microsecond of bookkeeping does not show.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from functools import wraps
from threading import get_ident as _get_ident
from typing import Any

from rlbench.profiling.attribution import UPDATE, WAIT, Attributor

WAITS = {
    "queue": "a queue's get, or put on a full one (queue.Queue, multiprocessing queues)",
    "pipe": "a pipe's recv (multiprocessing.Connection): a worker waiting for its next command, or a reply",
    "future": "a future's result (concurrent.futures)",
    "event": "threading.Event.wait, Condition.wait, Barrier.wait",
    "join": "Thread.join / Process.join: waiting for a thread or process to end",
    "ray": "ray.get / ray.wait",
    "collective": "torch.distributed collectives (all_reduce, broadcast, barrier, ...): waiting for every rank",
}
"""The wait phases (``wait/<name>``) and what lands in each."""

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "barrier",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "monitored_barrier",
)

_channels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_setters: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # future -> the thread that set it
PARTICIPANTS: dict[str, dict[str, set[int]]] = {}
"""Per channel, per side (``get``, ``put``, ``set``, ``recv``), the thread idents of this process that used it."""


def channel_of(obj: Any, kind: str) -> str:
    """A channel's name, the same in every process that shares it where the OS can tell (``pipe:<inode>`` for the pipe
    under a ``multiprocessing`` queue or a ``Connection``); else this process's own (``queue:<pid>:<id>``)."""
    try:
        known = _channels.get(obj)
    except TypeError:  # not weakly referenceable
        known = None
    if known is not None:
        return known
    name = f"{kind}:{os.getpid()}:{id(obj):x}"
    for attr in ("_reader", "_writer", None):
        conn = getattr(obj, attr, None) if attr else obj
        fileno = getattr(conn, "fileno", None)
        if fileno is None:
            continue
        try:
            name = f"pipe:{os.fstat(fileno()).st_ino}"
            break
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    try:
        _channels[obj] = name
    except TypeError:
        pass
    return name


def wait_wrapper(
    a: Attributor,
    fn: Callable[..., Any],
    name: str,
    side: str,
    channel: Callable[[Any], str] | None = None,
    foreign: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """``fn`` (a blocking call) as the phase ``wait/<name>`` at top level, its channel and side noted.

    A thread that has never run an update (an actor, an env worker) starts a training iteration at its next env step
    after a wait: its rhythm is command (or item) by command. A thread that steps no env starts its first iteration
    at its first get (a learner's loop begins by waiting for the first item). ``channel(args[0])`` names what it
    waited on.
    """
    thread, clock = a.thread, a.clock
    other_thread = fn if foreign is None else foreign
    phase = f"wait/{name}"
    consumes = side in ("get", "result")  # taking the work of another role: a learner's queue get, a driver's ray.get

    @wraps(fn)
    def waited(*args: Any, **kwargs: Any) -> Any:
        if _get_ident() != thread:
            return other_thread(*args, **kwargs)
        if a.depth:  # nested in another phase (a vector env's step): part of it
            return fn(*args, **kwargs)
        if a.paused:  # an unattributed iteration: nothing is booked, but the rhythm goes on (the next env step)
            try:
                return fn(*args, **kwargs)
            finally:
                if not a.learns:
                    a.updated = True
        t0 = clock()
        if consumes and a.started is None and not a.env_ids:
            a._new_iteration(t0)  # a consumer's loop (a learner's) starts at its first get: waiting for it is the run's
        opened = a.enter(phase, "wait", WAIT, t0)
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = clock()
            if opened:
                a.exit(t1)
            else:
                a.depth = 0
            if channel is not None and args:  # (after the wait: who set a future is known once it is set)
                try:
                    _note(a, channel(args[0]), side, t1 - t0, t0)
                except Exception:
                    pass
            if not a.updated and not a.learns:
                a.learns = any(a.layers.get(p) == "update" for p in a.enters)
                if not a.learns:
                    a.updated = True  # an actor's or a worker's rhythm: the next env step starts an iteration
                    # each of its iterations holds a wait (a Python hook, dearer than the compiled ones): attributed
                    # one in k, the others' cheaper pass-through would make the attributed look slower than they are
                    a.sample_every = 1

    waited.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return waited


def _note(a: Attributor, key: str, side: str, seconds: float, t0: float) -> None:
    slot = a.channels.get((key, side))
    if slot is None:
        slot = a.channels[(key, side)] = [0.0, 0]
    slot[0] += seconds
    slot[1] += 1
    PARTICIPANTS.setdefault(key, {}).setdefault(side, set()).add(a.thread)
    if a.trace is not None and len(a.wait_log) < a.trace_limit:
        a.wait_log.append((t0, t0 + seconds, key, side))


def _participate(key: str, side: str) -> None:
    """A call that uses a channel without waiting on it (a put into a queue with room): its side is noted."""
    PARTICIPANTS.setdefault(key, {}).setdefault(side, set()).add(_get_ident())


def _noting(fn: Callable[..., Any], kind: str, side: str) -> Callable[..., Any]:
    @wraps(fn)
    def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _participate(channel_of(self, kind), side)
        except Exception:
            pass
        return fn(self, *args, **kwargs)

    noted.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
    return noted


def _future_channel(future: Any) -> str:
    setter = _setters.get(future)
    return f"thread:{os.getpid()}:{setter}" if setter is not None else f"future:{os.getpid()}"


def _install_future_setters(h: Any, future: type) -> None:
    """Who sets a future's result (an executor's worker thread): the other side of waiting on it."""
    from rlbench.profiling.autohooks import replace_attr

    for method in ("set_result", "set_exception"):
        fn = getattr(future, method)
        if hasattr(fn, "__rlbench_wrapped__"):
            continue

        def make(fn: Callable[..., Any]) -> Callable[..., Any]:
            @wraps(fn)
            def setting(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    _setters[self] = _get_ident()
                    _participate(f"thread:{os.getpid()}:{_get_ident()}", "set")
                except TypeError:
                    pass
                return fn(self, *args, **kwargs)

            setting.__rlbench_wrapped__ = fn  # type: ignore[attr-defined]
            return setting

        replace_attr(h.restore, future, method, make(fn))


def _wait(h: Any, owner: Any, method: str, name: str, side: str, channel: Callable[[Any], str] | None) -> None:
    from rlbench.profiling.autohooks import replace_attr

    fn = vars(owner).get(method) if isinstance(owner, type) else getattr(owner, method, None)
    if fn is None or not callable(fn) or hasattr(fn, "__rlbench_wrapped__"):
        return
    replace_attr(h.restore, owner, method, h.routed(fn, lambda b, f: wait_wrapper(b, fn, name, side, channel, f)))


def install_waits(h: Any) -> None:
    """Hook the standard library's blocking waits: ``queue`` and ``threading`` now, ``multiprocessing``'s queues,
    pipes and processes, ``concurrent.futures``, Ray's and torch.distributed's as soon as the script imports them
    (a process that never uses them does not pay for importing them)."""
    import queue
    import threading

    from rlbench.profiling.autohooks import PostImport

    _wait(h, queue.Queue, "get", "queue", "get", _local_queue)
    _wait(h, queue.Queue, "put", "queue", "put", _local_queue)
    _wait(h, threading.Event, "wait", "event", "wait", None)
    _wait(h, threading.Condition, "wait", "event", "wait", None)
    _wait(h, threading.Barrier, "wait", "event", "wait", None)
    _wait(h, threading.Thread, "join", "join", "join", lambda t: f"thread:{os.getpid()}:{t.ident}")
    PostImport(
        h,
        {
            "multiprocessing.connection": ("Connection", _install_pipes),
            "multiprocessing.queues": ("Queue", _install_mp_queues),
            "multiprocessing.process": ("BaseProcess", _install_process_join),
            "concurrent.futures._base": ("Future", _install_futures),
            "ray": ("get", _install_ray),
            "torch.distributed": ("all_reduce", _install_collectives),
        },
        "no waits for",
    ).watch()


def _local_queue(q: Any) -> str:
    return channel_of(q, "queue")


def _install_pipes(h: Any, connection: Any) -> None:
    base = getattr(connection, "_ConnectionBase", connection.Connection)
    for method in ("recv", "recv_bytes", "recv_bytes_into"):  # (defined on the base of Connection and PipeConnection)
        _wait(h, base, method, "pipe", "recv", lambda c: channel_of(c, "pipe"))


def _install_mp_queues(h: Any, mpq: Any) -> None:
    from rlbench.profiling.autohooks import replace_attr

    for cls in (mpq.Queue, mpq.SimpleQueue):
        _wait(h, cls, "get", "queue", "get", _local_queue)
    _wait(h, mpq.Queue, "put", "queue", "put", _local_queue)
    put = vars(mpq.SimpleQueue).get("put")
    if put is not None and not hasattr(put, "__rlbench_wrapped__"):
        replace_attr(h.restore, mpq.SimpleQueue, "put", _noting(put, "queue", "put"))


def _install_process_join(h: Any, process: Any) -> None:
    _wait(h, process.BaseProcess, "join", "join", "join", lambda p: f"process:{p.pid}")


def _install_futures(h: Any, base: Any) -> None:
    _wait(h, base.Future, "result", "future", "result", _future_channel)
    _install_future_setters(h, base.Future)


def _install_ray(h: Any, ray: Any) -> None:
    def tasks(*_: Any) -> str:
        return "ray"  # the Ray workers running the tasks (the parent names them)

    _wait(h, ray, "get", "ray", "get", tasks)
    _wait(h, ray, "wait", "ray", "get", tasks)


def _install_collectives(h: Any, dist: Any) -> None:
    def group(*_: Any) -> str:
        return "collective:world"

    for name in COLLECTIVES:
        if hasattr(dist, name):
            _wait(h, dist, name, "collective", "collective", group)
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is not None:  # the functions' home: `from torch.distributed.distributed_c10d import all_reduce`
        for name in COLLECTIVES:
            if hasattr(c10d, name):
                _wait(h, c10d, name, "collective", "collective", group)


__all__ = ["UPDATE", "WAIT", "WAITS", "channel_of", "install_waits", "wait_wrapper"]

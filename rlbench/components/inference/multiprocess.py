"""A transport for actors in other processes: shared-memory slots and POSIX semaphores.

Layout (all in ``multiprocessing`` shared memory, allocated before the workers start):

* ``obs`` ``(num_slots, *obs_shape)``, ``ready`` bytes, ``submit_ns`` stamps (``perf_counter_ns`` is
  CLOCK_MONOTONIC on Linux: comparable across processes), ``status`` (0 ok, 1 model error, 2 closed),
  a short error message per slot, and one ``(num_slots, *shape)`` buffer per model output;
* one counting semaphore the server sleeps on (each request posts once; the server drains the count
  before scanning the ready bytes, so a request is either seen by that scan or wakes the next wait);
* one semaphore per slot the client blocks on until its rows are written (released by the server).

The model's outputs must be declared up front (``outputs``: row shape and dtype of each), since the
buffers must exist before the workers fork; :func:`probe_outputs` finds them by calling the model once.
Clients are picklable (pass them as ``Process`` arguments, under any start method). This module does
not import torch, so spawned workers start quickly.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from multiprocessing.context import BaseContext
from time import perf_counter_ns
from typing import Any

import numpy as np

from rlbench.components.inference.base import (
    InferenceError,
    OutputSpec,
    TooManyClientsError,
    Transport,
    as_numpy_outputs,
    closed_error,
)

POLL_S = 0.25
_MSG = 240  # bytes of error message kept per slot


def probe_outputs(model_fn: Callable[[np.ndarray], Any], obs_shape: tuple[int, ...], dtype: Any = np.float32) -> OutputSpec:
    """Row shape and dtype of each output of ``model_fn``, from one call on a zero batch of two rows."""
    outs = as_numpy_outputs(model_fn(np.zeros((2, *obs_shape), dtype=dtype)))
    return [(tuple(o.shape[1:]), o.dtype) for o in outs]


def _shared(ctx: BaseContext, shape: tuple[int, ...], dtype: Any) -> tuple[Any, tuple[int, ...], str]:
    dt = np.dtype(dtype)
    raw = ctx.RawArray("b", max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize))
    return raw, tuple(shape), dt.str


def _view(spec: tuple[Any, tuple[int, ...], str]) -> np.ndarray:
    raw, shape, dt = spec
    n = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(raw, dtype=np.dtype(dt), count=n).reshape(shape)


class _Shared:
    """Views over the transport's shared buffers (rebuilt after unpickling in a worker)."""

    def __init__(self, specs: dict[str, Any], out_specs: list[Any]) -> None:
        self.specs, self.out_specs = specs, out_specs
        self._build()

    def _build(self) -> None:
        v = {k: _view(s) for k, s in self.specs.items()}
        self.obs, self.ready, self.submit_ns = v["obs"], v["ready"], v["submit_ns"]
        self.status, self.msg, self.closed = v["status"], v["msg"], v["closed"]
        self.out = tuple(_view(s) for s in self.out_specs)

    def __getstate__(self) -> dict[str, Any]:
        return {"specs": self.specs, "out_specs": self.out_specs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.specs, self.out_specs = state["specs"], state["out_specs"]
        self._build()


class MultiprocessClient:
    """Picklable client bound to one slot of a :class:`MultiprocessTransport` (one process/thread at a time)."""

    def __init__(self, shared: _Shared, slot: int, work: Any, reply: Any) -> None:
        self._sh = shared
        self.client_id = slot
        self._work = work
        self._reply = reply

    def __call__(self, obs: Any) -> Any:
        """Write ``obs`` into the slot, wake the server, block until the rows are written."""
        sh, s = self._sh, self.client_id
        if sh.closed[0]:
            raise closed_error()
        sh.obs[s] = obs
        sh.submit_ns[s] = perf_counter_ns()
        sh.ready[s] = 1
        self._work.release()
        reply = self._reply
        if not reply.acquire(True, POLL_S):
            while not reply.acquire(True, POLL_S):
                if sh.closed[0]:
                    raise closed_error()
        status = sh.status[s]
        if status:
            sh.status[s] = 0
            if status == 2:
                raise closed_error()
            raise InferenceError(bytes(sh.msg[s]).rstrip(b"\0").decode("utf-8", "replace"))
        out = sh.out
        if len(out) == 1:
            o = out[0]
            return o[s] if o.ndim == 1 else o[s].copy()
        return tuple(o[s] if o.ndim == 1 else o[s].copy() for o in out)


class MultiprocessTransport(Transport):
    """Fixed slots in shared memory for actors in worker processes (see the module docstring).

    Args:
        num_slots: Maximum number of clients.
        obs_shape: Shape of one observation.
        outputs: ``(row_shape, dtype)`` of each model output, in order (see :func:`probe_outputs`).
        obs_dtype: Dtype of observations.
        context: ``multiprocessing`` context (or start-method name) the workers will use; default
            ``fork`` where available (workers start in milliseconds), else ``spawn``.
    """

    def __init__(
        self,
        num_slots: int,
        obs_shape: tuple[int, ...],
        outputs: OutputSpec,
        obs_dtype: Any = np.float32,
        context: BaseContext | str | None = None,
    ) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be at least 1, got {num_slots}")
        if isinstance(context, str) or context is None:
            method = context or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
            context = mp.get_context(method)
        self.context = context
        self.num_slots = num_slots
        specs = {
            "obs": _shared(context, (num_slots, *obs_shape), obs_dtype),
            "ready": _shared(context, (num_slots,), np.uint8),
            "submit_ns": _shared(context, (num_slots,), np.int64),
            "status": _shared(context, (num_slots,), np.uint8),
            "msg": _shared(context, (num_slots, _MSG), np.uint8),
            "closed": _shared(context, (1,), np.uint8),
        }
        out_specs = [_shared(context, (num_slots, *tuple(shape)), dtype) for shape, dtype in outputs]
        self._sh = _Shared(specs, out_specs)
        self._work = context.Semaphore(0)
        self._replies = [context.Semaphore(0) for _ in range(num_slots)]
        self._taken = 0

    def client(self) -> MultiprocessClient:
        """A client owning the next free slot (create all clients in the parent, then start the workers).

        Raises:
            TooManyClientsError: When all slots are taken.
        """
        if self._taken >= self.num_slots:
            raise TooManyClientsError(
                f"MultiprocessTransport has {self.num_slots} slots and all are taken: create it with num_slots >= the "
                f"number of actors (client() was called {self._taken + 1} times)"
            )
        slot = self._taken
        self._taken += 1
        return MultiprocessClient(self._sh, slot, self._work, self._replies[slot])

    def pending(self) -> int:
        """Slots holding an undrained request."""
        return int(np.count_nonzero(self._sh.ready))

    def wait(self, timeout: float) -> bool:
        """Return at once if a slot is ready, else sleep on the work semaphore (then drain its count)."""
        if self._sh.ready.any():
            return True
        woke = self._work.acquire(True, timeout)
        acquire = self._work.acquire
        while acquire(False):
            pass
        return woke

    def drain(self, max_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Take up to ``max_items`` ready slots (lowest first) and gather their observations."""
        sh = self._sh
        ids = np.flatnonzero(sh.ready.copy())  # snapshot: workers set bytes concurrently
        if ids.size == 0:
            return None
        ids = ids[:max_items]
        sh.ready[ids] = 0
        return ids, sh.obs[ids], sh.submit_ns[ids]

    def reply(self, ids: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        """Write rows into the shared output buffers, then post each client's semaphore."""
        sh = self._sh
        if len(outputs) != len(sh.out):
            raise ValueError(f"model returned {len(outputs)} outputs; the transport was built for {len(sh.out)}")
        for buf, o in zip(sh.out, outputs):
            buf[ids] = o
        replies = self._replies
        for s in ids.tolist():
            replies[s].release()

    def fail(self, ids: np.ndarray, exc: BaseException) -> None:
        """Post each client of the batch with status 1 and the error message."""
        msg = f"model raised {type(exc).__name__}: {exc}".encode()[:_MSG]
        sh = self._sh
        for s in ids.tolist():
            sh.msg[s] = 0
            sh.msg[s, : len(msg)] = np.frombuffer(msg, dtype=np.uint8)
            sh.status[s] = 1
            self._replies[s].release()

    def close(self) -> None:
        """Mark closed and post every slot once with status 2 (waiting clients raise; idempotent)."""
        sh = self._sh
        if sh.closed[0]:
            return
        sh.closed[0] = 1
        for s in range(self.num_slots):
            sh.status[s] = 2
            self._replies[s].release()
        self._work.release()

"""In-process transports for actor threads: lock-free slots, lock + futures, and the direct-call baseline.

Wake-ups use the cheapest blocking primitive CPython has, a bare ``threading.Lock`` held as a binary
semaphore (``acquire`` blocks in C with the GIL released; ``release`` from another thread wakes it):

* each client owns a *reply lock*, held while it waits; the server releases it after writing the rows;
* the server sleeps on a *wake lock* only after announcing it (``_sleeping``) and re-checking for work,
  so a client that submits either is seen by that re-check or sees ``_sleeping`` and releases the lock
  (no lost wake-up, no Condition, no per-request allocation in :class:`SlotTransport`).

Clients wait in slices of :data:`POLL_S` seconds and re-check the closed flag between them, so a
request pending at shutdown always ends in :class:`TransportClosedError`, never a hang.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns
from typing import Any

import numpy as np

from rlbench.components.inference.base import (
    TooManyClientsError,
    Transport,
    closed_error,
    model_error,
    output_rows,
)

POLL_S = 0.25  # how often a waiting client re-checks for shutdown


class _WakeMixin:
    """The server's wake lock: ``_signal`` from clients, ``_sleep`` from the server."""

    def _init_wake(self) -> None:
        self._wake = threading.Lock()
        self._wake.acquire()
        self._sleeping = False
        self._closed = False

    def _signal(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:  # already released by another client: the server will wake anyway
            pass


class _SlotClient:
    """Callable bound to one slot of a :class:`SlotTransport` (use from one thread at a time)."""

    __slots__ = ("_lock", "_t", "client_id")

    def __init__(self, transport: SlotTransport, slot: int) -> None:
        self._t = transport
        self.client_id = slot
        self._lock = transport._replies[slot]

    def __call__(self, obs: Any) -> Any:
        """Submit ``obs`` (one observation, no batch dimension) and block until its row comes back."""
        t, s = self._t, self.client_id
        if t._closed:
            raise closed_error()
        t._obs[s] = obs
        t._submit_ns[s] = perf_counter_ns()
        t._flags[s] = 1
        if t._sleeping:
            t._signal()
        lock = self._lock
        if not lock.acquire(True, POLL_S):
            while not lock.acquire(True, POLL_S):
                if t._closed:
                    raise closed_error()
        err = t._errors[s]
        if err is not None:
            t._errors[s] = None
            raise err
        out = t._out
        if t._single:
            o = out[0]
            return o[s] if o.ndim == 1 else o[s].copy()
        return tuple(o[s] if o.ndim == 1 else o[s].copy() for o in out)


class SlotTransport(_WakeMixin, Transport):
    """Lock-free per-slot transport: one fixed slot per actor thread.

    A client writes its observation into its own slot (a row of a preallocated buffer when
    ``obs_shape`` is given), stamps it, raises the slot's ready byte and blocks on its reply lock. The
    server finds ready slots with one ``np.flatnonzero`` over the ready bytes, gathers the batch with
    one fancy-indexed copy, writes each output into a preallocated ``(num_slots, ...)`` buffer with one
    vectorized assignment and releases the reply locks. No lock is shared between clients, and no
    object is allocated per request.

    Args:
        num_slots: Maximum number of clients.
        obs_shape: Shape of one observation: preallocates the ``(num_slots, *obs_shape)`` buffer. ``None``
            stores references instead and stacks them per batch (any shape, one ``np.stack``).
        dtype: Dtype of the preallocated observation buffer.
    """

    def __init__(self, num_slots: int, obs_shape: tuple[int, ...] | None = None, dtype: Any = np.float32) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be at least 1, got {num_slots}")
        self.num_slots = num_slots
        self.preallocated = obs_shape is not None
        self._obs: Any = np.zeros((num_slots, *obs_shape), dtype=dtype) if obs_shape is not None else [None] * num_slots
        self._flags = bytearray(num_slots)
        self._ready = np.frombuffer(self._flags, dtype=np.uint8)
        self._submit_ns = np.zeros(num_slots, dtype=np.int64)
        self._replies = [threading.Lock() for _ in range(num_slots)]
        for lock in self._replies:
            lock.acquire()
        self._errors: list[BaseException | None] = [None] * num_slots
        self._out: tuple[np.ndarray, ...] = ()
        self._single = True
        self._taken = 0
        self._next = 0
        self._id_lock = threading.Lock()
        self._init_wake()

    def client(self) -> _SlotClient:
        """A client owning the next free slot.

        Raises:
            TooManyClientsError: When all ``num_slots`` slots are taken.
        """
        with self._id_lock:
            if self._taken >= self.num_slots:
                raise TooManyClientsError(
                    f"SlotTransport has {self.num_slots} slots and all are taken: create it with num_slots >= the number "
                    f"of actors (client() was called {self._taken + 1} times)"
                )
            slot = self._taken
            self._taken += 1
        return _SlotClient(self, slot)

    def pending(self) -> int:
        """Slots holding an undrained request."""
        return self._flags.count(1)

    def wait(self, timeout: float) -> bool:
        """Return at once if a slot is ready, else sleep on the wake lock."""
        flags = self._flags
        if 1 in flags:
            return True
        self._sleeping = True
        if 1 in flags or self._closed:
            self._sleeping = False
            return True
        woke = self._wake.acquire(True, timeout)
        self._sleeping = False
        return woke

    def drain(self, max_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Take ready slots (rotating the start when more than ``max_items`` are ready, so none starves)."""
        ids = np.flatnonzero(self._ready.copy())  # snapshot: clients set bytes concurrently
        n = ids.size
        if n == 0:
            return None
        if n > max_items:
            k = int(np.searchsorted(ids, self._next))
            ids = np.concatenate((ids[k:], ids[:k]))[:max_items]
            self._next = int(ids[-1]) + 1
        self._ready[ids] = 0
        batch = self._obs[ids] if self.preallocated else np.stack([self._obs[i] for i in ids.tolist()])
        return ids, batch, self._submit_ns[ids]

    def _allocate(self, outputs: tuple[np.ndarray, ...]) -> None:
        self._out = tuple(np.zeros((self.num_slots, *o.shape[1:]), dtype=o.dtype) for o in outputs)
        self._single = len(outputs) == 1

    def reply(self, ids: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        """Scatter rows into the slot output buffers, then wake each client."""
        if not self._out:
            self._allocate(outputs)
        for buf, o in zip(self._out, outputs):
            buf[ids] = o
        replies = self._replies
        for s in ids.tolist():
            try:
                replies[s].release()
            except RuntimeError:  # already released by close()
                pass

    def fail(self, ids: np.ndarray, exc: BaseException) -> None:
        """Wake the clients of a failed batch, each with its own :class:`InferenceError`."""
        for s in ids.tolist():
            self._errors[s] = model_error(exc)
            try:
                self._replies[s].release()
            except RuntimeError:  # already released by close()
                pass

    def close(self) -> None:
        """Fail every pending request and wake the server."""
        self._closed = True
        for s, lock in enumerate(self._replies):
            if lock.locked():
                self._errors[s] = closed_error()
                lock.release()
        self._signal()


class _Future:
    """A one-shot result: its lock is held until the server sets ``value`` or ``error``."""

    __slots__ = ("error", "lock", "value")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.value: Any = None
        self.error: BaseException | None = None


class _LockClient:
    """Callable of a :class:`LockTransport` (use from one thread at a time)."""

    __slots__ = ("_t", "client_id")

    def __init__(self, transport: LockTransport, client_id: int) -> None:
        self._t = transport
        self.client_id = client_id

    def __call__(self, obs: Any) -> Any:
        """Queue ``obs`` with a fresh future and block until the future is resolved."""
        t = self._t
        fut = _Future()
        with t._lock:
            if t._closed:
                raise closed_error()
            t._queue.append((self.client_id, obs, perf_counter_ns(), fut))
        if t._sleeping:
            t._signal()
        lock = fut.lock
        if not lock.acquire(True, POLL_S):
            while not lock.acquire(True, POLL_S):
                if t._closed and fut.error is None:
                    raise closed_error()
        if fut.error is not None:
            raise fut.error
        return fut.value


class LockTransport(_WakeMixin, Transport):
    """One shared queue under a lock, one future per request (TorchRL's ``ThreadingTransport`` design).

    Any number of clients; each request allocates a small future whose lock the client blocks on.
    The server takes up to ``max_items`` requests under the queue lock and stacks them into a batch.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[tuple[int, Any, int, _Future]] = []
        self._inflight: list[_Future] = []
        self._count = 0
        self._init_wake()

    def client(self) -> _LockClient:
        """A new client (unbounded)."""
        with self._lock:
            cid = self._count
            self._count += 1
        return _LockClient(self, cid)

    def pending(self) -> int:
        """Queued requests."""
        return len(self._queue)

    def wait(self, timeout: float) -> bool:
        """Return at once if requests are queued, else sleep on the wake lock."""
        if self._queue:
            return True
        self._sleeping = True
        if self._queue or self._closed:
            self._sleeping = False
            return True
        woke = self._wake.acquire(True, timeout)
        self._sleeping = False
        return woke

    def drain(self, max_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Pop up to ``max_items`` requests (FIFO) and stack their observations."""
        with self._lock:
            if not self._queue:
                return None
            items = self._queue[:max_items]
            del self._queue[:max_items]
            self._inflight = [it[3] for it in items]
        ids = np.array([it[0] for it in items], dtype=np.int64)
        batch = np.stack([it[1] for it in items])
        submit = np.array([it[2] for it in items], dtype=np.int64)
        return ids, batch, submit

    def reply(self, ids: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        """Resolve the futures of the last drained batch, in order."""
        futs, self._inflight = self._inflight, []
        for j, fut in enumerate(futs):
            fut.value = output_rows(outputs, j)
            fut.lock.release()

    def fail(self, ids: np.ndarray, exc: BaseException) -> None:
        """Resolve the last drained batch's futures with errors."""
        futs, self._inflight = self._inflight, []
        for fut in futs:
            fut.error = model_error(exc)
            fut.lock.release()

    def close(self) -> None:
        """Fail queued and in-flight requests; later requests fail at once."""
        with self._lock:
            self._closed = True
            futs = [it[3] for it in self._queue] + self._inflight
            self._queue.clear()
            self._inflight = []
        for fut in futs:
            if fut.lock.locked():
                fut.error = closed_error()
                fut.lock.release()
        self._signal()


class _DirectClient:
    """Callable of a :class:`DirectTransport`: runs the model itself on a batch of one."""

    __slots__ = ("_ids", "_t", "client_id")

    def __init__(self, transport: DirectTransport, client_id: int) -> None:
        self._t = transport
        self.client_id = client_id
        self._ids = np.array([client_id], dtype=np.int64)

    def __call__(self, obs: Any) -> Any:
        """Run the server's model on ``obs[None]`` in the calling thread."""
        t = self._t
        if t._closed or t._server is None:
            raise closed_error()
        batch = np.asarray(obs)[None]
        outputs = t._server.run_batch(self._ids, batch, np.array([perf_counter_ns()], dtype=np.int64))
        return output_rows(outputs, 0)


class DirectTransport(Transport):
    """The baseline: no server thread; every actor calls the model on its own observation (batch of one).

    The server's statistics still count each call as a batch of one, so the report compares it with
    the batched transports on equal terms.
    """

    threaded = False

    def __init__(self) -> None:
        self._server: Any = None
        self._closed = False
        self._count = 0
        self._lock = threading.Lock()

    def bind(self, server: Any) -> None:
        """Remember the server whose model the clients call."""
        self._server = server

    def client(self) -> _DirectClient:
        """A new client (unbounded)."""
        with self._lock:
            cid = self._count
            self._count += 1
        return _DirectClient(self, cid)

    def pending(self) -> int:
        """Always 0 (nothing is queued)."""
        return 0

    def wait(self, timeout: float) -> bool:
        """Never used (no server thread)."""
        return False

    def drain(self, max_items: int) -> None:
        """Nothing to drain."""
        return None

    def reply(self, ids: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        """Nothing to do: clients get their outputs from the call itself."""

    def fail(self, ids: np.ndarray, exc: BaseException) -> None:
        """Nothing to do: the exception is raised in the calling thread."""

    def close(self) -> None:
        """Make later calls fail."""
        self._closed = True

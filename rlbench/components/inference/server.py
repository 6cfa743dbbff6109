"""One batched model serving many actors through a :class:`~rlbench.components.inference.base.Transport`.

The server thread loops: sleep on the transport until a request arrives, optionally wait up to
``max_wait_s`` for the batch to fill, drain up to ``max_batch_size`` requests as one stacked NumPy
batch, run ``model_fn`` once (under ``torch.inference_mode`` when torch is loaded), hand every caller
its own row, and book the batch in preallocated statistics arrays (no per-request Python objects).

A model exception fails only the callers of that batch (each gets an
:class:`~rlbench.components.inference.base.InferenceError` caused by it); the server keeps serving.
:meth:`InferenceServer.close` stops the thread and closes the transport, which fails every pending
request with :class:`~rlbench.components.inference.base.TransportClosedError`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import numpy as np

from rlbench.components.inference.base import Transport, as_numpy_outputs, model_error

Observer = Callable[[np.ndarray, np.ndarray, tuple[np.ndarray, ...]], None]


def _match_torch_threads(n: int | None) -> None:
    """Give the calling thread ``n`` torch intra-op threads (OpenMP's setting is per thread: a new thread would
    otherwise run tiny ops on every core's OpenMP team, which on a busy 2-core machine costs milliseconds)."""
    torch = sys.modules.get("torch")
    if torch is not None and n is not None:
        torch.set_num_threads(n)


def _inference_mode() -> Any:
    """``torch.inference_mode()`` when torch is loaded (the model may be a torch module), else a no-op."""
    torch = sys.modules.get("torch")
    return torch.inference_mode() if torch is not None else contextlib.nullcontext()


class _Ring:
    """A preallocated int64 ring buffer (keeps the latest ``capacity`` values)."""

    def __init__(self, capacity: int) -> None:
        self.data = np.zeros(capacity, dtype=np.int64)
        self.n = 0

    def add(self, values: np.ndarray | int) -> None:
        cap = self.data.size
        if isinstance(values, np.ndarray):
            k = values.size
            i = self.n % cap
            if i + k <= cap:
                self.data[i : i + k] = values
            else:
                self.data[np.arange(i, i + k) % cap] = values
            self.n += k
        else:
            self.data[self.n % cap] = values
            self.n += 1

    def values(self) -> np.ndarray:
        return self.data[: min(self.n, self.data.size)]


class InferenceServer:
    """Runs ``model_fn`` once per batch of requests from many clients.

    Args:
        model_fn: ``model_fn(batch) -> outputs``: ``batch`` is a NumPy array ``(B, *obs_shape)``; outputs
            are an array/tensor or a tuple of them, each with leading dimension ``B``.
        transport: How requests arrive and rows go back (see :mod:`rlbench.components.inference.threads`
            and :mod:`rlbench.components.inference.multiprocess`).
        max_batch_size: Most requests per model call.
        max_wait_s: After the first request, wait up to this long for the batch to fill (0: take what is
            ready; batches still form from requests that arrive while the model runs).
        observer: Optional ``observer(client_ids, batch, outputs)`` called after each successful model
            call in the server thread, before replies (e.g. to record transitions); an exception there
            fails the batch like a model exception.
        stats_capacity: Requests (and batches) kept for the latency percentiles.
        name: Thread name.
        torch_threads: Torch intra-op threads of the threads that run the model (default: the setting of the
            thread that calls :meth:`start`, when torch is loaded).
    """

    def __init__(
        self,
        model_fn: Callable[[np.ndarray], Any],
        transport: Transport,
        max_batch_size: int = 256,
        max_wait_s: float = 0.0,
        observer: Observer | None = None,
        stats_capacity: int = 1 << 20,
        name: str = "rlbench-inference",
        torch_threads: int | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be 0 or more, got {max_wait_s}")
        self.model_fn = model_fn
        self.transport = transport
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.observer = observer
        self.name = name
        self.error: BaseException | None = None
        self.torch_threads = torch_threads
        self._local = threading.local()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._stats_lock = threading.Lock()
        self._queue_ns = _Ring(stats_capacity)
        self._forward_ns = _Ring(max(1, stats_capacity // 4))
        self._batch_sizes = _Ring(max(1, stats_capacity // 4))
        self._requests = 0
        self._batches = 0
        self._failed_batches = 0
        self._forward_total_ns = 0
        self._t0 = perf_counter_ns()
        transport.bind(self)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> InferenceServer:
        """Start the server thread (no thread for a transport that is not ``threaded``); returns self."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._stop = False
        self.reset_stats()
        torch = sys.modules.get("torch")
        if self.torch_threads is None and torch is not None:
            self.torch_threads = torch.get_num_threads()
        if self.transport.threaded:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving: finish the batch in flight, then fail every pending request; idempotent.

        Raises:
            RuntimeError: If the server thread did not stop within ``timeout`` seconds.
        """
        self._stop = True
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.transport.close()
        if thread is not None and thread.is_alive():
            raise RuntimeError(f"inference server thread did not stop within {timeout} s")

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> InferenceServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------------------
    def run_batch(self, ids: np.ndarray, batch: np.ndarray, submit_ns: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run the model (and observer) on one batch and book it; used by the thread and by direct clients.

        Raises:
            InferenceError: When the model or observer raised (caused by that exception).
        """
        if not getattr(self._local, "ready", False):  # first call from this (client) thread
            _match_torch_threads(self.torch_threads)
            self._local.ready = True
        t0 = perf_counter_ns()
        try:
            with _inference_mode():
                outputs = as_numpy_outputs(self.model_fn(batch))
            if self.observer is not None:
                self.observer(ids, batch, outputs)
        except Exception as exc:
            with self._stats_lock:
                self._failed_batches += 1
            raise model_error(exc) from exc
        t1 = perf_counter_ns()
        with self._stats_lock:
            self._requests += ids.size
            self._batches += 1
            self._forward_total_ns += t1 - t0
            self._forward_ns.add(t1 - t0)
            self._batch_sizes.add(ids.size)
            self._queue_ns.add(t0 - submit_ns)
        return outputs

    def _serve(self) -> None:
        t = self.transport
        max_b = self.max_batch_size
        wait_ns = int(self.max_wait_s * 1e9)
        model_fn, observer = self.model_fn, self.observer
        queue_ns, forward_ns, sizes, lock = self._queue_ns, self._forward_ns, self._batch_sizes, self._stats_lock
        _match_torch_threads(self.torch_threads)
        try:
            with _inference_mode():
                while not self._stop:
                    if not t.wait(0.05):
                        continue
                    if wait_ns and t.pending() < max_b:
                        deadline = perf_counter_ns() + wait_ns
                        while t.pending() < max_b and perf_counter_ns() < deadline and not self._stop:
                            time.sleep(20e-6)
                    got = t.drain(max_b)
                    if got is None:
                        continue
                    ids, batch, submit_ns = got
                    t0 = perf_counter_ns()
                    try:
                        outputs = as_numpy_outputs(model_fn(batch))
                        if observer is not None:
                            observer(ids, batch, outputs)
                        t1 = perf_counter_ns()
                        t.reply(ids, outputs)
                    except Exception as exc:
                        t.fail(ids, exc)
                        with lock:
                            self._failed_batches += 1
                        continue
                    with lock:
                        self._requests += ids.size
                        self._batches += 1
                        self._forward_total_ns += t1 - t0
                        forward_ns.add(t1 - t0)
                        sizes.add(ids.size)
                        queue_ns.add(t0 - submit_ns)
        except BaseException as exc:  # a transport bug: fail everyone rather than leave callers hanging
            self.error = exc
        finally:
            t.close()

    # -- statistics --------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Forget the counters and latency samples (the rate clock restarts now)."""
        with self._stats_lock:
            self._queue_ns.n = self._forward_ns.n = self._batch_sizes.n = 0
            self._requests = self._batches = self._failed_batches = self._forward_total_ns = 0
            self._t0 = perf_counter_ns()

    def forward_seconds(self) -> float:
        """Total model (and observer) time since start or :meth:`reset_stats` (cheap: no percentiles)."""
        return self._forward_total_ns / 1e9

    def stats(self) -> dict[str, float]:
        """Flat statistics since start (or :meth:`reset_stats`).

        Returns:
            ``requests``, ``batches``, ``failed_batches``, ``elapsed_s``, ``forward_s`` (model time), ``requests_per_s``,
            ``batches_per_s``,
            ``mean_batch_size``, ``max_batch_size`` and ``queue_p50_ms``, ``queue_p99_ms``, ``forward_p50_ms``,
            ``forward_p99_ms`` (queue: submit to batch start; forward: model and observer per batch).
        """
        with self._stats_lock:
            elapsed = (perf_counter_ns() - self._t0) / 1e9
            q = self._queue_ns.values().copy()
            f = self._forward_ns.values().copy()
            b = self._batch_sizes.values().copy()
            requests, batches, failed = self._requests, self._batches, self._failed_batches
            forward_s = self._forward_total_ns / 1e9

        def pct(a: np.ndarray, p: float) -> float:
            return float(np.percentile(a, p)) / 1e6 if a.size else float("nan")

        return {
            "requests": float(requests),
            "batches": float(batches),
            "failed_batches": float(failed),
            "elapsed_s": elapsed,
            "forward_s": forward_s,
            "requests_per_s": requests / elapsed if elapsed > 0 else 0.0,
            "batches_per_s": batches / elapsed if elapsed > 0 else 0.0,
            "mean_batch_size": float(b.mean()) if b.size else float("nan"),
            "max_batch_size": float(b.max()) if b.size else float("nan"),
            "queue_p50_ms": pct(q, 50),
            "queue_p99_ms": pct(q, 99),
            "forward_p50_ms": pct(f, 50),
            "forward_p99_ms": pct(f, 99),
        }

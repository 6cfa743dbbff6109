"""Load generation for transports: N actors (threads or processes) hammering one :class:`InferenceServer`.

Each actor loops: simulated env step (busy work holding the CPU, and the GIL in a thread, like a Python
env), then one request. Round-trip latencies go into preallocated per-actor ring buffers and
completion counts into a shared array, so measuring costs two array writes per request. Throughput is
counted over a window after a warm-up; latency percentiles over the requests completed in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import numpy as np

from rlbench.components.inference.base import OutputSpec, TransportClosedError
from rlbench.components.inference.factory import make_transport
from rlbench.components.inference.multiprocess import _shared, _view
from rlbench.components.inference.server import InferenceServer

RING = 1 << 13  # latency samples kept per actor


def busy_wait_ns(ns: int) -> None:
    """Spin for ``ns`` nanoseconds (holds the CPU and, in a thread, the GIL)."""
    end = perf_counter_ns() + ns
    while perf_counter_ns() < end:
        pass


def actor_loop(k: int, client: Any, obs: np.ndarray, env_ns: int, shared: dict[str, Any], stop: Any) -> None:
    """One actor: env busy work then a request, until ``stop[0]`` is set (threads and processes alike)."""
    counts, lat = _view(shared["counts"]), _view(shared["lat"])[k]
    mask = lat.size - 1
    i = 0
    try:
        while not stop[0]:
            if env_ns:
                busy_wait_ns(env_ns)
            t0 = perf_counter_ns()
            client(obs)
            lat[i & mask] = perf_counter_ns() - t0
            i += 1
            counts[k] = i
    except TransportClosedError:
        pass
    except BaseException as exc:  # reported by run_load (a benchmark must not silently lose an actor)
        failed = _view(shared["failed"])
        failed[k] = 1
        if not isinstance(exc, Exception):
            raise
        import sys

        print(f"actor {k} failed: {exc!r}", file=sys.stderr)


@dataclass
class LoadResult:
    """What one load run measured."""

    requests_per_s: float
    latency_ms: np.ndarray
    server: dict[str, float]
    requests: int

    def pct(self, p: float) -> float:
        """Round-trip latency percentile in ms."""
        return float(np.percentile(self.latency_ms, p)) if self.latency_ms.size else float("nan")


def run_load(
    model_fn: Callable[[np.ndarray], Any],
    transport: str,
    num_actors: int,
    obs_shape: tuple[int, ...],
    env_us: float = 0.0,
    duration_s: float = 1.0,
    warmup_s: float = 0.3,
    max_batch_size: int = 256,
    max_wait_s: float = 0.0,
    outputs: OutputSpec | None = None,
    context: Any = None,
) -> LoadResult:
    """Run ``num_actors`` actors against a server on ``model_fn`` and measure throughput and latency.

    Thread actors for the in-process transports, processes for ``multiprocess``. Every actor and the
    server are stopped and joined before returning (processes that do not exit are terminated).
    """
    import multiprocessing as mp

    procs = transport == "multiprocess"
    ctx = None
    if procs:
        ctx = context if not isinstance(context, (str, type(None))) else mp.get_context(context or "fork")
    t = make_transport(transport, num_actors, obs_shape, outputs, ctx)
    alloc = ctx if procs else mp.get_context()
    shared = {
        "counts": _shared(alloc, (num_actors,), np.int64),
        "lat": _shared(alloc, (num_actors, RING), np.int64),
        "failed": _shared(alloc, (num_actors,), np.uint8),
    }
    counts = _view(shared["counts"])
    stop = alloc.RawArray("b", 1) if procs else [0]
    obs = np.zeros(obs_shape, dtype=np.float32)
    server = InferenceServer(model_fn, t, max_batch_size=max_batch_size, max_wait_s=max_wait_s)
    clients = [t.client() for _ in range(num_actors)]
    env_ns = int(env_us * 1000)
    if procs:
        workers: list[Any] = [
            ctx.Process(target=actor_loop, args=(k, c, obs, env_ns, shared, stop), daemon=True) for k, c in enumerate(clients)
        ]
    else:
        workers = [
            threading.Thread(target=actor_loop, args=(k, c, obs, env_ns, shared, stop), daemon=True)
            for k, c in enumerate(clients)
        ]
    try:
        for w in workers:
            w.start()
        server.start()
        time.sleep(warmup_s)
        c1, ta = counts.copy(), time.perf_counter()
        server.reset_stats()
        time.sleep(duration_s)
        c2, tb = counts.copy(), time.perf_counter()
        stats = server.stats()
    finally:
        stop[0] = 1
        server.close()
        for w in workers:
            w.join(5.0)
        for w in workers:
            if procs and w.is_alive():
                w.terminate()
                w.join(1.0)
    if server.error is not None:
        raise RuntimeError(f"inference server failed: {server.error!r}") from server.error
    if _view(shared["failed"]).any():
        raise RuntimeError(f"{int(_view(shared['failed']).sum())} of {num_actors} actors failed ({transport}; see stderr)")
    lat_all = _view(shared["lat"])
    parts = []
    for k in range(num_actors):
        n = int(c2[k] - c1[k])
        idx = np.arange(max(int(c1[k]), int(c2[k]) - RING), int(c2[k])) & (RING - 1)
        if n > 0:
            parts.append(lat_all[k][idx])
    lat = np.concatenate(parts) / 1e6 if parts else np.zeros(0)
    done = int((c2 - c1).sum())
    return LoadResult(done / (tb - ta), lat, stats, done)

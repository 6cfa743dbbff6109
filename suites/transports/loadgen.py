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


TORCHRL = ("torchrl-slot", "torchrl-threading")  # TorchRL's InferenceServer, measured beside rlbench's transports


class TorchRLServer:
    """TorchRL's ``InferenceServer`` (``SlotTransport`` or ``ThreadingTransport``) behind what :func:`run_load` drives.

    The peer runs the same model function as rlbench's server, under ``torch.inference_mode`` as rlbench's does;
    each actor's request TensorDict is built once (the cheapest way to call it), so the comparison favours TorchRL
    by the cost of building a request, and one request goes through before the warm-up starts (TorchRL's first batch
    took about a second here, which a short warm-up would otherwise count). Its statistics report a p95 queue time,
    not a p99: that cell stays empty.
    """

    def __init__(
        self, model_fn: Callable[[np.ndarray], Any], kind: str, num_actors: int, obs_shape: tuple[int, ...], max_batch: int
    ) -> None:
        import torch
        from tensordict import TensorDict
        from tensordict.nn import TensorDictModule
        from torchrl.modules.inference_server import InferenceServer as PeerServer
        from torchrl.modules.inference_server import SlotTransport, ThreadingTransport

        class Policy(torch.nn.Module):
            def forward(self, obs: Any) -> Any:
                with torch.inference_mode():
                    return torch.as_tensor(model_fn(obs.numpy()))

        transport = SlotTransport(num_actors) if kind == "torchrl-slot" else ThreadingTransport()
        module = TensorDictModule(Policy(), in_keys=["observation"], out_keys=["action"])
        self.server = PeerServer(module, transport, max_batch_size=max_batch)
        self.request = TensorDict({"observation": torch.zeros(obs_shape)}, [])
        self.error: BaseException | None = None
        self.closing = False
        self.server.start()
        self.clients = [self.server.client() for _ in range(num_actors)]  # a SlotTransport has one slot per actor
        self.clients[0](self.request.clone())  # its first batch took ~1 s here: before the warm-up, not in it

    def client(self) -> Callable[[np.ndarray], Any]:
        call, request = self.clients.pop(0), self.request.clone()

        def send(obs: np.ndarray) -> Any:
            try:
                return call(request)
            except RuntimeError as exc:  # "InferenceServer is shutting down": the end of the run, as for rlbench's
                if self.closing:
                    raise TransportClosedError(str(exc)) from None
                raise

        return send

    def start(self) -> None:
        """Already serving (TorchRL hands out clients of a started server)."""

    def reset_stats(self) -> None:
        """TorchRL keeps a rolling window; nothing to reset."""

    def stats(self) -> dict[str, float]:
        s = self.server.stats()
        return {
            "mean_batch_size": float(s.get("avg_batch_size", float("nan"))),
            "forward_p50_ms": float(s.get("p50_forward_ms", float("nan"))),
            "queue_p99_ms": float("nan"),
        }

    def close(self) -> None:
        self.closing = True
        self.server.shutdown()


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
    alloc = ctx if procs else mp.get_context()
    shared = {
        "counts": _shared(alloc, (num_actors,), np.int64),
        "lat": _shared(alloc, (num_actors, RING), np.int64),
        "failed": _shared(alloc, (num_actors,), np.uint8),
    }
    counts = _view(shared["counts"])
    stop = alloc.RawArray("b", 1) if procs else [0]
    obs = np.zeros(obs_shape, dtype=np.float32)
    server: Any
    if transport in TORCHRL:
        server = TorchRLServer(model_fn, transport, num_actors, obs_shape, max_batch_size)
        clients = [server.client() for _ in range(num_actors)]
    else:
        t = make_transport(transport, num_actors, obs_shape, outputs, ctx)
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

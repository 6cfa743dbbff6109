"""Stress check of a transport: many threads, random delays, injected model faults; nothing lost, duplicated or mixed up.

Each client thread sends requests ``[client, seq, nonce]`` (int64); the model answers each row with its
echo and a tag computed from all three, and raises on a random fraction of batches. A client retries a
request whose batch failed until it succeeds, and checks every reply: the echo and the tag must be its
own request's (else *mismatched*), an echo of an earlier ``seq`` counts as *duplicated*. Requests a client
never got an answer to within the deadline count as *lost*.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlbench.components.inference.base import InferenceError, TransportClosedError
from rlbench.components.inference.server import InferenceServer

_MUL = np.int64(1_000_003)


def tag_of(rows: np.ndarray) -> np.ndarray:
    """The tag the model returns for request rows ``[client, seq, nonce]``."""
    return (rows[:, 0] * _MUL + rows[:, 1]) ^ rows[:, 2]


@dataclass
class StressResult:
    """Counts of one stress run."""

    requests: int
    answered: int
    faults: int
    lost: int
    duplicated: int
    mismatched: int
    wall_s: float
    threads_left: int

    @property
    def ok(self) -> bool:
        """Nothing lost, duplicated, mismatched or left running."""
        return self.lost == 0 and self.duplicated == 0 and self.mismatched == 0 and self.threads_left == 0


def run_stress(
    transport: str = "slot",
    threads: int = 64,
    requests: int = 20_000,
    fault_rate: float = 0.01,
    delay_rate: float = 0.01,
    max_delay_s: float = 200e-6,
    seed: int = 0,
    timeout_s: float = 120.0,
    max_batch_size: int = 256,
) -> StressResult:
    """Send ``requests`` requests from ``threads`` threads through a server and count what went wrong.

    Args:
        transport: ``slot``, ``lock`` or ``direct`` (thread clients).
        threads: Client threads (requests are split evenly).
        requests: Total successful requests to complete.
        fault_rate: Probability that a model call raises (every caller of that batch gets the error and retries).
        delay_rate: Probability that a client sleeps a random time up to ``max_delay_s`` before a request.
        max_delay_s: Longest random delay.
        seed: Seed of the fault and delay generators.
        timeout_s: Deadline for the whole run; requests unanswered by then count as lost.
        max_batch_size: Server batch limit.
    """
    from rlbench.components.inference.factory import make_transport

    t = make_transport(transport, threads, (3,)) if transport != "slot" else None
    if t is None:
        from rlbench.components.inference.threads import SlotTransport

        t = SlotTransport(threads, (3,), dtype=np.int64)
    fault_rng = np.random.default_rng(seed)

    def model_fn(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if fault_rate and fault_rng.random() < fault_rate:
            raise ValueError("injected fault")
        return batch[:, :2].copy(), tag_of(batch)

    if transport == "direct":  # concurrent callers: the fault generator is not thread-safe
        lock = threading.Lock()
        inner = model_fn

        def model_fn(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-redef]
            with lock:
                return inner(batch)

    quotas = np.full(threads, requests // threads, dtype=np.int64)
    quotas[: requests % threads] += 1
    done = np.zeros(threads, dtype=np.int64)
    faults = np.zeros(threads, dtype=np.int64)
    dup = np.zeros(threads, dtype=np.int64)
    bad = np.zeros(threads, dtype=np.int64)
    server = InferenceServer(model_fn, t, max_batch_size=max_batch_size)
    clients = [t.client() for _ in range(threads)]

    def client_loop(k: int) -> None:
        rng = np.random.default_rng(seed * 1_000 + k + 1)
        client = clients[k]
        req = np.zeros(3, dtype=np.int64)
        req[0] = k
        nonces = rng.integers(0, 1 << 40, size=int(quotas[k]))
        delays = rng.random(int(quotas[k])) < delay_rate
        seq = 0
        try:
            while seq < quotas[k]:
                if delays[seq]:
                    time.sleep(float(rng.random()) * max_delay_s)
                req[1], req[2] = seq, nonces[seq]
                try:
                    echo, tag = client(req)
                except InferenceError:
                    faults[k] += 1
                    continue
                if int(echo[0]) != k or int(echo[1]) > seq or int(tag) != int(tag_of(req[None])[0]):
                    bad[k] += 1
                elif int(echo[1]) < seq:
                    dup[k] += 1
                seq += 1
                done[k] = seq
        except TransportClosedError:
            pass

    workers = [threading.Thread(target=client_loop, args=(k,), daemon=True, name=f"stress-{k}") for k in range(threads)]
    t0 = time.perf_counter()
    server.start()
    try:
        for w in workers:
            w.start()
        deadline = time.monotonic() + timeout_s
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))
    finally:
        wall = time.perf_counter() - t0
        server.close()
        for w in workers:
            w.join(2.0)
    left = sum(w.is_alive() for w in workers)
    answered = int(done.sum())
    return StressResult(
        requests=int(requests),
        answered=answered,
        faults=int(faults.sum()),
        lost=int(requests) - answered,
        duplicated=int(dup.sum()),
        mismatched=int(bad.sum()),
        wall_s=wall,
        threads_left=left,
    )


def stress_metrics_dict(r: StressResult) -> dict[str, Any]:
    """The result as a flat dict (for records and JSON)."""
    return {
        "requests": r.requests,
        "answered": r.answered,
        "faults": r.faults,
        "lost": r.lost,
        "duplicated": r.duplicated,
        "mismatched": r.mismatched,
        "wall_s": r.wall_s,
        "requests_per_s": r.answered / r.wall_s if r.wall_s > 0 else 0.0,
        "threads_left": r.threads_left,
    }

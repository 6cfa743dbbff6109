"""Inference server and transports: correct rows, errors reach their callers, clear limits, clean shutdown, stress.

Every test that starts threads or processes joins them with a timeout and asserts they ended; a
``faulthandler`` watchdog ends the test process if one still hangs, so CI fails instead of blocking.
"""

from __future__ import annotations

import faulthandler
import threading
import time

import numpy as np
import pytest
from rlbench.suites.transports.loadgen import run_load
from rlbench.suites.transports.stress import run_stress, tag_of

from rlbench.components.inference import (
    InferenceError,
    InferenceServer,
    LockTransport,
    MultiprocessTransport,
    SlotTransport,
    TooManyClientsError,
    TransportClosedError,
)
from rlbench.components.inference.factory import make_transport

THREAD_TRANSPORTS = ("slot", "slot-ref", "lock", "direct")


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(90, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _affine(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return batch * 2.0 + 1.0, batch.sum(axis=1)


def wait_until(condition, timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``condition()`` every millisecond until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.001)


def _run_threads(fn, n: int, timeout: float = 20.0) -> list:
    results: list = [None] * n

    def target(k: int) -> None:
        try:
            results[k] = fn(k)
        except BaseException as exc:
            results[k] = exc

    threads = [threading.Thread(target=target, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "client threads hung"
    return results


@pytest.mark.parametrize("kind", THREAD_TRANSPORTS)
def test_each_caller_gets_its_own_rows(kind: str) -> None:
    t = make_transport(kind, 8, (3,))
    with InferenceServer(_affine, t, max_batch_size=4):
        clients = [t.client() for _ in range(8)]

        def work(k: int) -> bool:
            for i in range(200):
                obs = np.array([k, i, -k], dtype=np.float32)
                y, s = clients[k](obs)
                assert np.array_equal(y, obs * 2 + 1) and s == obs.sum()
            return True

        assert _run_threads(work, 8) == [True] * 8


def test_stats_count_requests_and_batches() -> None:
    t = SlotTransport(4, (2,))
    with InferenceServer(lambda b: b[:, 0], t) as server:
        clients = [t.client() for _ in range(4)]
        _run_threads(lambda k: [clients[k](np.ones(2, np.float32)) for _ in range(50)], 4)
        s = server.stats()
    assert s["requests"] == 200 and 1 <= s["mean_batch_size"] <= 4 and s["batches"] >= 50
    assert s["queue_p50_ms"] <= s["queue_p99_ms"] and s["requests_per_s"] > 0 and s["forward_s"] > 0


@pytest.mark.parametrize("kind", ("slot", "lock"))
def test_model_exception_reaches_every_caller_of_the_batch_and_server_keeps_serving(kind: str) -> None:
    calls = []

    def model(batch: np.ndarray) -> np.ndarray:
        calls.append(len(batch))
        if len(calls) == 1:
            raise ValueError("boom")
        return batch[:, 0]

    t = make_transport(kind, 4, (1,))
    with InferenceServer(model, t, max_batch_size=4, max_wait_s=2.0) as server:  # the first batch waits for all four
        clients = [t.client() for _ in range(4)]
        first = _run_threads(lambda k: clients[k](np.full(1, k, np.float32)), 4)
        assert calls[0] == 4
        assert all(isinstance(r, InferenceError) and isinstance(r.__cause__, ValueError) for r in first)
        assert _run_threads(lambda k: clients[k](np.full(1, k, np.float32)), 4) == [0, 1, 2, 3]
        assert server.running and server.stats()["failed_batches"] == 1


def test_direct_transport_raises_in_the_calling_thread() -> None:
    t = make_transport("direct", 1, (1,))
    with InferenceServer(lambda b: 1 / 0, t), pytest.raises(InferenceError, match="ZeroDivisionError"):
        t.client()(np.zeros(1, np.float32))


@pytest.mark.parametrize("make", [lambda: SlotTransport(2, (1,)), lambda: MultiprocessTransport(2, (1,), [((), np.float32)])])
def test_more_clients_than_slots_is_a_clear_error(make) -> None:
    t = make()
    t.client()
    t.client()
    with pytest.raises(TooManyClientsError, match="2 slots"):
        t.client()


@pytest.mark.parametrize("kind", ("slot", "lock"))
def test_shutdown_fails_waiting_callers_and_leaves_no_thread(kind: str) -> None:
    before = threading.active_count()
    started, release = threading.Event(), threading.Event()

    def slow(batch: np.ndarray) -> np.ndarray:
        started.set()
        assert release.wait(10), "never released"  # the batch stays in the model until shutdown has begun
        return batch[:, 0]

    t = make_transport(kind, 4, (1,))
    server = InferenceServer(slow, t, max_batch_size=1).start()
    clients = [t.client() for _ in range(4)]
    results: list = [None] * 4

    def call(k: int) -> None:
        try:
            results[k] = clients[k](np.full(1, k, np.float32))
        except BaseException as exc:
            results[k] = exc

    threads = [threading.Thread(target=call, args=(k,), daemon=True) for k in range(4)]
    for th in threads:
        th.start()
    assert started.wait(10)
    wait_until(lambda: t.pending() == 3, what="the other three requests queued behind the batch in the model")
    closer = threading.Thread(target=server.close, kwargs={"timeout": 10}, daemon=True)
    closer.start()
    wait_until(lambda: not server.running, what="close() to begin")  # the stop flag is set before the thread is let go
    release.set()  # the batch in flight finishes; the server stops before taking another
    closer.join(15)
    assert not closer.is_alive(), "server.close() hung"
    for th in threads:
        th.join(5)
    assert not any(th.is_alive() for th in threads) and not server.running
    closed = [r for r in results if isinstance(r, TransportClosedError)]
    answered = [r for r in results if isinstance(r, np.floating)]
    assert len(closed) == 3 and len(answered) == 1, results  # the batch in flight answered, every waiting caller failed
    assert all(isinstance(r, (TransportClosedError, np.floating)) for r in results), results
    with pytest.raises(TransportClosedError):
        clients[0](np.zeros(1, np.float32))
    assert threading.active_count() <= before


def _mp_worker(client, k: int, n: int, out, all_done) -> None:
    try:
        for i in range(n):
            y = client(np.array([k, i], dtype=np.float32))
            if y != k * 1000 + i:
                out[k] = -1
                return
        out[k] = n
        all_done.wait(20)  # park only once every worker has its n answers
        client(np.array([k, -1], dtype=np.float32))  # blocks until shutdown
    except TransportClosedError:
        out[k] += 0.5


@pytest.mark.slow
def test_multiprocess_transport_round_trip_and_shutdown() -> None:
    t = MultiprocessTransport(3, (2,), [((), np.float32)])
    ctx = t.context
    out = ctx.RawArray("d", 3)

    release, parked = threading.Event(), threading.Event()

    def model(batch: np.ndarray) -> np.ndarray:
        if (batch[:, 1] < 0).any():  # a parked request (all normal ones are answered): held until shutdown began
            parked.set()
            release.wait(10)
        return batch[:, 0] * 1000 + batch[:, 1]

    clients = [t.client() for _ in range(3)]
    all_done = ctx.Event()
    procs = [ctx.Process(target=_mp_worker, args=(c, k, 100, out, all_done), daemon=True) for k, c in enumerate(clients)]
    for p in procs:
        p.start()
    server = InferenceServer(model, t, max_batch_size=1).start()
    wait_until(lambda: min(out[:]) >= 100, timeout=20, what="every worker's 100 answers")
    all_done.set()
    assert parked.wait(10), "no parked request reached the model"
    wait_until(lambda: t.pending() == 2, what="the other two parked requests")  # they wait behind the one in the model
    closer = threading.Thread(target=server.close, kwargs={"timeout": 10})
    closer.start()  # shutdown begins while one parked request is in the model and the others wait
    wait_until(lambda: not server.running, what="close() to begin")
    release.set()
    closer.join(15)
    assert not closer.is_alive(), "server.close() hung"
    for p in procs:
        p.join(5)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    assert not alive, "worker processes left behind"
    assert all(p.exitcode == 0 for p in procs)
    # all correct; the two waiting parked requests were closed (the one in the model may be answered or closed)
    assert set(out[:]) <= {100.0, 100.5} and list(out[:]).count(100.5) >= 2, list(out[:])


def test_multiprocess_model_error_reaches_the_process() -> None:
    t = MultiprocessTransport(1, (1,), [((), np.float32)])
    c = t.client()
    with (
        InferenceServer(lambda b: (_ for _ in ()).throw(KeyError("bad key")), t),
        pytest.raises(InferenceError, match="KeyError"),
    ):
        c(np.zeros(1, np.float32))  # same process: the shared-memory path is identical


@pytest.mark.parametrize(("kind", "threads", "requests"), [("slot", 64, 20_000), ("lock", 16, 4_000), ("direct", 8, 2_000)])
def test_stress_nothing_lost_duplicated_or_mismatched(kind: str, threads: int, requests: int) -> None:
    r = run_stress(kind, threads, requests, fault_rate=0.02, seed=1, timeout_s=60)
    assert r.ok, r
    assert r.answered == requests and r.faults > 0


def test_tag_is_sensitive_to_every_field() -> None:
    base = np.array([[3, 5, 7]], dtype=np.int64)
    tags = {int(tag_of(base)[0])}
    for j in range(3):
        other = base.copy()
        other[0, j] += 1
        tags.add(int(tag_of(other)[0]))
    assert len(tags) == 4


@pytest.mark.parametrize("kind", ("slot", pytest.param("multiprocess", marks=pytest.mark.slow)))  # worker processes
def test_load_generator_measures_and_cleans_up(kind: str) -> None:
    before = threading.active_count()
    r = run_load(lambda b: b.sum(axis=1), kind, 4, (4,), env_us=20, duration_s=0.2, warmup_s=0.05, outputs=[((), np.float32)])
    assert r.requests > 0 and r.requests_per_s > 0 and r.latency_ms.size > 0
    assert 0 < r.pct(50) <= r.pct(99)
    assert threading.active_count() <= before


def test_lock_transport_accepts_any_number_of_clients() -> None:
    t = LockTransport()
    assert len({t.client().client_id for _ in range(100)}) == 100

"""Phase timers book time to the right phase, sync at boundaries, and cost what they say."""

from __future__ import annotations

import time

from rlbench.instrument.callbacks import Callback, CallbackList, IterationInfo
from rlbench.instrument.timers import NullTimer, PhaseTimer, estimate_overhead_s, measure_overhead


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_boundary_and_context_phases_accumulate() -> None:
    timer = PhaseTimer()
    now = timer.now
    t_a = t_b = 0.0
    start = now()
    t1 = now()
    for _ in range(3):
        t0 = t1
        _busy(0.002)
        t1 = now()
        t_a += t1 - t0
        t0 = t1
        _busy(0.001)
        t1 = now()
        t_b += t1 - t0
    timer.add("outer/a", t_a, 3)
    timer.add("outer/b", t_b, 3)
    with timer.phase("coarse"):
        _busy(0.003)
    wall = now() - start
    # lower bounds from the busy-waits; together never more than the wall time around them (no upper bound
    # per phase: a loaded machine may preempt any of them)
    assert timer.seconds["outer/a"] >= 0.006 and timer.seconds["outer/b"] >= 0.003 and timer.seconds["coarse"] >= 0.003
    assert timer.seconds["outer/a"] + timer.seconds["outer/b"] + timer.seconds["coarse"] <= wall
    assert timer.counts == {"outer/a": 3, "outer/b": 3, "coarse": 1}
    assert timer.events() == 7 and timer.context_events == 1
    snap = timer.snapshot()
    timer.reset()
    assert timer.seconds == {} and snap["coarse"] > 0


def test_sync_runs_at_every_clock_read() -> None:
    calls = []
    timer = PhaseTimer(sync=lambda: calls.append(1))
    with timer.phase("x"):
        pass
    assert len(calls) == 2 and timer.synchronized


def test_null_timer_records_nothing() -> None:
    timer = NullTimer()
    assert timer.now() == 0.0
    timer.add("a", 1.0, 5)
    with timer.phase("b"):
        pass
    assert timer.seconds == {} and timer.events() == 0 and not timer.enabled


def test_measured_overhead_is_positive_and_ordered() -> None:
    cost = measure_overhead(n=5_000, repeats=3)
    assert 0 < cost["boundary_us"] < cost["context_us"]
    assert cost["null_us"] < cost["context_us"]
    assert estimate_overhead_s(1000, 10, cost) == (990 * cost["boundary_us"] + 10 * cost["context_us"]) * 1e-6


def test_callback_list_stops_when_any_callback_says_so() -> None:
    seen = []

    class Recorder(Callback):
        def on_iteration_end(self, it: IterationInfo) -> bool | None:
            seen.append(it.iteration)
            return None

    class Stopper(Callback):
        def on_iteration_end(self, it: IterationInfo) -> bool | None:
            return it.iteration < 1

    cbs = CallbackList([Recorder(), Stopper(), None])
    info = IterationInfo(0, 10, 100, 0.1, {})
    assert cbs.on_iteration_end(info) is None
    info.iteration = 1
    assert cbs.on_iteration_end(info) is False
    assert seen == [0, 1]  # every callback still ran


def test_injected_delay_slows_the_named_phase_only(monkeypatch) -> None:
    import pytest

    from rlbench.instrument.timers import parse_injection

    monkeypatch.setenv("RLBENCH_INJECT_DELAY", "update:0.5")
    timer = PhaseTimer()
    t0 = time.perf_counter()
    timer.add("update", 0.02)
    waited = time.perf_counter() - t0
    timer.add("collect", 0.02)
    assert waited >= 0.01 and timer.seconds["update"] == pytest.approx(0.03)
    assert timer.seconds["collect"] == 0.02
    assert parse_injection("a:0.1, b/c:2") == {"a": 0.1, "b/c": 2.0} and parse_injection(None) == {}
    for bad in ("update", "update:x", ":0.1", "update:-1"):
        with pytest.raises(ValueError):
            parse_injection(bad)

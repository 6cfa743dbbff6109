"""Sampled iterations: from the 512th on, the compiled hooks attribute one iteration in ``sample_every`` and pass the
others' calls through (rlbench/profiling/_fastevent.c's paused_call); the metrics scale the attributed ones."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlbench
from rlbench.profiling import autohooks
from rlbench.profiling.attribution import SAMPLE_FROM, iteration_sampled, memory_marked
from rlbench.profiling.session import Session, Settings
from tests.profiling.loops import SlowEnv, SlowNet, spin


def test_the_compiled_hooks_pick_the_same_iterations_as_python():
    from rlbench.profiling import _fastevent

    assert _fastevent.SAMPLE_FROM == SAMPLE_FROM
    for every in (1, 2, 8, 13):
        for i in (*range(0, 2000, 7), 10**6, 2**40 + 3):
            assert _fastevent.iteration_sampled(i, every) == iteration_sampled(i, every), (i, every)
    assert all(iteration_sampled(i, 8) for i in range(SAMPLE_FROM))
    assert all(iteration_sampled(i, 1) for i in range(SAMPLE_FROM, 5000))


def test_one_in_k_is_picked_and_no_training_schedule_falls_in_step_with_it():
    later = range(SAMPLE_FROM, SAMPLE_FROM + 80_000)
    assert sum(iteration_sampled(i, 8) for i in later) / len(later) == pytest.approx(1 / 8, abs=0.005)
    # a target update every 500 steps, a log line every 1,000, a train frequency of 4: each is sampled one time in 8
    for period in (4, 10, 500, 1000):
        picked = [iteration_sampled(i, 8) for i in range(SAMPLE_FROM, SAMPLE_FROM + 4000 * period, period)]
        assert sum(picked) / len(picked) == pytest.approx(1 / 8, abs=0.02), period


def _dqn_loop(
    iterations: int, eval_at: int | None = None, log_phase: bool = False, hand: dict[str, float] | None = None
) -> dict[str, float]:
    """An off-policy loop that updates every env step (one iteration per step), each part a busy-wait of a known
    time; at ``eval_at`` one iteration runs a 250 ms evaluation at top level. Returns the parts' seconds per step.
    ``hand``, when given, gets each part's seconds over the steady iterations (all but the first), timed by hand
    around the calls the hooks see: the truth of this run, which a busy or drifting machine moves with the profile."""
    envs = gym.vector.SyncVectorEnv([lambda: SlowEnv(150e-6)])
    q, tq = SlowNet(100e-6), SlowNet(50e-6)
    opt = torch.optim.SGD(q.parameters(), lr=1e-3)
    envs.reset(seed=0)
    batch = torch.zeros(32, 4)
    clock = time.perf_counter
    spent = {"env/step": 0.0, "train/target": 0.0, "train/forward": 0.0}
    for i in range(iterations):
        t0 = clock()
        envs.step(np.zeros(1, np.int64))
        t1 = clock()
        with torch.no_grad():
            target = tq(batch).max(1)[0]
        t2 = clock()
        loss = (q(batch).max(1)[0] - target).pow(2).mean()
        t3 = clock()
        if i > 0:
            spent["env/step"] += t1 - t0
            spent["train/target"] += t2 - t1
            spent["train/forward"] += t3 - t2
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log_phase:
            with rlbench.phase("log"):
                spin(20e-6)
        if i % 100 == 0:
            tq.load_state_dict(q.state_dict())
        if i == eval_at:
            spin(0.25)
    envs.close()
    if hand is not None:
        hand.update(spent)
    return {"env/step": 150e-6, "train/target": 50e-6, "train/forward": 100e-6}


def _profile(loop, every: int, python: bool = False, monkeypatch=None):
    if monkeypatch is not None:
        if python:
            monkeypatch.setenv(autohooks.PURE_PYTHON_ENV, "1")
        else:
            monkeypatch.delenv(autohooks.PURE_PYTHON_ENV, raising=False)
    with Session(Settings(count_iteration=None, memory=True, sample_every=every)) as s:
        loop()
    return s.outcome


@pytest.mark.slow
def test_a_long_off_policy_run_attributes_one_iteration_in_k_and_scales_them_to_the_steady_state(monkeypatch):
    n = 1600
    outcome = _profile(lambda: _dqn_loop(n, log_phase=True), 8, monkeypatch=monkeypatch)
    r = outcome.attribution
    assert len(r.iterations) == n and r.steps == n  # every iteration and agent step is found, attributed or not
    # the hashed one in 8 and those with memory marks due (Python starts them, and a few after them: always attributed)
    assert len(r.sampled) == n
    assert all(r.sampled[i] for i in range(n) if iteration_sampled(i, 8) or memory_marked(i))
    attributed = sum(r.sampled[1:])
    assert SAMPLE_FROM - 1 + (n - SAMPLE_FROM) / 10 < attributed < SAMPLE_FROM + (n - SAMPLE_FROM) / 6
    # the unattributed iterations booked nothing: their env steps were never entered
    assert r.enters["env/step"] == sum(r.sampled)
    m = {x.name: x for x in outcome.metrics()}
    assert m["profile/attributed_iterations"].samples == [attributed]
    meta = m["profile/attributed_iterations"].meta
    assert meta["steady"] == n - 1 and meta["every"] == 8 and 0 < meta["attributed_s"] < meta["steady_s"]
    # scaled: the top-level phases fill the steady state's wall time but for the loop's own Python, and each known
    # part is near its busy-wait (unscaled, they would hold about a third of it: 668 of 1,599 iterations)
    steady_s = m["train_s"].samples[0] - m["warmup_s"].samples[0]
    total = sum(m[f"time/{p}"].samples[0] for p in ("env", "train", "log"))
    assert 0.9 * steady_s < total <= steady_s
    for phase, seconds in _dqn_loop(0).items():  # at least its busy-wait (and its module's work, the hooks')
        assert m[f"time/{phase}"].samples[0] / (n - 1) >= seconds * 0.95, phase


@pytest.mark.alone  # another test's load preempts iterations at random: one in 8 sampled, each preemption counts 8x
@pytest.mark.slow
def test_sampled_shares_match_the_shares_of_every_iteration_attributed(monkeypatch):
    # each run's shares against its own hand-timed ones: from one quiet run to the next, a Zen 5 moved the env step's
    # share by up to 4.5 pp (SyncVectorEnv's own Python), more than sampling's error; the hand timers move with it
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sampled, every = _shares(monkeypatch, 8), _shares(monkeypatch, 1)
    finally:
        torch.set_num_threads(threads)
    for phase, (profiled, hand) in sampled.items():
        # sampled: one in 8 of the later iterations, scaled; every: each one attributed. Both err by the hooks' own
        # cost (a few µs a call, booked to the phase); sampling must add no error of its own
        assert profiled - hand == pytest.approx(every[phase][0] - every[phase][1], abs=0.025), (phase, sampled, every)
        assert profiled == pytest.approx(hand, abs=0.03), (phase, sampled)


def _shares(monkeypatch, every: int) -> dict[str, tuple[float, float]]:
    """The steady-state shares of the known parts of :func:`_dqn_loop` under a session sampling one in ``every``:
    (the profile's, the hand-timed) for each."""
    hand: dict[str, float] = {}
    m = {x.name: x for x in _profile(lambda: _dqn_loop(1400, hand=hand), every, monkeypatch=monkeypatch).metrics()}
    steady = m["train_s"].samples[0] - m["warmup_s"].samples[0]
    return {p: (m[f"time/{p}"].samples[0] / steady, hand[p] / steady) for p in hand}


@pytest.mark.slow
def test_the_python_hooks_and_all_iterations_attribute_every_one(monkeypatch):
    assert _profile(lambda: _dqn_loop(700), 8, python=True, monkeypatch=monkeypatch).attribution.sampled == []
    outcome = _profile(lambda: _dqn_loop(700), 1, monkeypatch=monkeypatch)
    assert outcome.attribution.sampled == []
    assert "profile/attributed_iterations" not in {x.name for x in outcome.metrics()}


def _report_of(r) -> tuple[str, dict]:
    """The sampling section of the report of attribution ``r``, and its metric's meta."""
    from rlbench.profiling.results import attribution_metrics
    from rlbench.report.data import RunData
    from rlbench.report.profiled import sampling_section
    from rlbench.results.records import metric_records

    records = metric_records(
        attribution_metrics(r),
        run_id="r",
        timestamp="2026-11-28T00:00:00+00:00",
        benchmark="dqn.py",
        params={"command": "dqn.py"},
        definition_hash="h",
        repeat=0,
        seed=None,
        device="cpu",
        fingerprint={},
        meta={"kind": "profile", "report": "profile"},
    )
    meta = next(x.meta for x in records if x.metric == "profile/attributed_iterations")
    return "\n".join(sampling_section(RunData.from_records(records))), meta


def _spans_attribution(spans: list[float], sampled: list[bool]):
    """Iterations of these wall times (the first the warm-up), each attributed one booking all of it to env/step."""
    from rlbench.profiling.attribution import Attribution, IterationMark

    marks, excl, t = [], {"env/step": 0.0}, 0.0
    for i, span in enumerate(spans):
        marks.append(IterationMark(t, i, dict(excl)))
        excl["env/step"] += span if sampled[i] else 0.0
        t += span
    return Attribution(
        started=0.0, ended=t, excl=excl, enters={"env/step": sum(sampled)}, layers={"env/step": "environment"},
        steps=len(spans), iterations=marks, mem_bytes={}, cuda_peak_bytes={}, transitions=0, passthrough=0, merges=0,
        mem_marks=0, counted_iteration=None, sampled=sampled, sample_every=8,
    )  # fmt: skip


def test_long_unattributed_iterations_are_called_out_only_beyond_what_the_attributed_ones_show():
    n = SAMPLE_FROM + 800
    sampled = [iteration_sampled(i, 8) for i in range(n)]
    late_unattributed = [i for i in range(SAMPLE_FROM, n - 1) if not sampled[i]]
    late_attributed = [i for i in range(SAMPLE_FROM, n - 1) if sampled[i]]
    spans = [0.001] * n
    text, meta = _report_of(_spans_attribution(spans, sampled))
    assert "steady iterations** were attributed" in text and "of the unattributed time" not in text, meta
    spans[late_unattributed[10]] = 0.5  # an evaluation nothing attributed saw
    text, meta = _report_of(_spans_attribution(spans, sampled))
    assert "of the unattributed time, against" in text and "--all-iterations" in text, meta
    assert meta["longest_unattributed_x"] == pytest.approx(500)
    # long ones on both sides in proportion (a GC pause every 40 iterations): nothing to call out
    spans = [0.02 if i % 40 == 0 else 0.001 for i in range(n)]
    assert any(spans[i] > 0.005 for i in late_attributed) and any(spans[i] > 0.005 for i in late_unattributed)
    text, meta = _report_of(_spans_attribution(spans, sampled))
    assert "of the unattributed time" not in text, meta


@pytest.mark.slow
def test_an_evaluation_in_an_unattributed_iteration_is_seen_as_its_longest(monkeypatch):
    # an unattributed iteration away from those with memory marks (every 32nd: Python starts them and may start the
    # next few, always attributed)
    eval_at = next(i for i in range(SAMPLE_FROM + 50, 1000) if 8 <= i % 32 < 24 and not iteration_sampled(i, 8))
    outcome = _profile(lambda: _dqn_loop(eval_at + 100, eval_at=eval_at), 8, monkeypatch=monkeypatch)
    assert outcome.attribution.sampled[eval_at] is False
    text, meta = _report_of(outcome.attribution)
    assert f"of {eval_at + 99:,} steady iterations** were attributed" in text
    # (how much of each side's time long iterations hold is the load's as much as the script's: beside another test's
    # processes most iterations here run long on both sides; the call-out rule is tested on fixed spans above)
    assert meta["longest_unattributed_x"] > 20 and meta["unattributed_long_share"] > 0, meta


def test_a_session_that_ends_in_an_unattributed_iteration_books_nothing_after_its_start(monkeypatch):
    t0 = time.perf_counter()
    outcome = _profile(lambda: _dqn_loop(SAMPLE_FROM + 40), 8, monkeypatch=monkeypatch)
    r = outcome.attribution
    assert not r.sampled or len(r.sampled) == len(r.iterations)
    assert all(v >= 0 for v in r.excl.values())
    assert sum(r.excl.values()) <= time.perf_counter() - t0


def test_the_attributed_iterations_are_scaled_to_the_steady_state_calls_included():
    """A warm-up, then steady iterations of 0.1 s each: those before SAMPLE_FROM all attributed (env/step 0.02 s
    each), and of the 400 after it one in four (env/step 0.02 s and a transfer, one call of 0.01 s that no earlier
    iteration made); the unattributed ones book nothing."""
    from rlbench.profiling.attribution import Attribution, IterationMark
    from rlbench.profiling.results import attribution_metrics

    marks, excl, sampled = [IterationMark(0.0, 0, {})], {"env/step": 0.05}, [True]
    for i in range(1, SAMPLE_FROM + 400):
        marks.append(IterationMark(0.1 * i, i, dict(excl)))
        sampled.append(i < SAMPLE_FROM or i % 4 == 0)
        if sampled[-1]:
            excl["env/step"] += 0.02
            if i >= SAMPLE_FROM:
                excl["transfer"] = excl.get("transfer", 0.0) + 0.01
    r = Attribution(
        started=0.0, ended=0.1 * (SAMPLE_FROM + 400), excl=excl, enters={"env/step": SAMPLE_FROM + 100, "transfer": 100},
        layers={"env/step": "environment", "transfer": "transfer"}, steps=SAMPLE_FROM + 400, iterations=marks,
        mem_bytes={}, cuda_peak_bytes={}, transitions=0, passthrough=0, merges=0, mem_marks=0, counted_iteration=None,
        sampled=sampled, sample_every=4,
    )  # fmt: skip
    m = {x.name: x for x in attribution_metrics(r)}
    steady = SAMPLE_FROM - 1 + 400
    assert m["profile/attributed_iterations"].samples == [SAMPLE_FROM - 1 + 100]
    assert m["profile/attributed_iterations"].meta["steady"] == steady
    # the early iterations count as they are; the later attributed ones stand for four each (their wall time's share)
    assert m["time/env/step"].samples[0] == pytest.approx(0.02 * steady)
    assert m["time/transfer"].samples[0] == pytest.approx(4.0)  # 100 x 0.01 s, scaled to all 400 late iterations
    assert m["time/transfer"].meta["steady_events"] == 400  # its 100 calls, scaled as its seconds are
    assert m["time/transfer"].meta["run_s"] == pytest.approx(4.0)  # over the whole run, its steady part scaled
    assert m["time/env/step"].meta["run_s"] == pytest.approx(0.05 + 0.02 * steady)  # the warm-up as measured
    series = m["iter_time/env/step"].samples  # the per-iteration series holds attributed iterations only
    assert len(series) == SAMPLE_FROM - 1 + 100 and series[0] == pytest.approx(0.02)


@pytest.mark.slow
def test_a_collectors_labelled_rollouts_are_sampled_too(monkeypatch):
    """SB3's DQN through ``learn()``: its collector's label starts an iteration per env step (train_freq=1); from the
    512th on, one in 8 is attributed and the label of the others passes through, its env steps still counted."""
    from tests.profiling.test_compiled_hooks import _sb3_dqn_loop

    steps = 1200
    outcome = _profile(lambda: _sb3_dqn_loop(steps), 8, monkeypatch=monkeypatch)
    r = outcome.attribution
    assert r.steps == steps and len(r.sampled) == len(r.iterations) > SAMPLE_FROM + 400
    late = r.sampled[SAMPLE_FROM:]
    assert len(late) / 12 < sum(late) < len(late) / 5  # one in 8, and those with memory marks (every 32nd)
    assert all(r.sampled[i] for i in range(len(r.sampled)) if iteration_sampled(i, 8))
    # an unattributed rollout opens no phase: one per attributed iteration, and one per step of the warm-up (no update
    # before learning starts, so its rollouts are all one iteration)
    assert r.enters["collect"] == sum(r.sampled) - 1 + r.iterations[1].steps
    m = {x.name: x for x in outcome.metrics()}
    steady = m["train_s"].samples[0] - m["warmup_s"].samples[0]
    top = sum(x.samples[0] for name, x in m.items() if name.startswith("time/") and name.count("/") == 1)
    assert 0.8 * steady < top - m["time/warmup"].samples[0] <= steady * 1.001  # scaled to the steady state

"""Per-step and per-call figures over the steady state, a replay prefill named as such, CPU-only transfer advice.

A SAC-style run whose first iteration is the replay prefill (5,000 agent steps of random acting, one update) and
whose 100 steady iterations each take one agent step, an inference, an update and a transfer.
"""

from __future__ import annotations

import math
import re

import pytest

from rlbench.profiling.attribution import Attribution, IterationMark
from rlbench.profiling.results import attribution_metrics
from rlbench.report.advice import bottlenecks_section, findings
from rlbench.report.data import RunData
from rlbench.report.phases import breakdown, layer_table, per_event_us
from rlbench.results.metrics import SPS_STEADY
from rlbench.results.records import metric_records

PREFILL_STEPS, STEADY = 5000, 100
# seconds per steady iteration, by phase; Python/other is the rest of 0.1 s
PER_ITER = {"env/step": 0.02, "inference": 0.01, "train/backward": 0.03, "transfer": 0.02}
LAYERS = {"env/step": "environment", "inference": "inference", "train/backward": "update", "transfer": "transfer"}


def _attribution_of(
    marks: list[IterationMark], excl: dict[str, float], *, started: float, ended: float, steps: int,
    enters: dict[str, int], counted: int | None = None,
) -> Attribution:  # fmt: skip
    """An Attribution of these iterations and totals, with no events counted beyond ``enters``."""
    return Attribution(
        started=started, ended=ended, excl=excl, enters=enters, layers=dict(LAYERS), steps=steps, iterations=marks,
        mem_bytes={}, cuda_peak_bytes={}, transitions=0, passthrough=0, merges=0, mem_marks=0, counted_iteration=counted,
    )  # fmt: skip


def _attribution(first_update_s: float = 0.05) -> Attribution:
    # the prefill: env steps and the first update, no inference
    warm = {"env/step": 6.0, "train/backward": first_update_s}
    marks, excl, t = [IterationMark(0.0, 0, {})], dict(warm), 10.0
    steps = PREFILL_STEPS
    for _ in range(STEADY):
        marks.append(IterationMark(t, steps, dict(excl)))
        for p, s in PER_ITER.items():
            excl[p] = excl.get(p, 0.0) + s
        t += 0.1
        steps += 1
    enters = {"env/step": PREFILL_STEPS + STEADY, "inference": STEADY, "train/backward": STEADY + 1, "transfer": STEADY}
    return _attribution_of(marks, excl, started=0.0, ended=t, steps=steps, enters=enters)


def _run(device: str = "cpu", first_update_s: float = 0.05) -> RunData:
    metrics = attribution_metrics(_attribution(first_update_s))
    records = metric_records(
        metrics,
        run_id="r",
        timestamp="2026-11-26T00:00:00+00:00",
        benchmark="sac.py",
        params={"command": "sac.py"},
        definition_hash="h",
        repeat=0,
        seed=None,
        device=device,
        fingerprint={},
        meta={"kind": "profile", "report": "profile"},
    )
    return RunData.from_records(records)


def test_layer_rows_per_agent_step_add_up_to_the_steady_state_steps_per_second():
    d = _run()
    b = breakdown(d)
    text = "\n".join(layer_table(d, b))
    rows = [line for line in text.splitlines() if line.startswith("|") and not line.startswith("|-")][1:]
    per_step = [float(line.strip("|").split("|")[4].replace(",", "")) for line in rows]
    # each steady iteration is 0.1 s for one agent step: 100,000 µs per step, whatever the prefill held
    assert sum(per_step) == pytest.approx(1e6 / d.med(SPS_STEADY), rel=1e-3)
    assert sum(per_step) == pytest.approx(100_000, rel=1e-3)


def test_a_replay_prefill_is_named_and_not_ranked_against_the_steady_state():
    d = _run()
    found = findings(d, breakdown(d))
    prefill = [f for f in found if "prefill" in f.title.lower()]
    assert len(prefill) == 1 and not prefill[0].ranked
    assert (
        "replay prefill (learning_starts): 5,000 agent steps of random acting before the first update" in prefill[0].evidence
    )
    assert found[-1] is prefill[0]  # after every ranked bottleneck
    assert not any("lazy kernel init" in f.action for f in found)
    table = "\n".join(bottlenecks_section(found))
    assert re.search(r"\| – \| Replay prefill", table)


def test_a_prefill_with_a_slow_first_update_names_both_with_their_seconds():
    # a GPU run: the first update holds the lazy CUDA/cuBLAS set-up, 3 s of the first iteration's 9 s
    d = _run("cuda", first_update_s=3.0)
    found = findings(d, breakdown(d))
    warm = [f for f in found if not f.ranked]
    assert len(warm) == 1 and warm[0].title == "Replay prefill and first update (first iteration)"
    # the first iteration spans 10 s (the first steady mark): 7 s of it outside updates
    assert "prefill (learning_starts) of 5,000 agent steps of random acting before the first update (7.00 s outside" in (
        warm[0].evidence
    )
    # a steady iteration's update is 30 ms: the first one is 100x that
    assert "the first update, 3.00 s, 100× a steady iteration's update (30.0 ms)" in warm[0].evidence
    assert "learning_starts" in warm[0].action and "lazy kernel init" in warm[0].action
    assert found[-1] is warm[0]


def test_transfer_advice_on_a_cpu_only_run_speaks_of_numpy_tensor_conversion():
    found = {f.title: f for f in findings(_run("cpu"), breakdown(_run("cpu")))}
    cpu = next(f for t, f in found.items() if "NumPy" in t)
    assert "waits for the device" not in cpu.action and "NumPy" in cpu.evidence
    on_gpu = {f.title: f for f in findings(_run("cuda"), breakdown(_run("cuda")))}
    assert "waits for the device" in on_gpu["Host-device transfer"].action


def test_per_call_figures_divide_steady_seconds_by_steady_calls():
    d = _run()
    # inference ran in the steady state alone: its 100 calls are steady calls, 10 ms each
    assert per_event_us(d, "inference") == pytest.approx(10_000, rel=1e-6)
    # env steps also ran in the prefill: steady calls are taken in proportion to agent steps (batch of 1): 20 ms
    assert per_event_us(d, "env/step") == pytest.approx(20_000, rel=1e-6)
    # the update's warm-up calls cannot be told apart from its steady ones: no per-call figure rather than a wrong one
    assert math.isnan(per_event_us(d, "train/backward"))


@pytest.mark.parametrize("counted", [None, 0, 1, 7, 39])
def test_the_array_form_of_the_steady_state_matches_a_span_by_span_reference(counted: int | None) -> None:
    # attribution_metrics handles tens of thousands of iterations as arrays; this is the plain loop it stands for, on
    # irregular spans: phases that appear late, a snapshot that lacks a phase, the counted iteration left out
    import random

    rng = random.Random(counted)
    marks, excl, t, steps = [], {}, 1.0, 0
    for i in range(40):
        marks.append(IterationMark(t, steps, {k: v for k, v in excl.items() if not (i == 5 and k == "transfer")}))
        for p in list(PER_ITER)[: 1 + i % 4]:
            excl[p] = excl.get(p, 0.0) + rng.uniform(0.001, 0.01)
        t += rng.uniform(0.02, 0.05)
        steps += rng.randint(1, 4)
    r = _attribution_of(
        marks, excl, started=1.0, ended=t + 0.01, steps=steps + 1, enters=dict.fromkeys(excl, 1), counted=counted
    )
    got = {m.name: m for m in attribution_metrics(r)}

    ends = [*marks[1:], IterationMark(r.ended, r.steps, r.excl)]
    spans = list(enumerate(zip(marks, ends)))[1:]  # the first is the warm-up
    kept = [(i, m, e) for i, (m, e) in spans if not (i == counted and len(spans) > 1)]
    steady_s = sum(e.t - m.t for _, m, e in kept)
    steady_steps = sum(e.steps - m.steps for _, m, e in kept)
    phase_s = {p: sum(max(0.0, e.excl.get(p, 0.0) - m.excl.get(p, 0.0)) for _, m, e in kept) for p in PER_ITER}
    assert got["profile/excluded_s"].samples[0] == pytest.approx(
        sum(e.t - m.t for i, (m, e) in spans if i == counted), abs=1e-12
    )
    assert got["iterations"].samples[0] == 1 + len(kept)
    assert got[SPS_STEADY].samples[0] == pytest.approx(steady_steps / steady_s)
    for p, s in phase_s.items():
        assert got[f"time/{p}"].samples[0] == pytest.approx(s)
    # one per-iteration sample per kept iteration but the unfinished last one
    assert len(got["iter_time/env/step"].samples) == len([1 for i, _, _ in kept if i != len(marks) - 1])

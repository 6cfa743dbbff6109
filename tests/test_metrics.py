"""The record vocabulary: layers guessed from conventional phase names, training metrics with layers and events."""

from __future__ import annotations

import math

import pytest

from rlbench.instrument.callbacks import IterationInfo
from rlbench.instrument.timers import estimate_overhead_s
from rlbench.results.metrics import (
    ITER_TIME,
    LAYERS,
    TIME,
    WARMUP,
    TrainingResult,
    counter_metrics,
    guess_layer,
    iter_time_metric,
    time_metric,
    training_metrics,
)


@pytest.mark.parametrize(
    ("phase", "layer"),
    [
        ("collect/env", "environment"),
        ("rollout/env_step", "environment"),
        ("collect/policy", "inference"),
        ("update/sample", "replay"),  # the last component decides: replay work inside the update
        ("replay/add", "replay"),
        ("update/actor", "update"),
        ("update", "update"),
        ("learn/backward", "update"),
        ("gae", "advantage"),
        ("advantage", "advantage"),
        ("h2d", "transfer"),
        ("update/d2h", "transfer"),
        ("misc", "other"),
        ("env/misc", "environment"),  # no word of the last component matches: the whole name decides
        ("environmental", "other"),  # whole words only
    ],
)
def test_guess_layer(phase: str, layer: str) -> None:
    assert guess_layer(phase) == layer
    assert layer in LAYERS


def test_metric_name_helpers() -> None:
    assert time_metric("collect/env") == TIME + "collect/env" == "time/collect/env"
    assert iter_time_metric("update") == ITER_TIME + "update" == "iter_time/update"


def _result(steady_s: float = 2.0) -> TrainingResult:
    phases = {"collect": 0.9, "collect/env": 0.6, "collect/policy": 0.3, "update": 0.8}
    iters = [
        IterationInfo(
            k,
            100 * (k + 1),
            400,
            0.5 * (k + 1),
            {"collect": 0.3 + k, "collect/env": 0.2 + k, "update": 0.25 + k} if k else {"collect": 9.0},
            {"loss": float(k)} if k != 2 else {"kl": 0.1},
        )
        for k in range(4)
    ]
    return TrainingResult(
        config=None,
        device="cpu",
        env_steps=400,
        init_s=0.1,
        warmup_s=0.5,
        train_s=2.5,
        eval_s=0.2,
        phase_s={**phases, WARMUP: 0.5},
        phase_events={"collect": 3, "collect/env": 300, "collect/policy": 300, "update": 3, WARMUP: 1},
        context_events=7,
        phase_layers={
            "collect": "environment",
            "collect/env": "environment",
            "collect/policy": "inference",
            "update": "update",
            "never/timed": "other",
        },
        iterations=iters,
        eval_returns=[10.0, 20.0],
        episode_returns=[1.0, 2.0],
        episode_end_steps=[50, 150],
        steady_steps=300,
        steady_s=steady_s,
        synchronized=False,
    )


OVERHEAD = {"boundary_us": 0.1, "context_us": 1.0, "null_us": 0.01}


def test_every_phase_record_carries_its_layer_and_events() -> None:
    by_name = {m.name: m for m in training_metrics(_result(), OVERHEAD)}
    times = {n: m for n, m in by_name.items() if n.startswith(TIME)}
    assert set(times) == {"time/collect", "time/collect/env", "time/collect/policy", "time/update", "time/warmup"}
    for name, m in times.items():
        assert m.meta["layer"] in LAYERS and isinstance(m.meta["events"], int), name
        assert (m.unit, m.direction) == ("s", "lower")
    assert times["time/collect/policy"].meta == {"events": 300, "layer": "inference"}
    assert times["time/warmup"].meta == {"events": 1, "layer": "other"}
    assert times["time/collect/env"].samples == [0.6]
    assert "time/never/timed" not in by_name and "iter_time/never/timed" not in by_name  # declared but never timed


def test_iteration_times_have_one_sample_per_steady_iteration() -> None:
    by_name = {m.name: m for m in training_metrics(_result(), OVERHEAD)}
    iter_times = {n: m for n, m in by_name.items() if n.startswith(ITER_TIME)}
    assert set(iter_times) == {"iter_time/collect", "iter_time/collect/env", "iter_time/collect/policy", "iter_time/update"}
    assert iter_times["iter_time/collect"].samples == [1.3, 2.3, 3.3]  # the warm-up iteration is left out
    assert iter_times["iter_time/update"].samples == [1.25, 2.25, 3.25]
    assert iter_times["iter_time/collect/policy"].samples == [0.0, 0.0, 0.0]  # untimed in an iteration: zero
    assert iter_times["iter_time/update"].meta == {"layer": "update"}


def test_throughput_and_timer_figures() -> None:
    r = _result()
    by_name = {m.name: m for m in training_metrics(r, OVERHEAD)}
    assert by_name["sps/steady"].samples == [300 / 2.0]
    assert by_name["sps"].samples == [pytest.approx(400 / 2.5)] and by_name["sps"].meta["steps"] == 400
    assert by_name["wall_s"].samples == [pytest.approx(0.1 + 2.5 + 0.2)]
    assert by_name["iterations"].samples == [4.0] and by_name["env_steps"].samples == [400.0]
    assert by_name["timer/events"].samples == [607.0] and by_name["timer/events"].meta == {"context_events": 7}
    assert by_name["timer/overhead_s"].samples == [estimate_overhead_s(607, 7, OVERHEAD)]
    assert by_name["train/episode_return"].x == [50.0, 150.0]
    assert by_name["train/elapsed_s"].samples == [0.5, 1.0, 1.5, 2.0] and by_name["train/elapsed_s"].x == [100, 200, 300, 400]
    assert math.isnan(by_name["diag/kl"].samples[0]) and by_name["diag/kl"].samples[2] == 0.1
    assert by_name["diag/loss"].samples[:2] == [0.0, 1.0] and math.isnan(by_name["diag/loss"].samples[2])
    assert math.isnan({m.name: m for m in training_metrics(_result(steady_s=0.0), OVERHEAD)}["sps/steady"].samples[0])


def test_counter_metrics() -> None:
    ms = counter_metrics({"ops": {"update": 12, "collect": 3}, "syncs": {"update": 0}})
    assert [(m.name, m.samples, m.unit, m.direction) for m in ms] == [
        ("ops/update", [12.0], "count", "lower"),
        ("ops/collect", [3.0], "count", "lower"),
        ("syncs/update", [0.0], "count", "lower"),
    ]

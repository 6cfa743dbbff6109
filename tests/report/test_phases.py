"""Phases of any run from its records alone: user-named phase trees, layers as recorded or guessed, shares that add up."""

from __future__ import annotations

import re

import pytest

from rlbench.report.data import RunData
from rlbench.report.phases import OTHER, breakdown, layer_of, layer_seconds, layer_table, leaf_phases, steady_phases
from rlbench.results.metrics import LAYERS
from rlbench.results.records import Record

# a user's loop: parents include their children; leaves sum to 1.6 s of 2.0 s steady time
PHASES = {
    "rollout": 0.9,
    "rollout/env_step": 0.6,
    "rollout/policy": 0.25,
    "gae": 0.1,
    "learn": 0.7,
    "learn/backward": 0.65,
}
LEAVES = ("rollout/env_step", "rollout/policy", "gae", "learn/backward")
GUESSED = {"rollout/env_step": "environment", "rollout/policy": "inference", "gae": "advantage", "learn/backward": "update"}


def _records(layers: dict[str, str] | None = None) -> list[Record]:
    def rec(metric: str, samples: list[float], meta: dict | None = None) -> Record:
        return Record(
            run_id="r",
            timestamp="2026-11-22T00:00:00+00:00",
            benchmark="my-script",
            params={"lr": 3e-4},
            definition_hash="h",
            metric=metric,
            unit="s",
            direction="lower",
            samples=samples,
            meta=meta or {},
        )

    recs = [
        rec("train_s", [2.3]),
        rec("warmup_s", [0.3]),
        rec("iterations", [11.0]),
        rec("env_steps", [1100.0]),
        rec("time/warmup", [0.3], {"layer": "other", "events": 1}),
    ]
    for phase, s in PHASES.items():
        meta = {"events": 10}
        if layers is not None and phase in layers:
            meta["layer"] = layers[phase]
        recs.append(rec(f"time/{phase}", [s], meta))
    return recs


def _layer_rows(d: RunData) -> dict[str, tuple[float, float]]:
    text = "\n".join(layer_table(d, breakdown(d)))
    rows = re.findall(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+)% \|", text, re.MULTILINE)
    return {name: (float(s), float(share)) for name, s, share in rows}


def test_leaf_phases_of_a_user_tree() -> None:
    d = RunData.from_records(_records())
    assert steady_phases(d) == list(PHASES)  # recorded order, warm-up left out
    assert leaf_phases(d) == LEAVES  # `rollout` and `learn` have children


def test_layers_guessed_from_user_names() -> None:
    d = RunData.from_records(_records())
    assert {p: layer_of(d, p) for p in LEAVES} == GUESSED


def test_recorded_layer_wins_over_the_guess() -> None:
    recorded = {"rollout/env_step": "transfer", "gae": "update", "learn/backward": "not-a-layer"}
    d = RunData.from_records(_records(recorded))
    assert layer_of(d, "rollout/env_step") == "transfer"
    assert layer_of(d, "gae") == "update"
    assert layer_of(d, "rollout/policy") == "inference"  # none recorded: guessed
    assert layer_of(d, "learn/backward") == "update"  # an unknown recorded layer falls back to the guess
    assert layer_seconds(d, breakdown(d)) == pytest.approx({"update": 0.75, "transfer": 0.6, "inference": 0.25})


@pytest.mark.parametrize("layers", [None, {p: GUESSED[p] for p in LEAVES}, {"rollout/env_step": "replay"}])
def test_layer_table_adds_up_and_python_other_is_the_untimed_rest(layers: dict[str, str] | None) -> None:
    d = RunData.from_records(_records(layers))
    b = breakdown(d)
    assert b.steady_s == pytest.approx(2.0) and set(b.leaf_s) == set(LEAVES)
    assert b.other_s == pytest.approx(2.0 - sum(PHASES[p] for p in LEAVES))  # parents are not counted twice
    rows = _layer_rows(d)
    assert sum(share for _, share in rows.values()) == pytest.approx(100.0, abs=0.3)
    assert rows[OTHER] == (pytest.approx(0.4, abs=5e-4), pytest.approx(20.0, abs=0.05))
    labels = {LAYERS[layer_of(d, p)] for p in LEAVES}
    assert set(rows) == labels | {OTHER}
    assert LAYERS["other"] not in rows  # no timed phase lands in "other named phases" or Python/other
    for layer, seconds in layer_seconds(d, b).items():
        assert rows[LAYERS[layer]][0] == pytest.approx(seconds, abs=5e-4)

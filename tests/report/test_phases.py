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


def _records(
    layers: dict[str, str] | None = None, phases: dict[str, float] | None = None, kind: str | None = None
) -> list[Record]:
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
            meta={**(meta or {}), **({"kind": kind} if kind else {})},
        )

    recs = [
        rec("train_s", [2.3]),
        rec("warmup_s", [0.3]),
        rec("iterations", [11.0]),
        rec("env_steps", [1100.0]),
        rec("time/warmup", [0.3], {"layer": "other", "events": 1}),
    ]
    for phase, s in (PHASES if phases is None else phases).items():
        meta = {"events": 0 if phase in ("replay", "train") else 10}
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


# a profile of an off-policy loop on a GPU: the replay label holds the batch's copy to the device (its own child)
GPU_REPLAY = {
    "env": 0.3,
    "env/step": 0.3,
    "replay": 0.6,
    "replay/sample": 0.6,
    "replay/sample/transfer": 0.35,
    "train": 0.8,
    "train/backward": 0.8,
}
GPU_LAYERS = {
    "env": "environment",
    "env/step": "environment",
    "replay": "replay",
    "replay/sample": "replay",
    "replay/sample/transfer": "transfer",
    "train": "update",
    "train/backward": "update",
}


def test_a_profiled_phase_around_a_nested_one_keeps_its_own_time_in_its_layer() -> None:
    """`replay/sample` minus its device copy is replay work, not Python/other (seen first on an H200's DQN profile)."""
    d = RunData.from_records(_records(GPU_LAYERS, GPU_REPLAY, kind="profile"))
    b = breakdown(d)
    assert b.leaf_s["replay/sample"] == pytest.approx(0.25)  # its own time, outside the transfer
    assert b.other_s == pytest.approx(2.0 - 0.3 - 0.6 - 0.8)  # the sample's 0.6 s counted once, all of it named
    assert "env" not in b.leaf_s and "train" not in b.leaf_s  # grouping parents (no events) keep the leaves-only rule
    rows = _layer_rows(d)
    assert rows[LAYERS["replay"]][0] == pytest.approx(0.25, abs=5e-4)
    assert rows[LAYERS["transfer"]][0] == pytest.approx(0.35, abs=5e-4)
    assert rows[OTHER][0] == pytest.approx(0.3, abs=5e-4)
    assert sum(share for _, share in rows.values()) == pytest.approx(100.0, abs=0.3)


def test_rlbench_own_loops_keep_a_parents_rest_in_python_other() -> None:
    """Outside a profile a parent's rest is loop overhead, as the suites define it: nothing moves out of Python/other."""
    d = RunData.from_records(_records(GPU_LAYERS, GPU_REPLAY))
    b = breakdown(d)
    assert "replay/sample" not in b.leaf_s
    assert b.other_s == pytest.approx(2.0 - 0.3 - 0.35 - 0.8)

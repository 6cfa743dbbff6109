"""The bottleneck report: sections from records, consistent figures, findings ranked by measured impact."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlbench.report.advice import findings
from rlbench.report.data import RunData, select_run
from rlbench.report.phases import breakdown
from rlbench.report.training import render
from rlbench.results.records import Record


def _rec(metric: str, samples: list[float], repeat: int = 0, meta: dict | None = None, x: list[float] | None = None) -> Record:
    params = {"num_envs": 8, "rollout_steps": 128, "minibatches": 2, "inference": "numpy"}
    return Record(
        run_id="run-a",
        timestamp="2026-11-22T00:00:00+00:00",
        benchmark="ppo-cartpole",
        params=params,
        definition_hash="h",
        metric=metric,
        unit="s",
        direction="lower",
        samples=samples,
        repeat=repeat,
        seed=repeat,
        meta=meta or {},
        x=x,
    )


def synthetic(env_s: float, update_s: float, other_s: float) -> list[Record]:
    """One repeat of 11 iterations (10 steady) whose steady time splits as given (policy 0.1 s, advantage 0.01 s)."""
    leaves = {
        "collect/env": env_s,
        "collect/policy": 0.1,
        "advantage": 0.01,
        "update/prepare": 0.0,
        "update/forward": update_s / 2,
        "update/backward": update_s / 4,
        "update/optimizer": update_s / 4,
    }
    steady = sum(leaves.values()) + other_s
    recs = [
        _rec("train_s", [steady + 0.05]),
        _rec("warmup_s", [0.05]),
        _rec("iterations", [11.0]),
        _rec("env_steps", [11264.0]),
        _rec("sps", [11264 / (steady + 0.05)]),
        _rec("timer/overhead_s", [0.0001]),
        _rec("timer/events", [1000.0]),
        _rec("timer/boundary_us", [0.1]),
        _rec("timer/context_us", [1.0]),
        _rec("eval_return", [500.0, 480.0]),
    ]
    for phase, s in leaves.items():
        recs.append(_rec(f"time/{phase}", [s], meta={"events": 1280 if phase.startswith("collect") else 80}))
    return recs


def test_findings_ranked_by_amdahl_bound() -> None:
    d = RunData.from_records(synthetic(env_s=1.0, update_s=0.4, other_s=0.2))
    b = breakdown(d)
    assert b.steady_s == pytest.approx(1.71)
    found = findings(d, b)
    assert [f.title for f in found][:3] == [
        "Environment stepping",
        "Training update",
        "Python/other (outside the leaf phases)",
    ]
    assert found[0].share == pytest.approx(1.0 / 1.71)
    assert found[0].bound == pytest.approx(1 / (1 - 1.0 / 1.71))
    assert all(a.bound >= b_.bound for a, b_ in zip(found, found[1:]))
    # evidence quotes the measured figures: 1.0 s over 1280 calls = 781.2 µs per batched step of 8 envs
    expected = "58.5% of steady time: `collect/env` 781.2 µs per call for 8 envs (97.66 µs per env transition)"
    assert expected in found[0].evidence


def test_small_parts_trigger_nothing() -> None:
    d = RunData.from_records(synthetic(env_s=0.001, update_s=0.001, other_s=0.0))
    titles = [f.title for f in findings(d, breakdown(d))]
    assert "Environment stepping" not in titles and "Training update" not in titles
    assert "Policy inference" in titles  # 0.1 s of 0.113 s


def test_render_sections_and_consistency() -> None:
    text, charts = render(synthetic(env_s=0.5, update_s=1.0, other_s=0.1), "x")
    for heading in (
        "# rlbench bottleneck report",
        "## 1. End-to-end timing",
        "## 2. Phase breakdown",
        "## 3. Time by layer",
        "## 4. Learning outcome",
        "## 5. Bottlenecks and recommendations",
        "## 6. Timer overhead",
    ):
        assert heading in text
    assert "![Share of steady-state time per phase](x-phases.png)" in text
    layer_rows = re.findall(
        r"^\| (environment|policy inference|advantage|training update|Python/other) \| ([\d.]+) \| ([\d.]+)%",
        text,
        re.MULTILINE,
    )
    assert len(layer_rows) == 5
    assert sum(float(r[2]) for r in layer_rows) == pytest.approx(100.0, abs=0.3)
    bars = charts[0].bars
    assert sum(b.value for b in bars) == pytest.approx(100.0, abs=1e-6)
    assert "median over repeats **490.0**" in text


def test_select_run() -> None:
    a = synthetic(0.1, 0.1, 0.1)
    b = [Record(**{**r.__dict__, "run_id": "run-b"}) for r in a]
    assert {r.run_id for r in select_run(a + b)} == {"run-b"}  # latest by id
    assert {r.run_id for r in select_run(a + b, "run-a")} == {"run-a"}
    from rlbench.core.errors import DataError

    with pytest.raises(DataError, match="match run id"):
        select_run(a + b, "run-")
    with pytest.raises(DataError, match="no records"):
        select_run([])


@pytest.mark.slow
def test_report_of_a_real_short_run(tmp_path: Path) -> None:
    import torch

    from rlbench.algos.ppo.config import PPOConfig
    from rlbench.report.kinds import write_report
    from rlbench.results.store import RunWriter, read_records
    from rlbench.run.registry import get_spec
    from rlbench.run.runner import run_benchmark

    writer = RunWriter(tmp_path)
    cfg = PPOConfig(total_steps=3072, eval_episodes=2)
    outcome = run_benchmark(
        get_spec("ppo-cartpole"), cfg, writer, repeats=2, device=torch.device("cpu"), meta={"command": "test"}
    )
    assert outcome.repeats_done == 2 and outcome.error is None
    text = write_report(writer.path, tmp_path / "r.md")
    assert (tmp_path / "r-phases.png").stat().st_size > 1000
    assert "2 (seeds 0, 1)" in text and "3,072 agent steps" in text
    d = RunData.from_records(select_run(read_records(writer.path)))
    b = breakdown(d)
    assert 0 < sum(b.leaf_s.values()) <= b.steady_s * 1.001


def test_the_setting_says_which_precision_ran() -> None:
    """``--precision auto`` is resolved per machine: the header shows the setting and what ran (``updates`` meta)."""
    recs = synthetic(0.4, 0.4, 0.1)
    for r in recs:
        r.params["precision"] = "auto"
    recs.append(_rec("updates", [100.0], meta={"precision": "bf16"}))
    assert "precision=auto (ran bf16)" in render(recs)[0]
    for r in recs:
        r.params["precision"] = "fp32"
    recs[-1].meta["precision"] = "fp32"
    text = render(recs)[0]
    assert "precision=fp32" in text and "(ran" not in text

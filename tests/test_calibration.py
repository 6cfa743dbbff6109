"""The calibration harness: interleaved comparisons, alarms, and its report."""

from __future__ import annotations

import numpy as np

from rlbench.calibration import CONDITIONS, one_comparison
from rlbench.gate import Threshold
from rlbench.report.calibration import render


def fake_side(seed: int, inject: float, size: int) -> list[float]:
    rng = np.random.default_rng(seed * 7919 + int(inject * 1000) + size)
    return list((1.0 + inject) * (1.0 + 0.01 * rng.standard_normal(size)))


def test_one_comparison_alarms_only_on_a_real_slowdown() -> None:
    t = Threshold("iter_time/update", 0.025)
    aa = one_comparison(fake_side, "iter_time/update", 0.0, rounds=8, size=20, threshold=t)
    slow = one_comparison(fake_side, "iter_time/update", 0.10, rounds=8, size=20, threshold=t)
    assert not aa["alarm"] and abs(aa["ratio"] - 1.0) < 0.02
    assert slow["alarm"] and 1.07 < slow["ratio"] < 1.13 and slow["ci"][0] > 1.0


def test_render_counts_alarms() -> None:
    rows = {
        label: {"inject": inj, "results": [{"alarm": inj > 0, "ratio": 1 + inj, "ci": [1, 1], "wall_s": 2.0}] * 4}
        for label, inj in CONDITIONS
    }
    data = {"rounds": 8, "threshold_pct": 2.5, "benchmarks": {"b": {"metric": "m", "setup": "s", "conditions": rows}}}
    text = render(data, {"cpu": "cpu", "cores": 2, "id": "x"}, "cmd")
    assert "| A/A | 0/4 false alarms | 0% |" in text and "| +10% | 4/4 detected | 100% |" in text

"""The calibration harness: interleaved comparisons, alarms, and its report."""

from __future__ import annotations

import time

import numpy as np

from rlbench.calibration import CONDITIONS, one_comparison
from rlbench.gate import Threshold
from rlbench.report.calibration import render


def fake_side(seed: int, inject: float, size: int) -> list[float]:
    rng = np.random.default_rng(seed * 7919 + int(inject * 1000) + size)
    return list((1.0 + inject) * (1.0 + 0.01 * rng.standard_normal(size)))


def test_one_comparison_alarms_only_on_a_real_slowdown() -> None:
    t = Threshold("iter_time/update", 0.025)
    aa = one_comparison(fake_side, "iter_time/update", CONDITIONS[0], rounds=8, size=20, threshold=t)
    slow = one_comparison(fake_side, "iter_time/update", CONDITIONS[2], rounds=8, size=20, threshold=t)
    assert not aa["alarm"] and abs(aa["ratio"] - 1.0) < 0.02 and not aa["refused"]
    assert slow["alarm"] and 1.07 < slow["ratio"] < 1.13 and slow["ci"][0] > 1.0
    assert all(0.0 <= x <= 1.0 for x in aa["load"])  # every run's machine load was recorded


def test_a_hog_on_one_side_only_is_refused_not_an_alarm() -> None:
    """A then B with a CPU hog from halfway: B runs slower because the machine is busy; the gate withholds a verdict."""

    def hog_sensitive(seed: int, inject: float, size: int) -> list[float]:
        time.sleep(0.1)  # a run long enough for the kernel's CPU accounting (10 ms ticks) to see the hog
        busy = any(p.poll() is None for p in HOGS)
        return [x * (1.3 if busy else 1.0) for x in fake_side(seed, inject, size)]

    from rlbench import calibration

    original = calibration.CPUHog
    HOGS.clear()

    class RecordingHog(original):
        def start(self) -> None:
            super().start()
            HOGS.extend(self.procs)

    calibration.CPUHog = RecordingHog
    try:
        t = Threshold("iter_time/update", 0.025)
        out = one_comparison(hog_sensitive, "iter_time/update", CONDITIONS[4], rounds=6, size=20, threshold=t)
    finally:
        calibration.CPUHog = original
    assert out["alarm_without_load_check"] and out["refused"] and not out["alarm"]
    assert out["load"][1] > out["load"][0] + 0.1
    assert all(p.poll() is not None for p in HOGS)  # the hog is gone


HOGS: list = []


def test_render_counts_alarms() -> None:
    rows = {
        c.label: {
            "inject": c.inject,
            "results": [{"alarm": c.inject > 0, "ratio": 1 + c.inject, "ci": [1, 1], "wall_s": 2.0}] * 4,
        }
        for c in CONDITIONS
    }
    data = {"rounds": 8, "threshold_pct": 2.5, "benchmarks": {"b": {"metric": "m", "setup": "s", "conditions": rows}}}
    text = render(data, {"cpu": "cpu", "cores": 2, "id": "x"}, "cmd")
    assert "| A/A | 0/4 false alarms | 0% | 0/4 | 0/4 |" in text and "| +10% | 4/4 detected | 100% | 0/4 | 4/4 |" in text

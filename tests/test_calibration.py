"""The calibration harness: interleaved comparisons, alarms, and its report."""

from __future__ import annotations

import numpy as np
import pytest

from rlbench.analysis.calibration import CONDITIONS, one_comparison
from rlbench.analysis.gate import Threshold
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


def test_a_hog_on_one_side_only_is_refused_not_an_alarm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A then B with a CPU hog from halfway: B runs slower because the machine is busy; the gate withholds a verdict.

    The hog and the load probe are simulated, so the outcome does not depend on what else this machine is doing
    (tests/instrument/test_machine_load.py checks the real probe).
    """
    from rlbench.analysis import calibration
    from rlbench.instrument.machine_load import MachineLoad

    state = {"hog": False, "started": 0, "stopped": 0}

    class FakeHog:
        def __init__(self, n: int) -> None:
            pass

        def start(self) -> None:
            state["hog"], state["started"] = True, state["started"] + 1

        def stop(self) -> None:
            state["hog"], state["stopped"] = False, state["stopped"] + 1

    class FakeProbe:
        def stop(self) -> MachineLoad:
            return MachineLoad(0.9 if state["hog"] else 0.0, 0.0, None, None, None, 1.0)

    def hog_sensitive(seed: int, inject: float, size: int) -> list[float]:
        return [x * (1.3 if state["hog"] else 1.0) for x in fake_side(seed, inject, size)]

    monkeypatch.setattr(calibration, "CPUHog", FakeHog)
    monkeypatch.setattr(calibration, "LoadProbe", FakeProbe)
    t = Threshold("iter_time/update", 0.025)
    out = one_comparison(hog_sensitive, "iter_time/update", CONDITIONS[4], rounds=6, size=20, threshold=t)
    assert out["alarm_without_load_check"] and out["refused"] and not out["alarm"]
    assert out["load"] == [0.0, 0.9] and state == {"hog": False, "started": 1, "stopped": 1}
    # interleaved, the same hog hits both sides alike: no refusal, no alarm
    both = one_comparison(hog_sensitive, "iter_time/update", CONDITIONS[3], rounds=6, size=20, threshold=t)
    assert not both["refused"] and not both["alarm"]


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

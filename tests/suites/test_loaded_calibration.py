"""The loaded-machine harnesses of issue 58, at tiny settings (the real calibrations run for hours; the lead runs them):
``loaded_calibration`` bisects and confirms throwaway repositories and reports from the commands' JSON, and
``step_calibration`` keeps a loaded measurement's series apart and draws the half-loaded histories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rlbench.suites.scripts import loaded_calibration, step_calibration
from rlbench.suites.scripts.step_calibration import calibrate, condition_of


@pytest.mark.slow
def test_bisect_harness_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bisect.md"
    argv = ["bisect", "--trials", "1", "--commits", "4", "--work-ms", "20", "--step", "0.5", "--threshold", "20"]
    assert loaded_calibration.main([*argv, "--neighbours", "1", "--max-rounds", "10", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    (trial,) = data["trials"]
    # a smoke of the harness, not a calibration: whether this busy test machine let it decide is not asserted
    assert trial["exit_code"] in (0, 2) and trial["rounds_run"] >= 10 and trial["seconds"] > 0, trial
    assert trial["exact"] == (trial["exit_code"] == 0), trial
    text = out.read_text()
    assert f"The slow commit was named exactly in {int(trial['exact'])} of 1 trials" in text
    assert "1 CPU-bound neighbour(s)" in text and "| Trial | Slow commit |" in text


def test_step_calibration_keeps_loaded_series_apart_and_draws_half_loaded_histories() -> None:
    rng = np.random.default_rng(0)

    def invocations(n: int, level: float) -> list[list[list[float]]]:
        return [[[level * float(np.exp(0.01 * rng.normal()))] for _ in range(3)] for _ in range(n)]

    quiet_key = 'gae|{"impl":"numpy"}|time/call'
    loaded = condition_of(1, 0.0)
    assert loaded == "1 neighbour" and condition_of(0, 0.5) == "" and "from 50%" in condition_of(2, 0.5)
    entry = {"benchmark": "gae", "params": {"impl": "numpy"}, "metric": "time/call", "unit": "s", "direction": "lower"}
    data = {
        "series": {
            quiet_key: {**entry, "invocations": invocations(8, 1.0), "loads": [0.0] * 8},
            f"{quiet_key}|{loaded}": {**entry, "condition": loaded, "invocations": invocations(8, 1.3), "loads": [0.5] * 8},
        }
    }
    results = calibrate(data, commits=20, trials=5, seed=0)
    assert {r["entry"].get("condition") for r in results[loaded]} == {loaded}
    (halfway,) = results[f"quiet, then {loaded} from halfway"]
    # the loaded half (30% slower) is left out of the search by its recorded load: no false step where it starts
    assert halfway["none"]["false_steps"] == 0
    assert step_calibration.QUIET == 0.1

"""The loaded-machine harnesses of issue 58, at tiny settings (the real calibrations run for hours; the lead runs them):
``loaded_calibration`` bisects and confirms throwaway repositories and reports from the commands' JSON, and
``step_calibration`` keeps a loaded measurement's series apart and draws the half-loaded histories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rlbench.suites.scripts import loaded_calibration, round_noise, step_calibration
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


def test_round_noise_tells_spells_from_jitter(tmp_path: Path) -> None:
    """The analysis of saved rounds: per-iteration jitter narrows with the run length, a run slowed whole shows as a
    spell in time, and a saved file is analysed again (a missing one is exit 2)."""
    rng = np.random.default_rng(0)
    rows = []
    for k in range(60):
        slow = {"a": 1.6 if k % 7 == 0 else 1.0, "b": 1.6 if k % 7 == 3 else 1.0}  # a whole run slowed, now and then
        rows.append({s: list(0.008 * slow[s] * np.exp(0.05 * rng.standard_normal(63))) for s in ("a", "b")})
    lengths = round_noise.by_length(rows)
    medians = {r["iterations"]: r for r in lengths if r["statistic"] == "median"}
    assert set(medians) == {15, 31, 63} and all(r["half_width"] is not None for r in medians.values())
    assert medians[63]["mad"] < medians[15]["mad"]  # the jitter averages out over longer runs
    timing = round_noise.in_time(rows)
    assert timing["iterations"] == 60 * 2 * 63
    assert 0.05 < timing["slow_share"] < 0.25 and timing["spell_max"] >= 63  # a slowed run is one spell of 63
    samples = tmp_path / "rounds.json"
    meta = {"command": "c", "cpu": "cpu", "cores": 2, "id": "x", "rounds": 60, "steps": 65536, "neighbours": 1}
    samples.write_text(json.dumps({"meta": {**meta, "load": 0.5, "wall_s": 60.0}, "rounds": rows}))
    report = tmp_path / "r.md"
    assert round_noise.main(["--samples", str(samples), "--report", str(report)]) == 0
    assert "| 63 (65,536 steps) | median |" in report.read_text()
    assert round_noise.main(["--samples", str(tmp_path / "missing.json"), "--report", str(report)]) == 2

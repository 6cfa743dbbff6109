"""What a user hands rlbench from their own code is checked as such: the test knob's phases and fractions,
``rlbench.record``'s values and names, a benchmark's returned metrics and its parameters named like rlbench's options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlbench.results.store import read_records
from tests.faults.fault_helpers import one_line_error, rlbench

SMALL = ["--total-steps", "1024", "--eval-episodes", "1", "--quiet"]

BENCH = """
import rlbench

@rlbench.benchmark
def shadows(n: int = 1) -> dict:
    return {"sps": 5.0}

@rlbench.benchmark
def own_names(device: str = "my-gpu", threads: int = 999) -> dict:
    return {"my_threads": float(threads), "device_is_mine": float(device == "my-gpu")}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "b.py").write_text(BENCH)
    return tmp_path


# --- RLBENCH_INJECT_DELAY ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["update:inf", "update:nan", "update:-inf", "update:0.1,update:0.2"])
def test_a_test_knob_fraction_that_is_not_a_finite_number_is_refused_before_running(
    tmp_path: Path, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLBENCH_INJECT_DELAY", value)
    proc = rlbench(["run", "ppo-cartpole", *SMALL], tmp_path, timeout=60)
    assert "RLBENCH_INJECT_DELAY" in one_line_error(proc)
    assert not list(tmp_path.glob(".rlbench/*.jsonl"))


@pytest.mark.slow
def test_a_test_knob_phase_the_benchmark_does_not_time_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLBENCH_INJECT_DELAY", "updte:0.1")
    args = ["run", "ppo-cartpole", "--total-steps", "2048", "--eval-episodes", "1", "--quiet"]  # two iterations
    err = one_line_error(rlbench(args, tmp_path, timeout=180))
    assert "'updte'" in err and "update" in err, err  # the phase named, and the phases there are
    assert not list(tmp_path.glob(".rlbench/*.jsonl"))  # nothing recorded as if slowed


def test_a_test_knob_phase_the_benchmark_times_still_slows_it() -> None:
    from rlbench.instrument.timers import PhaseTimer, slowed_phases

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLBENCH_INJECT_DELAY", "tst-phase:0.5")
        timer = PhaseTimer()
    timer.add("tst-phase", 0.002)
    assert "tst-phase" in slowed_phases() and timer.seconds["tst-phase"] >= 0.003


@pytest.mark.slow
def test_a_test_knob_is_refused_for_a_function_under_automatic_attribution(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLBENCH_INJECT_DELAY", "update:0.1")
    err = one_line_error(rlbench(["run", "b.py:own_names", "--quiet", "--store", "s"], project, timeout=120))
    assert "RLBENCH_INJECT_DELAY" in err and "@rlbench.benchmark" in err, err


# --- rlbench.record ----------------------------------------------------------------------------------------------
@pytest.fixture
def loose_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``rlbench.record`` outside a session writes to a fresh store here."""
    from rlbench.profiling import session

    monkeypatch.setenv("RLBENCH_STORE", str(tmp_path / "loose"))
    monkeypatch.setattr(session._Standalone, "instance", None)
    return tmp_path / "loose"


@pytest.mark.parametrize(
    "value, samples",
    [
        (torch.tensor(2.5), [2.5]),
        (np.float32(1.5), [1.5]),
        (np.array(3.0), [3.0]),
        (torch.tensor([1.0, 2.0]), [1.0, 2.0]),
        (np.array([4, 5]), [4.0, 5.0]),
        ((6, 7.5), [6.0, 7.5]),
        (8, [8.0]),
    ],
)
def test_record_takes_numbers_scalars_and_flat_sequences(loose_store: Path, value: object, samples: list[float]) -> None:
    import rlbench

    rlbench.record("loss", value)
    (rec,) = read_records(loose_store)
    assert rec.metric == "loss" and rec.samples == samples


@pytest.mark.parametrize("value", ["12", b"12", ["1", "2"], [[1.0, 2.0]], torch.ones(2, 2), None, {"a": 1}])
def test_record_refuses_what_is_not_numbers(loose_store: Path, value: object) -> None:
    import rlbench

    with pytest.raises(ValueError, match=r"^rlbench\.record: 'loss' needs"):
        rlbench.record("loss", value)
    assert not loose_store.exists() or not list(loose_store.glob("*.jsonl"))


@pytest.mark.parametrize("name", ["sps", "sps/steady", "wall_s", "time/update", "profile/call_s", "machine/steal"])
def test_record_refuses_a_name_rlbench_records_itself(loose_store: Path, name: str) -> None:
    import rlbench

    with pytest.raises(ValueError, match="one rlbench records itself"):
        rlbench.record(name, 1.0)
    rlbench.record("eval_return", [1.0])  # the documented learning outcome stays the user's
    rlbench.record("my_sps", 1.0)
    assert {r.metric for r in read_records(loose_store)} == {"eval_return", "my_sps"}


@pytest.mark.slow
def test_a_benchmark_returning_a_metric_rlbench_records_itself_fails_naming_it(project: Path) -> None:
    err = one_line_error(rlbench(["run", "b.py:shadows", "--quiet", "--store", "s"], project, timeout=120), code=1)
    assert "'sps' is one rlbench records itself" in err, err
    assert not list((project / "s").glob("*.jsonl"))


# --- parameters named like rlbench's settings --------------------------------------------------------------------
@pytest.mark.slow
def test_parameters_named_device_and_threads_are_the_functions_own(project: Path) -> None:
    proc = rlbench(
        ["run", "b.py:own_names", "--threads", "4096", "--device", "my-gpu", "--json", "--quiet", "--store", "s"],
        project,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["my_threads"] == 4096.0 and out["device_is_mine"] == 1.0 and out["device"] == "cpu"

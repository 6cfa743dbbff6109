"""An `@rlbench.benchmark` function shaped like a micro-benchmark gets the table a pytest-benchmark user expects, and
declares its returned values' unit and direction with `rlbench.Value` (issue 57, newcomer 2).

It used to get the training report (Training SPS –, Eval return –, "0 agent steps"), an empty Setting row, and its
returned value recorded with no unit or direction: never shown, never gated.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import pytest

import rlbench
from rlbench.cli import main
from rlbench.report import function
from rlbench.report.kinds import kind_of
from rlbench.results.metrics import ENV_STEPS
from rlbench.results.store import read_records
from rlbench.run import registry

GAE = """
import time

import rlbench


@rlbench.benchmark
def my_gae(T: int = 64, N: int = 4, passes: int = 3) -> dict:
    \"\"\"a GAE-shaped loop, timed inside a phase\"\"\"
    t0 = time.perf_counter()
    with rlbench.phase("gae"):
        for _ in range(passes):
            last = 0.0
            for t in range(T * N):
                last = 0.5 * last + t
    return {
        "time_per_pass": rlbench.Value((time.perf_counter() - t0) / passes, unit="s", direction="lower"),
        "last": last,
    }
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "_USER_CACHE", {})
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "gae_bench.py").write_text(textwrap.dedent(GAE))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(registry.USER_MODULE_PREFIX)]:
        del sys.modules[name]


def test_a_micro_benchmark_shaped_function_gets_per_case_timings_its_values_and_parameters(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "my-gae", "--T", "32", "--repeats", "5", "--store", "st", "--report", "r.md", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    report = (project / "r.md").read_text()
    assert report.startswith("# rlbench benchmark report: `my-gae`")
    for training_only in ("Training SPS", "agent steps", "Eval return", "deterministic episodes"):
        assert training_only not in report
    assert "| Case | Calls | Min | Median | Max | IQR | Mean | Calls/s |" in report
    assert "| `my-gae` (N=4, T=32, passes=3) | 5 |" in report  # its parameters, as given
    assert "| `gae` |" in report  # the phase it timed
    assert "| `time_per_pass` | s | lower | 5 |" in report and "| `last` | – | – (not gated) | 5 |" in report
    (case,) = summary["cases"]
    assert case["calls"] == 5 and case["params"] == {"N": 4, "T": 32, "passes": 3}
    assert 0 < case["min_s"] <= case["median_s"] <= case["max_s"] and case["calls_per_s"] > 0
    assert case["values"]["time_per_pass"] == {"unit": "s", "direction": "lower"}
    records = read_records(project / "st")
    assert kind_of(records) == "function"
    (value,) = {(r.unit, r.direction) for r in records if r.metric == "time_per_pass"}
    assert value == ("s", "lower")
    # declared, so it can be gated: the run against itself passes instead of "has no better direction"
    # (--allow-busy: beside other tests the machine's load is no part of what this checks)
    assert main(["gate", summary["records"], summary["records"], "--fail", "time_per_pass:5%", "--allow-busy"]) == 0
    assert "time_per_pass" in capsys.readouterr().out
    assert main(["report", summary["records"], "-o", "-"]) == 0  # re-rendered from the records alone
    assert capsys.readouterr().out == report


def test_a_function_that_runs_an_rl_loop_keeps_the_training_report_with_its_parameters(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "my-gae", "--store", "st", "--quiet"]) == 0
    records = read_records(project / "st")
    stepped = [dataclasses.replace(r, samples=[4096.0]) if r.metric == ENV_STEPS else r for r in records]
    text, _ = function.render(stepped)
    assert text.startswith("# rlbench bottleneck report: `my-gae`") and "4,096 agent steps" in text
    assert "| Setting | N=4, T=64, passes=3 |" in text  # a user's own parameters are its setting


def test_value_declares_unit_and_direction_or_says_what_is_wrong() -> None:
    v = rlbench.Value([1.0, 2.0], unit="ms", direction="higher")
    assert (v.value, v.unit, v.direction) == ([1.0, 2.0], "ms", "higher")
    assert rlbench.Value(3).direction == "none"
    with pytest.raises(ValueError, match="direction must be 'higher', 'lower' or 'none', got 'down'"):
        rlbench.Value(1.0, unit="s", direction="down")
    with pytest.raises(ValueError, match="unit must be text"):
        rlbench.Value(1.0, unit=1)  # type: ignore[arg-type]

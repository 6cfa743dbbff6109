"""`rlbench ab --rounds auto`: rounds are added at planned looks until every threshold is PASS or FAIL."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rlbench.analysis.gate import look_confidence, planned_looks
from rlbench.core.errors import UsageError
from tests.cli.cli_helpers import run_cli

BENCH = """import time

import rlbench

NAP = NAP_S


@rlbench.benchmark
def nap(n: int = 5):
    \"\"\"n sleeps of NAP seconds: a steady time, even on a loaded machine\"\"\"
    t0 = time.perf_counter()
    for _ in range(n):
        time.sleep(NAP)
    rlbench.record("nap_s", time.perf_counter() - t0, unit="s", direction="lower")
"""


def test_looks_double_up_to_the_budget_and_share_the_error_rate() -> None:
    assert planned_looks(40) == [10, 20, 40]
    assert planned_looks(12) == [10, 12]
    assert planned_looks(3) == [3]
    assert planned_looks(40, first=5) == [5, 10, 20, 40]
    assert look_confidence(0.95, 4) == pytest.approx(0.9875)
    assert look_confidence(0.95, 1) == pytest.approx(0.95)
    with pytest.raises(UsageError):
        planned_looks(1)


def _commit(repo: Path, nap: float, message: str) -> None:
    (repo / "suites").mkdir(exist_ok=True)
    (repo / "suites" / "naps.py").write_text(BENCH.replace("NAP_S", repr(nap)), encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", message], cwd=repo, check=True)


@pytest.mark.alone
@pytest.mark.slow
def test_auto_rounds_stop_at_the_first_look_that_decides(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    _commit(tmp_path, 0.010, "naps of 10 ms")
    _commit(tmp_path, 0.013, "naps of 13 ms: 30% slower")
    # --allow-busy: the sequential design is under test here, not the machine's load
    auto = ["--rounds", "auto", "--max-rounds", "20", "--fail", "nap_s:10%", "--allow-busy", "--json", "--", "run", "nap"]
    # identical sides PASS through the same gate_look at the first look: tests/analysis/test_calibration.py (in process)
    slow = run_cli(["ab", "HEAD~1", "HEAD", *auto], cwd=tmp_path, timeout=300)
    assert slow.returncode == 1, slow.stderr[-2000:]
    out = json.loads(slow.stdout)
    assert out["verdict"] == "FAIL" and out["rounds"] == 10 and out["decided_after"] == {"nap_s": 10}
    assert any("Bonferroni" in n and "97.50%" in n for n in out["notes"])  # two looks planned: 10, 20
    # issue 58: each run warmed first (and said so); the load judged per round pair of the interleaved rounds
    assert out["warmup"] == 1 and any(n.startswith("warm-up: each run made 1 untimed repeat") for n in out["notes"])
    assert out["load"] is None or (out["load"]["interleaved"] and out["load"]["pairs"] == 10)
    (check,) = [c for c in out["checks"] if c["metric"] == "nap_s"]
    assert check["ci_low"] > 1.1  # worse by more than the threshold, at 97.5% per look
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert worktrees.stdout.count("\n") == 1


def test_auto_rounds_need_a_threshold_and_a_number_is_a_number(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    _commit(tmp_path, 0.001, "naps")
    proc = run_cli(["ab", "HEAD", "--rounds", "auto", "--", "run", "nap"], cwd=tmp_path)
    assert proc.returncode == 2 and "give at least one --fail" in proc.stderr
    proc = run_cli(["ab", "HEAD", "--rounds", "many", "--fail", "nap_s:5%", "--", "run", "nap"], cwd=tmp_path)
    assert proc.returncode == 2 and "--rounds 'many'" in proc.stderr
    proc = run_cli(
        ["ab", "HEAD", "--rounds", "auto", "--max-rounds", "1", "--fail", "nap_s:5%", "--", "run", "nap"], cwd=tmp_path
    )
    assert proc.returncode == 2 and "--max-rounds" in proc.stderr
    # issue 57: checked before the first round, naming ab's own option (not --repeats, which ab refuses)
    for extra, words in (
        (["--rounds", "auto", "--max-rounds", "7", "--fail", "nap_s:5%"], "--max-rounds 7 is below the first look"),
        (["--warmup", "-1"], "--warmup must be at least 0"),
        (["--max-time", "30"], "--max-time applies to --rounds auto only"),
        (["--rounds", "3", "--max-rounds", "20"], "--max-rounds applies to --rounds auto only"),
    ):
        proc = run_cli(["ab", "HEAD", *extra, "--", "run", "nap"], cwd=tmp_path)
        err = proc.stderr.strip()
        assert proc.returncode == 2 and err.count("\n") == 0 and words in err, (extra, proc.stderr)
        assert "round 1" not in proc.stderr and "--repeats" not in err and not (tmp_path / ".rlbench").exists()

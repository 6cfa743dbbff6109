"""rlbench ab: two revisions of this repository, interleaved, gated on exact counters."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.cli_helpers import own_worktrees

pytestmark = pytest.mark.slow  # builds two worktrees and runs both revisions

REPO = Path(__file__).resolve().parents[2]


def _has_git_history() -> bool:
    if shutil.which("git") is None:
        return False
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    return out.returncode == 0


@pytest.mark.skipif(not _has_git_history(), reason="needs the rlbench git checkout")
def test_ab_same_revision_passes_on_counters(tmp_path: Path) -> None:
    # two rounds: enough for exact counters; returns would need five (the learning check is off here)
    ab = [
        sys.executable,
        "-m",
        "rlbench",
        "ab",
        "HEAD",
        "HEAD",
        "--rounds",
        "2",
        "--fail",
        "ops/iteration:0%",
        "--json",
        "--no-learning-check",
    ]
    comment = tmp_path / "comment.md"
    cmd = [*ab, "--keep", str(tmp_path / "kept"), "--comment", str(comment)]
    cmd += ["--", "run", "ppo-cartpole", "--total-steps", "2048", "--eval-episodes", "3"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["base"] == out["head"] and out["exit_code"] == 0
    metrics = {c["metric"]: c for c in out["checks"]}
    assert metrics["ops/iteration"]["ratio"] == 1.0 and not metrics["ops/iteration"]["failed"]
    for side in ("base", "head"):
        runs = list((tmp_path / "kept" / f"store-{side}").glob("*.jsonl"))
        assert len(runs) == 2  # one run per round
    assert own_worktrees(REPO) == []  # cleaned up
    from rlbench.report.comment import MARKER

    body = comment.read_text(encoding="utf-8")  # the pull-request comment: marker first, the verdict, the rounds
    assert body.splitlines()[0] == MARKER and "✅ **PASS**" in body and "2 interleaved rounds per side" in body
    assert "| `ops/iteration` | 0% | ✅ PASS | 1" in body  # ratio 1, exactly


@pytest.mark.skipif(not _has_git_history(), reason="needs the rlbench git checkout")
def test_ab_bad_input(tmp_path: Path) -> None:
    def ab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rlbench", "ab", *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )

    for args, needle in [
        (("no-such-rev", "--", "run", "ppo-cartpole"), "git rev-parse"),
        (("HEAD",), "missing the command after `--`"),
        (("HEAD", "--", "run", "ppo-cartpole", "--store", "x"), "set by rlbench ab itself"),
        (("HEAD", "--", "list"), "needs the command to compare"),
        (("HEAD", "--comment", str(tmp_path / "c.md"), "--", "run", "ppo-cartpole"), "--comment writes the gate's verdicts"),
        (("HEAD", "--fail", "sps:5%", "--comment", str(tmp_path), "--", "run", "ppo-cartpole"), "--comment"),
    ]:
        proc = ab(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and proc.stderr.strip().count("\n") == 0, (args, proc.stderr)

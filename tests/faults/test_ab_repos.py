"""Issue 30, class 10: `rlbench ab` in real repositories -- a dirty tree, submodules, and a failing side's log."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli_together
from tests.faults.fault_helpers import rlbench

pytestmark = pytest.mark.slow  # each test runs `rlbench run` of a tiny benchmark per side

BENCH = '''
import rlbench


@rlbench.benchmark
def tiny(n: int = 3) -> dict[str, float]:
    """a tiny benchmark"""
    BODY
    return {"value": float(n)}
'''

GIT = ["git", "-c", "user.email=a@b", "-c", "user.name=a", "-c", "protocol.file.allow=always"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def user_repo(path: Path, body: str = "pass") -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / "suites").mkdir()
    (path / "suites" / "tiny_bench.py").write_text(BENCH.replace("BODY", body), encoding="utf-8")
    (path / ".gitignore").write_text(".rlbench/\n", encoding="utf-8")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "bench")
    return path


def worktrees(repo: Path) -> int:
    return git(repo, "worktree", "list").count("\n")


def test_a_dirty_tree_is_said_in_one_line(tmp_path: Path) -> None:
    repo = user_repo(tmp_path / "repo")
    (repo / "suites" / "tiny_bench.py").write_text(BENCH.replace("BODY", "raise SystemExit('edited')"), encoding="utf-8")
    ab = ["ab", "HEAD", "HEAD", "--rounds", "1", "--", "run", "tiny"]
    # the dirty repository and a clean one, at the same time
    proc, clean = run_cli_together([ab, ab], [repo, user_repo(tmp_path / "clean")], timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("rlbench: warning:")]
    assert len(warnings) == 1 and "uncommitted changes in 1 tracked file(s) (suites/tiny_bench.py)" in warnings[0]
    assert "are not measured" in warnings[0] and "NOTE: uncommitted changes" in proc.stdout
    assert clean.returncode == 0 and "warning" not in clean.stderr, clean.stderr[-2000:]
    assert worktrees(repo) == 1


def test_a_failing_sides_log_is_where_the_message_says(tmp_path: Path) -> None:
    repo = user_repo(tmp_path / "repo")
    (repo / "suites" / "tiny_bench.py").write_text(BENCH.replace("BODY", "raise RuntimeError('boom')"), encoding="utf-8")
    git(repo, "commit", "-qam", "break it")
    proc = rlbench(["ab", "HEAD~1", "HEAD", "--rounds", "1", "--", "run", "tiny"], repo)
    err = proc.stderr.strip().splitlines()[-1]
    # the measured code failed: exit 1, as `rlbench run` of that benchmark exits (issue 57), never 2
    assert proc.returncode == 1 and err.startswith("rlbench: error: run of head"), proc.stderr[-2000:]
    assert "records and logs of both sides kept in " in err
    kept = Path(err.rsplit("kept in ", 1)[1])
    assert kept.is_dir() and (kept / "head-output.log").is_file() and "boom" in (kept / "head-output.log").read_text()
    named = [w.rstrip(";,") for w in err.split() if w.startswith("/") and w.rstrip(";,") != str(kept)]
    assert named, err  # the traceback file `rlbench run` named
    assert all(Path(p).exists() for p in named), (named, err)
    assert list((kept / "store-base").glob("*.jsonl"))  # the side that finished keeps its records
    assert worktrees(repo) == 1  # the worktrees went; what they made is kept


def test_a_sides_bad_input_is_exit_2_not_a_failure_of_the_measured_code(tmp_path: Path) -> None:
    repo = user_repo(tmp_path / "repo")
    proc = rlbench(["ab", "HEAD", "--rounds", "1", "--", "run", "tiny", "--n", "many"], repo)
    err = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and err.startswith("rlbench: error: run of base") and "exited 2" in err, proc.stderr
    assert worktrees(repo) == 1


def test_submodules_are_checked_out_in_abs_worktrees(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    (lib / "helper.py").write_text("N = 4\n", encoding="utf-8")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib")
    repo = user_repo(tmp_path / "repo", body="import sys; sys.path.insert(0, 'vendor'); import helper; n = helper.N")
    git(repo, "submodule", "add", "-q", str(lib), "vendor")
    git(repo, "commit", "-qm", "vendor lib")
    config = (repo / ".git" / "config").read_text()
    proc = rlbench(["ab", "HEAD", "HEAD", "--rounds", "1", "--json", "--", "run", "tiny"], repo)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert worktrees(repo) == 1 and (repo / ".git" / "config").read_text() == config  # nothing left, config untouched

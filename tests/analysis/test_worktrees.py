"""rlbench's temporary git worktrees when several rlbench commands share one repository.

``git worktree add``, ``remove``, ``list`` and ``prune`` read every worktree's administrative files; two rlbench
commands running them at once in one repository broke each other (seen: ``fatal: failed to read
.git/worktrees/<id>/commondir``, a history commit then recorded as failed). They take turns on a lock.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rlbench.analysis.ab import Worktrees, worktree_lock

REPO_ROOT = Path(__file__).resolve().parents[2]


def _repo(path: Path) -> str:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    for k, v in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "config", k, v], cwd=path, check=True)
    (path / "f").write_text("1\n")
    subprocess.run(["git", "add", "f"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "one"], cwd=path, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True).stdout.strip()


ADD = """
import sys, time
from pathlib import Path
from rlbench.analysis.ab import Worktrees
with Worktrees(Path(sys.argv[1]), "history") as wt:
    wt.add("one", sys.argv[2])
    print(time.monotonic(), flush=True)
"""


def test_a_second_command_waits_for_the_worktree_lock(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sha = _repo(repo)
    with worktree_lock(repo):
        held = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", ADD, str(repo), sha], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        time.sleep(2.0)
        assert proc.poll() is None  # its checkout waits while another command works on the repository's worktrees
        released = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert float(out.split()[0]) >= released > held  # it checked out only after the lock was released
    # nothing left registered, and the lock is git's kind of file: not in the work tree, not in `git status`
    assert subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout.count("\n") == 1
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""


def test_worktrees_of_one_repository_from_two_processes_never_fail(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sha = _repo(repo)
    loop = ADD.replace(
        '    wt.add("one", sys.argv[2])\n',
        '    for i in range(8):\n        wt.add(f"t{i}", sys.argv[2]); wt.remove(f"t{i}")\n',
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", loop, str(repo), sha], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    with Worktrees(repo) as wt:  # and a later command still works there
        assert (wt.add("again", sha).cwd / "f").read_text() == "1\n"

"""`rlbench bisect` over merges names the commit `git bisect run` names, never the merge that brought it in.

A throwaway repository with two merged side branches (one forked at GOOD, one forked before it) gets the regression
on the main line, on a side branch, or on the branch older than GOOD. The verdicts come from the checkout itself (a
file ``slow`` makes a commit do one more op per iteration), so the search is exact and fast: the real ``bisect`` and
the real command line run, in worktrees, with only the measuring replaced.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import rlbench.analysis.bisect as bisect_module
from rlbench.analysis.bisect import bisect, search_graph
from rlbench.analysis.gate import FAIL, PASS, Threshold
from rlbench.cli import main
from rlbench.results.records import Record

# subjects a terminal would take for rich markup: every one must print as typed
HOSTILE = ["[/]", "[link=http://x]y[/link]", "[bold]loud", "[red]x[/red] :smile:"]


def git(repo: Path, *args: str, when: int | None = None) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@e"
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{1_700_000_000 + when} +0000"
    out = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def build_merge_repo(repo: Path, slow_at: str) -> dict[str, str]:
    """The graph below, ``slow`` added at ``slow_at`` (every commit's subject is a hostile one)::

        init ─ O1 ─ O2 ──────────────────────────────────┐         old: forked before GOOD
          └─ G ─ A ─ R ─ B ─────────── M1 ─ C ─────────── M2 ─ D   main (D is BAD)
             └─ S1 ─ S2 ─ S3 ──────────┘                           side: forked at GOOD

    Side commits are younger than the main line's, so ``rev-list --topo-order`` lists them after R.
    """
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    clock = iter(range(1000))
    shas: dict[str, str] = {}

    def commit(name: str) -> None:
        (repo / f"{name}.txt").write_text(f"{name}\n")  # a file per commit: merges never conflict
        if name == slow_at:
            (repo / "slow").write_text("one more op per iteration\n")
        git(repo, "add", "-A")
        subject = f"{name} {HOSTILE[len(shas) % len(HOSTILE)]}"
        git(repo, "commit", "-qm", subject, when=next(clock))
        shas[name] = git(repo, "rev-parse", "HEAD")

    def merge(name: str, branch: str) -> None:
        git(repo, "merge", "-q", "--no-ff", "-m", f"{name} merge {branch} [/]", branch, when=next(clock))
        shas[name] = git(repo, "rev-parse", "HEAD")

    commit("init")
    git(repo, "checkout", "-q", "-b", "old")
    commit("O1")
    commit("O2")
    git(repo, "checkout", "-q", "main")
    for name in ("G", "A", "R", "B"):
        commit(name)
    git(repo, "checkout", "-q", "-b", "side", shas["G"])
    for name in ("S1", "S2", "S3"):
        commit(name)
    git(repo, "checkout", "-q", "main")
    merge("M1", "side")
    commit("C")
    merge("M2", "old")
    commit("D")
    return shas


def git_bisect_says(repo: Path, good: str, bad: str) -> str:
    """The first bad commit `git bisect run` names, judging by the same file."""
    git(repo, "bisect", "start", bad, good)
    try:
        out = git(repo, "bisect", "run", "sh", "-c", "test ! -e slow")
    finally:
        git(repo, "bisect", "reset")
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", out, re.M)
    assert found, out
    return found[1]


def ops_record(ops: float) -> Record:
    return Record(
        run_id="r",
        timestamp="2026-01-01T00:00:00+00:00",
        benchmark="tiny",
        params={},
        definition_hash="h",
        metric="ops/iteration",
        unit="count",
        direction="lower",
        samples=[ops],
        repeat=0,
        seed=0,
        fingerprint={"machine": {"id": "m"}},
    )


@pytest.fixture
def judged_by_the_checkout(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the measuring: each side does 11 ops per iteration where its checkout has ``slow``, else 10. Returns
    the commits measured, in order."""
    tested: list[str] = []

    def interleave(sides, args, seed, rounds, stores, **kw):
        tested.append(sides["head"].sha)
        for side in ("base", "head"):
            kw["on_run"](0, side)  # the progress line of each run
        return tuple([ops_record(11.0 if (sides[s].tree / "slow").exists() else 10.0)] for s in ("base", "head"))

    monkeypatch.setattr(bisect_module, "interleave", interleave)
    return tested


@pytest.mark.parametrize("slow_at", ["R", "S2", "O2", "A", "C", "D"])
def test_bisect_over_merges_names_what_git_bisect_names(
    tmp_path: Path, judged_by_the_checkout: list[str], slow_at: str
) -> None:
    repo = tmp_path / "repo"
    shas = build_merge_repo(repo, slow_at)
    result = bisect(shas["G"], shas["D"], [Threshold("ops/iteration", 0.0)], ["run", "tiny"], repo)
    assert result.found and result.first_bad == shas[slow_at], (result.message, {v: k for k, v in shas.items()})
    assert result.first_bad == git_bisect_says(repo, shas["G"], shas["D"])
    assert result.searched == 12  # GOOD..BAD as git bisect sees it: both side branches, the merges, the main line
    assert result.tested_of(shas[slow_at]).verdict == FAIL
    assert result.last_good == git(repo, "rev-parse", f"{shas[slow_at]}^1")
    assert len(judged_by_the_checkout) <= 6  # about log2(12) + BAD, with merges in the way
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # no worktree left


def test_the_old_line_search_was_fooled_by_this_graph() -> None:
    """The graph search on the topological order the repository gives: the side commits listed after R (good, they
    lack it) moved a line search past R, to the merge. (The line, judged the same way, shows what the test guards.)"""
    # indices in topo order: 0 A, 1 R (bad), 2 B, 3 S1, 4 S2, 5 S3, 6 M1 (merges B and S3), 7 BAD
    parents = [[], [0], [1], [], [3], [4], [2, 5], [6]]
    bad = {1, 2, 6, 7}

    def verdict(i: int) -> str:
        return FAIL if i in bad else PASS

    assert search_graph(parents, verdict) == [1]
    line = search_graph([[i - 1] if i else [] for i in range(8)], verdict)
    assert line != [1]  # what binary search over the list as a line concludes


def test_bisect_command_over_merges_prints_subjects_as_typed(
    tmp_path: Path, judged_by_the_checkout: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    shas = build_merge_repo(repo, "R")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("COLUMNS", "250")
    code = main(["bisect", shas["G"], "main", "--fail", "ops/iteration:0%", "--", "run", "tiny"])
    out, err = capsys.readouterr()
    assert code == 0, err
    subject = git(repo, "log", "-1", "--format=%s", shas["R"])
    assert f"first bad commit: {shas['R']} {subject}" in out, out  # [link=...] and [/] printed as typed
    for sha in judged_by_the_checkout:  # every tested commit: its row in the table, its progress line
        subject = git(repo, "log", "-1", "--format=%s", sha)
        assert f"{sha[:8]} {subject}" in err
        assert subject in out
    assert "\x1b]8;" not in out + err  # no terminal hyperlink
    assert "Traceback" not in err and "internal error" not in err

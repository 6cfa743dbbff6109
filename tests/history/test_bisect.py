"""`rlbench bisect`: the search with skips (every first-bad position, every skip pattern) and bad input."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rlbench.analysis.bisect import SKIP, default_rounds, search
from rlbench.analysis.gate import FAIL, PASS, Threshold
from tests.history.conftest import RUN_TINY, build_history_repo, git, rlbench


def judge_for(first_bad: int, skipped: set[int] = frozenset(), calls: list[int] | None = None):
    def judge(i: int) -> str:
        if calls is not None:
            calls.append(i)
        return SKIP if i in skipped else FAIL if i >= first_bad else PASS

    return judge


@pytest.mark.parametrize("n", range(1, 17))
def test_search_finds_every_first_bad_position_in_log_steps(n: int) -> None:
    for first_bad in range(n):
        calls: list[int] = []
        assert search(n, judge_for(first_bad, calls=calls)) == (first_bad - 1, first_bad)
        assert calls[0] == n - 1  # BAD is confirmed first
        assert len(calls) == len(set(calls)) <= 1 + math.ceil(math.log2(n)) + 1


def test_search_with_skips_never_names_a_wrong_commit() -> None:
    rng = random.Random(32)
    for _ in range(3000):
        n = rng.randint(2, 14)
        first_bad = rng.randrange(n)
        skipped = {i for i in range(n - 1) if rng.random() < 0.3}  # BAD itself is judged
        calls: list[int] = []
        lo, hi = search(n, judge_for(first_bad, skipped, calls))
        assert lo < first_bad <= hi  # the first bad commit is never outside the answer
        assert all(i in skipped for i in range(lo + 1, hi))  # what is left open was skipped, nothing else
        if first_bad not in skipped:
            assert hi == first_bad or all(i in skipped for i in range(first_bad, hi))
        if not any(i in skipped for i in range(lo + 1, hi)):
            assert hi == first_bad  # no skip in the way: the exact answer
        assert len(calls) == len(set(calls))  # no commit measured twice


def test_a_skip_tries_the_neighbour_nearest_the_middle() -> None:
    calls: list[int] = []
    # 10 commits, the first bad is 2, commit 4 (the middle) cannot be built
    assert search(10, judge_for(2, {4}, calls)) == (1, 2)
    assert calls[:3] == [9, 4, 3]  # BAD, the middle (skipped), then its nearest neighbour


def test_search_stops_when_bad_does_not_fail() -> None:
    assert search(5, judge_for(99)) is None  # BAD passes: no regression to look for
    assert search(5, judge_for(0, {4})) is None  # BAD cannot be judged


def test_one_round_for_counters_auto_for_timings() -> None:
    assert default_rounds([Threshold("syncs/iteration", 0.0), Threshold("ops/iteration", 0.0)]) == 1
    assert default_rounds([Threshold("syncs/iteration", 0.0), Threshold("wall_s", 0.1)]) is None  # --rounds auto


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    return repo, build_history_repo(repo)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, words",
    [
        (["HEAD", "HEAD~3", "--fail", "wall_s:10%", *RUN_TINY], "is not an ancestor of BAD"),
        (["HEAD", "HEAD", "--fail", "wall_s:10%", *RUN_TINY], "the same commit"),
        (["nosuch", "HEAD", "--fail", "wall_s:10%", *RUN_TINY], "unknown revision 'nosuch'"),
        (["HEAD~3", "HEAD", "--fail", "wall_s", *RUN_TINY], "malformed threshold"),
        (["HEAD~3", "HEAD", *RUN_TINY], "--fail"),
        (["HEAD~3", "HEAD", "--fail", "wall_s:10%", "--rounds", "0", *RUN_TINY], "--rounds"),
        (["HEAD~3", "HEAD", "--fail", "wall_s:10%", "--warmup", "-1", *RUN_TINY], "--warmup"),
        (["HEAD~3", "HEAD", "--fail", "wall_s:10%", "run", "tiny"], "missing the command after `--`"),
        (["HEAD~3", "HEAD", "--fail", "wall_s:10%", "--", "run", "tiny", "--repeats", "3"], "set by rlbench bisect"),
        (["HEAD~3", "--fail", "wall_s:10%", *RUN_TINY], "the following arguments are required: bad"),
    ],
)
def test_bisect_bad_input_is_one_line_and_exit_2(small_repo: tuple[Path, dict], args: list[str], words: str) -> None:
    repo, _ = small_repo
    proc = rlbench(["bisect", *args], repo)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and err.count("\n") == 0 and err.startswith("rlbench: error:"), proc.stderr[-2000:]
    assert words in err, err
    assert git(repo, "worktree", "list").count("\n") == 0


def test_bisect_outside_a_repository_is_bad_input(tmp_path: Path) -> None:
    proc = rlbench(["bisect", "a", "b", "--fail", "wall_s:10%", *RUN_TINY], tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("rlbench: error:") and proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_bisect_cannot_decide_when_bad_cannot_be_judged(small_repo: tuple[Path, dict]) -> None:
    repo, shas = small_repo
    # `rlbench run` of a user benchmark records no op counts: BAD cannot be judged, so there is nothing to search
    proc = rlbench(["bisect", shas["sync"], "HEAD", "--fail", "ops/iteration:0%", "--json", *RUN_TINY], repo)
    assert proc.returncode == 2, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "undecided" and out["first_bad"] is None and out["rounds"] == 1
    assert "cannot be judged" in out["message"] and "'ops/iteration' is missing" in out["message"], out
    assert [t["verdict"] for t in out["tested"]] == ["SKIP"]
    assert git(repo, "worktree", "list").count("\n") == 0


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-rounds", "5"], "--max-rounds 5 is below the first look of --rounds auto"),
        (["--rounds", "many"], "--rounds 'many': give a number of rounds or auto"),
        (["--rounds", "3", "--max-rounds", "20"], "--max-rounds applies to --rounds auto only"),
    ],
)
def test_bisect_rounds_options_are_checked_before_anything_runs(tmp_path: Path, args: list[str], words: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    proc = rlbench(["bisect", "HEAD~1", "HEAD", "--fail", "wall_s:10%", *args, *RUN_TINY], repo)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and err.count("\n") == 0 and err.startswith("rlbench: error:"), proc.stderr[-2000:]
    assert words in err, err

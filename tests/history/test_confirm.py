"""`rlbench history confirm`: candidate steps measured again and their verdicts recorded; the store, `history show
--json` and the site keep confirmed regressions, dismissed candidates and unconfirmed ones apart; and its faults (bad
input, a candidate whose commit is gone or whose build fails, Ctrl-C) are one line, the right exit code, nothing lost
and no worktree left.

The histories here are written as records (no benchmark runs to make them): each names a commit of a throwaway
repository whose ``suites/tiny_bench.py`` is a 5 ms sleep, so only ``confirm`` itself measures.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlbench.analysis.candidates import Candidate
from rlbench.analysis.confirm import _pin
from rlbench.analysis.steps import Step
from rlbench.report.site import write_site
from rlbench.results.fingerprint import machine_fingerprint
from rlbench.results.history import CONFIRMED, DISMISSED, Confirmation, HistoryStore, Series
from tests.history.conftest import git, rlbench, write_levels

BENCH = '''"""tiny: a short sleep."""

import os
import signal
import time

import rlbench


@rlbench.benchmark
def tiny() -> dict[str, float]:
    """tiny: 5 ms"""
    if BROKEN:
        raise RuntimeError("broken on purpose")
    if INTERRUPT:
        os.kill(os.getppid(), signal.SIGINT)  # Ctrl-C, as the user would press it, while this commit is measured
        time.sleep(5)
    time.sleep(0.005)
    return {}
'''

# values of wall_s per commit (5 repeats each, 1% noise): two steps for the worse, at commits 2 and 5
LEVELS = [1.0, 1.0, 1.5, 1.5, 1.5, 2.25, 2.25, 2.25]


def build_repo(repo: Path, *, broken_at: int | None = None, interrupt_at: int | None = None) -> list[str]:
    """``len(LEVELS)`` commits of a 5 ms benchmark (broken, or sending Ctrl-C to its parent, at one commit)."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text(".rlbench/\n__pycache__/\nhistory/\n")
    (repo / "suites").mkdir()
    shas = []
    for i in range(len(LEVELS)):
        source = BENCH.replace("BROKEN", str(i == broken_at)).replace("INTERRUPT", str(i == interrupt_at))
        (repo / "suites" / "tiny_bench.py").write_text(source)
        (repo / "README.md").write_text(f"commit {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def write_history(store: Path, shas: list[str], levels: list[float] = LEVELS) -> HistoryStore:
    """A history of ``tiny`` on this machine: 5 repeats per commit at ``levels`` (as `history run -- run tiny` records)."""
    return write_levels(store, shas, levels, benchmark="tiny", seconds=0.005)


def worktrees(repo: Path) -> int:
    return git(repo, "worktree", "list").count("\n") + 1


@pytest.fixture
def tmpdir_of_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A TMPDIR of the command's own: what it leaves there is seen, whatever other processes do in the system's."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def leftovers(folder: Path) -> list[Path]:
    return list(folder.glob("rlbench-*"))


def one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("rlbench: error:"), proc.stderr[-3000:]
    return lines[0]


# --- the window a candidate is measured over, and the commit it is pinned to -----------------------------------------
COMMITS = [f"{i:040x}" for i in range(1, 9)]


def candidate(index: int, exact: bool = False) -> Candidate:
    """A candidate step of an 8-commit series at ``index`` (its first bad commit)."""
    series = Series("m", "tiny", {}, "wall_s", "s", "lower", exact, COMMITS, [[1.0]] * len(COMMITS))
    step = Step(series, index, COMMITS[index - 1], COMMITS[index], 1.3, (1.2, 1.4), True, [])
    return Candidate([step], ["run", "tiny"])


@pytest.mark.parametrize(
    ("index", "exact", "window"),
    [(5, False, [3, 4, 5, 6]), (1, False, [0, 1, 2]), (7, False, [5, 6, 7]), (5, True, [4, 5])],
)
def test_the_window_is_the_step_and_one_commit_either_side(index: int, exact: bool, window: list[int]) -> None:
    assert candidate(index, exact).window() == [COMMITS[i] for i in window]


def outcome_of(verdict: str) -> SimpleNamespace:
    return SimpleNamespace(checks=[SimpleNamespace(verdict=verdict)], verdict=verdict)


@pytest.mark.parametrize("slow_at", [4, 5, 6])
def test_a_confirmed_window_is_pinned_to_the_first_slower_commit(slow_at: int) -> None:
    """The detector put the step at commit 5; the code slowed at 4, 5 or 6 (each inside the window 3..6): the pin
    measures the window's commits against commit 3 and names the first slower one, in at most two comparisons."""
    cand = candidate(5)
    window = cand.window()
    asked = []

    def measure(good: str, bad: str) -> tuple[SimpleNamespace, str]:
        asked.append(COMMITS.index(bad))
        assert good == COMMITS[3]
        return outcome_of("FAIL" if COMMITS.index(bad) >= slow_at else "PASS"), ""

    assert _pin(cand, window, outcome_of("FAIL"), measure) == COMMITS[slow_at]
    assert asked[0] == 5 and len(asked) <= 2, asked


def test_a_window_not_confirmed_or_undecided_inside_is_not_pinned() -> None:
    cand = candidate(5)
    window = cand.window()

    def never(good: str, bad: str) -> tuple[SimpleNamespace, str]:
        raise AssertionError("a window that did not FAIL is not pinned")

    assert _pin(cand, window, outcome_of("PASS"), never) is None
    assert _pin(cand, window, outcome_of("INCONCLUSIVE"), never) is None
    assert _pin(cand, window, outcome_of("FAIL"), lambda g, b: (outcome_of("INCONCLUSIVE"), "")) is None


# --- the store and what shows it -------------------------------------------------------------------------------------
def confirmation(shas: list[str], at: int, verdict: str) -> Confirmation:
    return Confirmation(
        machine_fingerprint()["id"], "tiny", {}, "wall_s", shas[at - 1], shas[at], verdict, 0.25, 1.5, [1.45, 1.55], 10,
        "worse by 50.0% (> 25%)", 1_700_000_000,
    )  # fmt: skip


def test_show_and_the_site_keep_confirmed_dismissed_and_unconfirmed_apart(tmp_path: Path) -> None:
    shas = [f"{i + 1:040x}" for i in range(len(LEVELS))]
    history = write_history(tmp_path / "h", shas)
    proc = rlbench(["history", "show", "--store", str(tmp_path / "h"), "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert [(st["first_bad"], st["status"]) for st in shown["steps"]] == [(shas[2], "unconfirmed"), (shas[5], "unconfirmed")]
    assert shown["regressions"] == {"confirmed": 0, "dismissed": 0, "unconfirmed": 2}
    history.add_confirmation(confirmation(shas, 2, DISMISSED))
    history.add_confirmation(confirmation(shas, 5, CONFIRMED))
    shown = json.loads(rlbench(["history", "show", "--store", str(tmp_path / "h"), "--json"], tmp_path).stdout)
    assert [st["status"] for st in shown["steps"]] == ["dismissed", "confirmed"]
    assert shown["steps"][1]["confirmation"]["verdict"] == "confirmed" and shown["steps"][1]["confirmation"]["rounds"] == 10
    assert shown["regressions"] == {"confirmed": 1, "dismissed": 1, "unconfirmed": 0}
    summary = write_site(HistoryStore(tmp_path / "h"), tmp_path / "site")
    assert (summary.confirmed, summary.dismissed, summary.unconfirmed) == (1, 1, 0)
    page = (tmp_path / "site" / "regressions.html").read_text()
    assert page.count('class="step regression open confirmed"') == 1 and page.count('dismissed" id=') == 1
    assert "Confirmed regressions (1)" in page and "Dismissed candidates (1)" in page
    # the latest confirmation of a step wins; an unreadable line is skipped with a warning, the rest kept
    history.add_confirmation(confirmation(shas, 2, CONFIRMED))
    with (tmp_path / "h" / machine_fingerprint()["id"] / "confirmations.jsonl").open("a") as fh:
        fh.write('{"not": "a confirmation"}\n')
    with pytest.warns(Warning, match="not a confirmation"):
        done = HistoryStore(tmp_path / "h").confirmations(machine_fingerprint()["id"])
    assert sorted(c.verdict for c in done.values()) == ["confirmed", "confirmed"]


# --- bad input and faults ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("confirm") / "repo"
    shas = build_repo(repo)
    write_history(repo / "history", shas)
    return repo, shas


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--max-rounds", "5"], 2, "--max-rounds 5 is below the first look of --rounds auto, after 10 rounds"),
        (["--steps", "0"], 2, "--steps must be at least 1"),
        (["--warmup", "-1"], 2, "--warmup must be at least 0"),
        (["--store", "nowhere"], 2, "no history store at 'nowhere'"),
        (["--commit", "nosuch"], 2, "unknown revision 'nosuch'"),
        (["--commit", "HEAD~1"], 2, "no candidate regression of this machine's history"),
    ],
)
def test_bad_input_is_one_line_and_measures_nothing(
    plain: tuple[Path, list[str]], args: list[str], code: int, words: str
) -> None:
    repo, _ = plain
    argv = ["history", "confirm", "--store", "history", "--json", *args]
    err = one_line(rlbench(argv, repo), code)
    assert words in err, err
    assert worktrees(repo) == 1 and not (repo / "history" / machine_fingerprint()["id"] / "confirmations.jsonl").exists()


@pytest.mark.slow
def test_a_candidate_whose_commit_is_gone_is_named_and_the_others_are_left(tmp_path: Path, tmpdir_of_runs: Path) -> None:
    repo = tmp_path / "repo"
    shas = build_repo(repo)
    gone = [*shas[:5], *(f"{0xDEAD0 + i:040x}" for i in range(3))]  # the last 3 commits were rewritten away
    write_history(repo / "history", gone)
    proc = rlbench(["history", "confirm", "--store", "history", "--json", "--steps", "1"], repo)
    err = one_line(proc, 2)
    assert f"commit {gone[5]} no longer exists in the repository" in err and "cannot be measured again" in err
    out = json.loads(proc.stdout)
    assert out["recorded"] == [] and out["failed"][0]["exit_code"] == 2
    assert worktrees(repo) == 1 and not leftovers(tmpdir_of_runs)


@pytest.mark.slow
def test_a_commit_of_the_window_that_fails_to_run_is_exit_1_and_records_nothing(tmp_path: Path, tmpdir_of_runs: Path) -> None:
    repo = tmp_path / "repo"
    shas = build_repo(repo, broken_at=6)  # the newer end of the window of the step at commit 5 (commits 3 to 6)
    history = write_history(repo / "history", shas)
    before = len(history.records(machine_fingerprint()["id"]))
    proc = rlbench(["history", "confirm", "--store", "history", "--json", "--commit", shas[5]], repo)
    err = one_line(proc, 1)
    assert "1 candidate(s) not measured" in err and f"commit {shas[6][:12]} failed to run" in err, err
    assert "broken on purpose" in err
    assert json.loads(proc.stdout)["failed"][0]["exit_code"] == 1
    again = HistoryStore(repo / "history")
    assert len(again.records(machine_fingerprint()["id"])) == before  # nothing measured before is lost
    assert again.confirmations(machine_fingerprint()["id"]) == {}
    assert worktrees(repo) == 1 and not leftovers(tmpdir_of_runs)


@pytest.mark.slow
def test_ctrl_c_keeps_the_confirmations_finished_and_leaves_no_worktree(tmp_path: Path, tmpdir_of_runs: Path) -> None:
    repo = tmp_path / "repo"
    shas = build_repo(repo, interrupt_at=0)  # the older end of the older candidate's window (commits 0 to 3) presses Ctrl-C
    write_history(repo / "history", shas)
    proc = rlbench(["history", "confirm", "--store", "history", "--max-rounds", "10", "--json"], repo, timeout=600)
    assert proc.returncode == 130, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("rlbench: interrupted: the confirmations finished before it are kept"), proc.stderr
    done = HistoryStore(repo / "history").confirmations(machine_fingerprint()["id"])
    # the newer candidate (commit 5) was measured first and kept; the one interrupted (commit 2) left nothing
    assert [(c.last_good, c.first_bad) for c in done.values()] == [(shas[4], shas[5])]
    (c,) = done.values()
    assert c.rounds == 10 and c.verdict in ("confirmed", "dismissed", "undecided")
    assert worktrees(repo) == 1 and not leftovers(tmpdir_of_runs)
    # the next confirm goes on with the candidate still open (it would press Ctrl-C again: --steps 0 is refused, so
    # look at what it would do with `history show`)
    shown = json.loads(rlbench(["history", "show", "--store", "history", "--json"], repo).stdout)
    assert {st["first_bad"]: st["status"] for st in shown["steps"]}[shas[2]] == "unconfirmed"
    assert os.path.isdir(repo / "history")

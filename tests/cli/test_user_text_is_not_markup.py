"""User text printed through rich is text, never markup: commit subjects, benchmark names, parameter values, metric
names, run ids and paths print as typed, in progress bars, tables and lines alike.

``[/]`` in such a string made rich raise (a crash on every later ``history run`` over that commit, and in rich's own
refresh thread), ``[link=...]`` made a terminal hyperlink, ``[bold]`` vanished into a style and ``:smile:`` into an
emoji.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.results.history import HistoryStore
from tests.history.conftest import bench_source, git
from tests.history.test_store import SHA_A, SHA_B, rec

HOSTILE = ["[/]", "[link=http://x]y[/link]", "[bold]loud", ":smile:", "[red]x[/red]"]


def tok(name: str) -> str:
    """A distinct hostile string per field (short, no spaces: a table folds a long cell and wraps at spaces)."""
    return f"{name}[/][link=u]x[bold]:smile:"


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # rich's width where stdout is no terminal: no cell is folded


def assert_as_typed(out: str, *texts: str) -> None:
    """Each text appears literally, and nothing became a hyperlink or an emoji."""
    for text in texts:
        assert text in out, f"{text!r} not printed as typed in:\n{out}"
    assert "\x1b]8;" not in out and "\U0001f604" not in out


def test_every_progress_bar_column_is_plain_text() -> None:
    """What rich's refresh thread draws: the title and every field of every bar that rlbench starts."""
    from rich.console import Console

    from rlbench.cli.progress import start_bars

    progress = start_bars("commits", "commit", "verdicts")
    try:
        progress.console.quiet = True  # the live display itself stays silent here; it is drawn below
        progress.add_task(tok("title"), total=3, commit=tok("commit"), verdicts=tok("verdicts"))
        screen = Console(file=io.StringIO(), force_terminal=True, width=400, color_system=None)
        screen.print(progress.get_renderable())  # raised MarkupError on `[/]` before
    finally:
        progress.stop()
    assert_as_typed(screen.file.getvalue(), tok("title"), tok("commit"), tok("verdicts"))


def test_history_show_prints_names_values_and_metrics_as_typed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = HistoryStore(tmp_path / tok("store").replace("/", "|"))  # a path holds no `/` of its own
    for i, sha in enumerate((SHA_A, SHA_B)):
        fields = {
            "benchmark": tok("bench"),
            "metric": tok("metric"),
            "unit": tok("unit"),
            "time": i,
            "subject": tok("subject"),
        }
        # two cases of one run: the parameter tells the series apart, so the table shows it
        store.add_records([rec(sha, run_id=f"r{i}", params={"mode": mode}, **fields) for mode in (tok("value"), "plain")])
    code = main(["history", "show", "--store", str(store.root)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert_as_typed(out, tok("bench"), tok("metric"), f"mode={tok('value')}", tok("unit"), tok("store").replace("/", "|"))
    assert "Traceback" not in err and "error" not in err


def test_report_summaries_print_names_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    """The console table after `run` and `profile` (every report kind), and `compare` and `gate`'s."""
    from rlbench.analysis.compare import compare
    from rlbench.report import function, micro, peers, pipeline, roofline, training, transports
    from rlbench.report.summary import print_comparison

    where = {"records": f"/tmp/{tok('records')}", "report": f"/tmp/{tok('report')}", "benchmark": tok("bench"), "repeats": 1}
    training.print_summary({**where, "device": "cpu", "train_s": 2.0, "warmup_s": 0.0, f"time/{tok('phase')}": 1.0})
    micro.print_summary(
        {**where, "cases": [{"group": tok("group"), "op": "call", "size": "8", "impl": tok("impl"), "median_s": 1e-6}]}
    )
    peers.print_summary(
        {
            **where,
            "algo": tok("algo"),
            "flags": [tok("flag")],
            "impls": [{"impl": tok("peer"), "sps": 1.0, "ratio": None, "eval_return": 1.0, "learned": False}],
        }
    )
    phases = [{"phase": tok("rphase"), "ms": 1.0, "achieved_gflops": 1.0, "bound": tok("bound")}]
    roofline.print_summary({**where, "machine": {}, "phases": phases})
    case = {
        "model": tok("model"),
        "env_us": 1,
        "actors": 1,
        "transport": tok("transport"),
        "requests_per_s": 1.0,
        "p99_ms": 1.0,
    }
    transports.print_summary({**where, "cases": [case]})
    pipeline.print_summary(where)
    value = {tok("value"): {"unit": tok("unit"), "direction": "lower"}}
    call = {f"{k}_s": 1e-3 for k in ("min", "median", "max", "iqr", "mean")}
    function.print_summary(
        {
            **where,
            tok("value"): 2.0,
            "cases": [{"params": {"n": tok("param")}, "calls": 1, **call, "calls_per_s": 1.0, "values": value}],
        }
    )
    fields = {"benchmark": tok("cbench"), "metric": tok("cmetric")}
    base = [rec(run_id=tok("base"), samples=[1.0 + i / 10], repeat=i, **fields) for i in range(5)]
    cand = [rec(run_id=tok("cand"), samples=[2.0 + i / 10], repeat=i, **fields) for i in range(5)]
    print_comparison(compare(base, cand), base, cand, [tok("note")])
    out, _ = capsys.readouterr()
    texts = ["records", "report", "phase", "group", "impl", "algo", "flag", "peer", "rphase", "bound", "model", "transport"]
    texts += ["param", "value", "unit"]
    assert_as_typed(out, *map(tok, texts), tok("cmetric"), tok("base"), tok("cand"), tok("note"))
    assert out.count(tok("bench")) == 7  # each report kind's table title


@pytest.mark.slow  # about 5 s: two commits measured by `rlbench run` in worktrees
def test_history_run_over_hostile_subjects_resumes_and_shows(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text(".rlbench/\n__pycache__/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    (repo / "suites").mkdir()
    shas = []
    subjects = ["[/]", "broken [/] [link=http://x]y[/link] [bold]b", "fixed :smile: [red]x[/red]"]
    for i, subject in enumerate(subjects):
        (repo / "suites" / "tiny_bench.py").write_text(bench_source(work_s=0.01, broken=i == 1))
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", subject)
        shas.append(git(repo, "rev-parse", "HEAD"))
    env = {**os.environ, "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "rlbench", "history", "run", "HEAD~3..HEAD", "--repeats", "1"]
    tiny = ["--", "run", "tiny"]
    first = subprocess.run([*cmd, *tiny], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Traceback" not in first.stderr and "MarkupError" not in first.stderr, first.stderr[-3000:]
    assert_as_typed(first.stderr, f"{shas[1][:8]} {subjects[1]}: failed")  # the gap's line, subject as typed
    again = subprocess.run([*cmd, "--json", *tiny], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]  # resumes over the same subjects
    assert json.loads(again.stdout)["skipped"] == shas
    history = HistoryStore(repo / ".rlbench" / "history")
    assert [history.commits()[s].subject for s in shas] == subjects

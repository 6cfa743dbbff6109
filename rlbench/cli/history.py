"""``rlbench history run|add|show`` and ``rlbench bisect``: a benchmark over commits, and the commit that slowed it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rlbench.cli.parser import Parser
from rlbench.cli.progress import Bars, start_bars
from rlbench.core.errors import UsageError

HISTORY_HELP = """\
rlbench history run RANGE [options] -- run BENCHMARK [options]   measure each commit of RANGE (A..B) in a worktree
rlbench history run --commits FILE [options] -- profile -- python train.py
rlbench history add STORE... [--store HISTORY]                 merge results stores into the history (idempotent)
rlbench history show [--store HISTORY] [--json]                series and detected steps
"""


def _split(argv: list[str], what: str) -> tuple[list[str], list[str]]:
    """Options of ``what`` and the command after ``--`` (required)."""
    if "--" not in argv:
        raise UsageError(
            f"missing the command after `--`: rlbench {what} ... -- run BENCHMARK [options] "
            "(or `-- profile -- python train.py`)"
        )
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _dirty_warning(what: str) -> None:
    from rlbench.analysis.ab import uncommitted_changes

    dirty = uncommitted_changes(Path.cwd())
    if dirty:
        shown = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
        print(
            f"rlbench: warning: uncommitted changes in {len(dirty)} tracked file(s) ({shown}) are not measured: "
            f"rlbench {what} measures commits, each in its own worktree; commit the changes to measure them",
            file=sys.stderr,
            flush=True,
        )


# ---- history run -------------------------------------------------------------------------------------------------


def build_history_run_parser() -> Parser:
    """Options of ``rlbench history run`` (the command to measure follows ``--``)."""
    from rlbench.results.history import DEFAULT_HISTORY

    p = Parser(
        prog="rlbench history run",
        description="Measure each commit of a git range in its own worktree (your checkout is not touched) into a history "
        "store, per machine. Commits already measured on this machine with the same benchmark and parameters are "
        "skipped, so a run stopped by Ctrl-C resumes where it stopped. A commit where the benchmark is absent or "
        "fails is recorded as a gap. Everything after `--` is the command to measure: `run BENCHMARK [options]` or "
        "`profile [options] -- python train.py`.",
    )
    p.add_argument("range", nargs="?", help="A..B: the commits after A up to B (git rev-list A..B), or one revision")
    p.add_argument("--steps", type=int, default=1, metavar="N", help="measure every N-th commit, and always the last")
    p.add_argument("--commits", metavar="FILE", help="measure the revisions listed in FILE, one per line, instead")
    p.add_argument("--store", default=DEFAULT_HISTORY, help=f"history store (default: {DEFAULT_HISTORY})")
    p.add_argument("--repeats", type=int, default=3, help="repeats per commit (default: 3)")
    p.add_argument("--retry-gaps", action="store_true", help="measure again the commits recorded as gaps")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


class CommitProgress(Bars):
    """A rich bar over the commits of a history, showing the commit being measured (stderr)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.progress: Any = None
        self.task: Any = None

    def __enter__(self) -> CommitProgress:
        if self.enabled:
            self.progress = start_bars("commits", "commit", title="history")
            self.task = self.progress.add_task("history", total=self.total, commit="")
        return self

    def __call__(self, index: int, info: Any, event: str) -> None:
        if self.progress is None:
            return
        label = f"{info.sha[:8]} {(info.subject or '')[:60]}"
        if event == "measuring":
            self.progress.update(self.task, commit=label)
            return
        if event != "measured":
            from rich.text import Text

            self.progress.console.print(Text(f"{label}: {event}", style="dim"))  # a subject is text, never markup
        self.progress.update(self.task, advance=1, commit="")


def history_run_command(argv: list[str]) -> int:
    """``rlbench history run``: exit 0 when done (gaps included), 1 when the code failed at every commit, 2 on bad input."""
    if "--" not in argv and any(a in ("-h", "--help") for a in argv):
        build_history_run_parser().print_help()
        return 0
    opts, run_argv = _split(argv, "history run")
    args = build_history_run_parser().parse_args(opts)
    from rlbench.analysis.ab import split_run_args
    from rlbench.analysis.history_run import resolve_commits, run_history
    from rlbench.results.history import HistoryStore

    split_run_args(run_argv, "history run")  # validate before any checkout
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    store_dir = Path(args.store)
    if store_dir.exists() and not store_dir.is_dir():
        raise UsageError(f"--store {args.store!r} is a file, not a history store directory")
    commits = resolve_commits(args.range, Path.cwd(), steps=args.steps, commits_file=args.commits)
    _dirty_warning("history run")
    store = HistoryStore(store_dir)
    with CommitProgress(len(commits), enabled=not args.json) as bar:
        result = run_history(
            commits, run_argv, store, Path.cwd(), repeats=args.repeats, retry_gaps=args.retry_gaps, on_commit=bar
        )
    absent = [g for g in result.gaps if g.status == "absent"]
    failed = [g for g in result.gaps if g.status == "failed"]
    summary = {
        "store": str(store_dir),
        "machine": result.machine,
        "commits": len(result.commits),
        "measured": result.measured,
        "skipped": result.skipped,
        "records": result.records,
        "gaps": [{"commit": g.commit, "status": g.status, "message": g.message} for g in result.gaps],
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"history: {len(result.commits)} commit(s): {len(result.measured)} measured, {len(result.skipped)} already in "
            f"the store, {len(absent)} absent, {len(failed)} failed -> {store_dir} (machine {result.machine})"
        )
        for g in result.gaps:
            print(f"  gap {g.commit[:12]} {g.status}: {g.message}")
    if not result.measured and not result.skipped:
        if failed:
            print(f"rlbench: error: the measured code failed at every commit ({failed[0].message})", file=sys.stderr)
            return 1
        raise UsageError(f"{result.gaps[0].benchmark!r} is absent at every commit of the range ({result.gaps[0].message})")
    return 0


# ---- history add / show ------------------------------------------------------------------------------------------


def build_history_add_parser() -> Parser:
    """Options of ``rlbench history add``."""
    from rlbench.results.history import DEFAULT_HISTORY

    p = Parser(
        prog="rlbench history add",
        description="Merge results stores (or records files) into the history: every record with a commit joins it, "
        "under its machine. Adding the same store twice changes nothing.",
    )
    p.add_argument("sources", nargs="+", metavar="STORE", help="results store directory or records file (.jsonl)")
    p.add_argument("--store", default=DEFAULT_HISTORY, help=f"history store to add to (default: {DEFAULT_HISTORY})")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def history_add_command(argv: list[str]) -> int:
    """``rlbench history add STORE...``."""
    from rlbench.core.errors import DataError
    from rlbench.results.history import HistoryStore

    args = build_history_add_parser().parse_args(argv)
    history = HistoryStore(args.store)
    history.check_writable()  # a link or FIFO where a store file belongs: refused before anything is added
    hist = Path(args.store).resolve()
    out = []
    for src in args.sources:
        path = Path(src)
        if not path.exists():
            raise DataError(f"no such store or records file: {src!r}")
        if path.resolve() == hist or hist in path.resolve().parents:
            raise UsageError(f"{src!r} is the history store itself (or inside it): give the results store to add")
        res = history.add_store(path)
        out.append({"source": src, **res.__dict__})
        if not args.json:
            print(
                f"{src}: added {res.added} record(s) of {len(res.commits)} commit(s), {res.duplicates} already in the "
                f"history, {res.skipped} without a commit (skipped)"
                + (f"; machines {', '.join(res.machines)}" if res.machines else "")
            )
    if args.json:
        print(json.dumps({"store": args.store, "added": out}))
    return 0


def build_history_show_parser() -> Parser:
    """Options of ``rlbench history show``."""
    from rlbench.results.history import DEFAULT_HISTORY

    p = Parser(prog="rlbench history show", description="Every series of the history and the steps detected in it.")
    p.add_argument("--store", default=DEFAULT_HISTORY, help=f"history store (default: {DEFAULT_HISTORY})")
    p.add_argument("--repo", default=None, help="git repository to order commits by (default: the current one, if any)")
    p.add_argument("--metric", action="append", help="only this metric (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def _short_params(params: dict) -> str:
    text = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    return text if len(text) <= 40 else text[:37] + "..."


def history_show_command(argv: list[str]) -> int:
    """``rlbench history show``: a table of series (latest median, steps) or ``--json``."""
    import statistics

    from rlbench.analysis.steps import detect_all
    from rlbench.core.errors import DataError
    from rlbench.results.history import HistoryStore

    args = build_history_show_parser().parse_args(argv)
    root = Path(args.store)
    if not root.is_dir():
        raise DataError(f"no history store at {args.store!r} (make one with `rlbench history run` or `history add`)")
    store = HistoryStore(root)
    repo = Path(args.repo) if args.repo else _repo_or_none(Path.cwd())
    series = store.series(repo=repo)
    if args.metric:
        series = [s for s in series if s.metric in args.metric]
    steps = detect_all(series)
    infos = store.commits()
    by_key: dict[str, list[Any]] = {}
    for st in steps:
        by_key.setdefault(st.series.key(), []).append(st)
    if args.json:
        print(
            json.dumps(
                {
                    "series": [
                        {
                            "key": s.key(),
                            "machine": s.machine,
                            "benchmark": s.benchmark,
                            "params": s.params,
                            "metric": s.metric,
                            "unit": s.unit,
                            "direction": s.direction,
                            "commits": s.commits,
                            "medians": [statistics.median(x) for x in s.samples],
                        }
                        for s in series
                    ],
                    "steps": [
                        {
                            "series": st.series.key(),
                            "last_good": st.last_good,
                            "first_bad": st.first_bad,
                            "ratio": st.ratio,
                            "ci": list(st.ci),
                            "worse": st.worse,
                            "phases": st.phases,
                        }
                        for st in steps
                    ],
                },
                default=str,
            )
        )
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # every name, value and path is user text: Text, never rich markup (`[/]` in a name would raise)
    table = Table(title=Text(f"history {args.store}: {len(series)} series, {len(infos)} commits"), title_justify="left")
    for col in ("machine", "benchmark", "params", "metric", "commits", "latest", "steps (first bad: ratio [95% CI])"):
        table.add_column(col, overflow="fold")
    for s in series:
        found = by_key.get(s.key(), [])
        words = Text("; ").join(
            Text(f"{st.first_bad[:8]} x{st.ratio:.3f} [{st.ci[0]:.3f}, {st.ci[1]:.3f}]", style="red" if st.worse else "")
            for st in found
        )
        latest = statistics.median(s.samples[-1])
        table.add_row(
            Text(s.machine[:12]),
            Text(s.benchmark),
            Text(_short_params(s.params)),
            Text(s.metric),
            str(len(s.commits)),
            Text(f"{latest:.4g} {s.unit}".strip()),
            words,
        )
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    return 0


def _repo_or_none(where: Path) -> Path | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=where, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 else None


def history_command(argv: list[str]) -> int:
    """``rlbench history SUBCOMMAND``."""
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage:\n" + HISTORY_HELP)
        return 0
    sub, rest = argv[0], argv[1:]
    if sub == "run":
        return history_run_command(rest)
    if sub == "add":
        return history_add_command(rest)
    if sub == "show":
        return history_show_command(rest)
    raise UsageError(f"unknown history command {sub!r}: use run, add or show (see `rlbench history --help`)")


# ---- bisect ------------------------------------------------------------------------------------------------------


def build_bisect_parser() -> Parser:
    """Options of ``rlbench bisect`` (the command to measure follows ``--``)."""
    p = Parser(
        prog="rlbench bisect",
        description="Find the first commit after GOOD up to BAD where a metric got worse by more than a threshold. Each "
        "tested commit runs against GOOD in interleaved rounds, as `rlbench ab` does, in worktrees (your checkout is "
        "not touched); the gate's verdict decides good (PASS) or bad (FAIL); a commit that cannot be judged "
        "(INCONCLUSIVE, a failed run) is skipped like `git bisect skip`. Exit 0 when found, 2 when it cannot decide.",
    )
    p.add_argument("good", help="a revision that is fast enough")
    p.add_argument("bad", help="a later revision that is not")
    p.add_argument(
        "--fail",
        action="append",
        required=True,
        metavar="METRIC:PCT%",
        help="what makes a commit bad: METRIC significantly worse by more than PCT%% (repeatable), e.g. wall_s:10%% "
        "or syncs/iteration:0%%",
    )
    p.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds per tested commit (default: 1 for counters, else 5)"
    )
    p.add_argument("--repeats", type=int, default=1, help="repeats per run (default: 1); rounds x repeats samples per side")
    p.add_argument(
        "--warmup",
        type=int,
        default=0,
        metavar="N",
        help="repeats per run made first and left out (a benchmark's first call in a process pays one-time costs)",
    )
    p.add_argument("--allow-busy", action="store_true", help="judge timings even when other processes load the machine")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def bisect_command(argv: list[str]) -> int:
    """``rlbench bisect``: 0 with the first bad commit, 2 on bad input or when it cannot decide."""
    if "--" not in argv and any(a in ("-h", "--help") for a in argv):
        build_bisect_parser().print_help()
        return 0
    opts, run_argv = _split(argv, "bisect GOOD BAD --fail METRIC:PCT%")
    args = build_bisect_parser().parse_args(opts)
    from rlbench.analysis.ab import split_run_args
    from rlbench.analysis.bisect import bisect
    from rlbench.analysis.gate import Threshold

    split_run_args(run_argv, "bisect")
    thresholds = [Threshold.parse(t) for t in args.fail]
    _dirty_warning("bisect")
    from rich.console import Console
    from rich.text import Text

    err = Console(stderr=True)

    def progress(number: int, info: Any, k: int, side: str) -> None:
        if not args.json:
            who = "GOOD" if side == "base" else f"{info.sha[:8]} {(info.subject or '')[:50]}"
            err.print(Text(f"test {number}, round {k + 1}: {who}", style="dim"))  # a subject is text, never markup

    result = bisect(
        args.good,
        args.bad,
        thresholds,
        run_argv,
        Path.cwd(),
        rounds=args.rounds,
        repeats=args.repeats,
        warmup=args.warmup,
        allow_busy=args.allow_busy,
        on_test=progress,
    )
    code = 0 if result.found else 2
    if args.json:
        print(
            json.dumps(
                {
                    "exit_code": code,
                    "status": "found" if result.found else "undecided",
                    "good": result.good,
                    "bad": result.bad,
                    "first_bad": result.first_bad,
                    "last_good": result.last_good,
                    "candidates": result.candidates,
                    "searched": result.searched,
                    "rounds": result.rounds,
                    "repeats": result.repeats,
                    "warmup": result.warmup,
                    "message": result.message,
                    "tested": [t.to_dict() for t in result.tested],
                }
            )
        )
    else:
        _print_bisect(result, args)
    if not result.found:
        if not args.json:
            print(f"rlbench: error: {result.message}", file=sys.stderr)
        return 2
    return 0


def _fmt_ratio(t: Any) -> tuple[str, str]:
    if t.ratio is None:
        return "", ""
    if t.exact or t.ci is None:
        return f"{t.ratio:.3f}", "exact"
    return f"{t.ratio:.3f}", f"[{t.ci[0]:.3f}, {t.ci[1]:.3f}]"


def _print_bisect(result: Any, args: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # revisions, subjects, metric names and the gate's reasons are user text: Text, never rich markup
    out = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    table = Table(
        title=Text(
            f"bisect {args.good}..{args.bad}: {result.searched} commit(s), {len(result.tested)} tested against GOOD "
            f"({', '.join(args.fail)})"
        ),
        title_justify="left",
    )
    for col in ("#", "commit", "subject", "verdict", "metric", "ratio", "95% CI", "why"):
        table.add_column(col, overflow="fold")
    for i, t in enumerate(result.tested, 1):
        ratio, ci = _fmt_ratio(t)
        colour = {"FAIL": "red", "PASS": "green"}.get(t.verdict, "yellow")
        table.add_row(
            str(i),
            t.sha[:12],
            Text((t.subject or "")[:50]),
            Text(t.verdict, style=colour),
            Text(t.metric or ""),
            ratio,
            Text(ci),
            Text(t.reason),
        )
    out.print(table)
    if result.found:
        t = result.tested_of(result.first_bad)
        ratio, ci = _fmt_ratio(t)
        out.print(Text(f"first bad commit: {result.first_bad} {t.subject or ''}"))
        out.print(
            Text(
                f"  {t.metric} x{ratio} {ci if ci != 'exact' else '(exact count)'} against GOOD {result.good[:12]}; "
                f"last good: {result.last_good[:12]}"
            )
        )

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
rlbench history show [--store HISTORY] [--json]                series, detected steps and their confirmations
rlbench history confirm [--steps N] [--store HISTORY]          measure candidate regressions again (ab --rounds auto)
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
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help="untimed repeats each commit's run makes first, in the same process, left out of the history (default: 1 "
        "for `run`, whose first call in a fresh process pays one-time costs; 0 for `profile`); --warmup 0 turns it off",
    )
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
    from rlbench.analysis.ab import split_run_args, warmup_for, warmup_note
    from rlbench.analysis.history_run import resolve_commits, run_history
    from rlbench.results.history import HistoryStore

    checked, _ = split_run_args(run_argv, "history run")  # validate before any checkout
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    warmup = warmup_for(checked, args.warmup)
    store_dir = Path(args.store)
    if store_dir.exists() and not store_dir.is_dir():
        raise UsageError(f"--store {args.store!r} is a file, not a history store directory")
    commits = resolve_commits(args.range, Path.cwd(), steps=args.steps, commits_file=args.commits)
    _dirty_warning("history run")
    store = HistoryStore(store_dir)
    with CommitProgress(len(commits), enabled=not args.json) as bar:
        result = run_history(
            commits,
            run_argv,
            store,
            Path.cwd(),
            repeats=args.repeats,
            retry_gaps=args.retry_gaps,
            on_commit=bar,
            warmup=warmup,
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
        "warmup": result.warmup,
        "gaps": [{"commit": g.commit, "status": g.status, "message": g.message} for g in result.gaps],
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"history: {len(result.commits)} commit(s): {len(result.measured)} measured, {len(result.skipped)} already in "
            f"the store, {len(absent)} absent, {len(failed)} failed -> {store_dir} (machine {result.machine})"
        )
        if result.measured:
            print(f"  {warmup_note(checked, result.warmup)}")
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

    from rlbench.analysis.candidates import status, step_key
    from rlbench.analysis.confirm import confirmation_dict
    from rlbench.analysis.steps import detect_all, loaded_share
    from rlbench.core.errors import DataError
    from rlbench.results.history import CONFIRMED, DISMISSED, HistoryStore

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
    confirmations = {m: store.confirmations(m) for m in {s.machine for s in series}}
    states = {id(st): status(st, confirmations[st.series.machine]) if st.worse else None for st in steps}
    worse = [st for st in steps if st.worse]
    counts = {
        "confirmed": sum(states[id(st)] == CONFIRMED for st in worse),
        "dismissed": sum(states[id(st)] == DISMISSED for st in worse),
        "unconfirmed": sum(states[id(st)] not in (CONFIRMED, DISMISSED) for st in worse),
    }

    def confirmation_of(st: Any) -> dict | None:
        c = confirmations[st.series.machine].get(step_key(st)) if st.worse else None
        return confirmation_dict(c) if c is not None else None

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
                            "loads": s.loads,
                            "loaded_commits": loaded_share(s)[0],
                        }
                        for s in series
                    ],
                    "regressions": counts,
                    "steps": [
                        {
                            "series": st.series.key(),
                            "last_good": st.last_good,
                            "first_bad": st.first_bad,
                            "ratio": st.ratio,
                            "ci": list(st.ci),
                            "worse": st.worse,
                            "phases": st.phases,
                            "status": states[id(st)],
                            "confirmation": confirmation_of(st),
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
    title = (
        f"history {args.store}: {len(series)} series, {len(infos)} commits; regressions: {counts['confirmed']} confirmed, "
        f"{counts['unconfirmed']} candidate(s) not confirmed yet, {counts['dismissed']} dismissed"
    )
    table = Table(title=Text(title), title_justify="left")
    for col in ("machine", "benchmark", "params", "metric", "commits", "latest", "steps (first bad: ratio [95% CI])"):
        table.add_column(col, overflow="fold")
    for s in series:
        found = by_key.get(s.key(), [])
        words = Text("; ").join(
            Text(
                f"{st.first_bad[:8]} x{st.ratio:.3f} [{st.ci[0]:.3f}, {st.ci[1]:.3f}]"
                + (f" {states[id(st)]}" if st.worse else ""),
                style=("red" if states[id(st)] != DISMISSED else "dim") if st.worse else "",
            )
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
    if sub == "confirm":
        return history_confirm_command(rest)
    raise UsageError(f"unknown history command {sub!r}: use run, add, show or confirm (see `rlbench history --help`)")


# ---- history confirm ---------------------------------------------------------------------------------------------


def build_history_confirm_parser() -> Parser:
    """Options of ``rlbench history confirm``."""
    from rlbench.results.history import DEFAULT_HISTORY

    p = Parser(
        prog="rlbench history confirm",
        description="Measure the history's candidate regressions again: for each step for the worse that no confirmation "
        "decided yet (newest first), run its last good and first bad commits side by side in worktrees, as `rlbench ab "
        "--rounds auto` does (interleaved rounds until the gate decides, up to --max-rounds), gated with --fail "
        "METRIC:X%% at half the step's size, and record the verdict in the history store: confirmed (FAIL), dismissed "
        "(PASS) or undecided. `history show` and `rlbench publish` then tell confirmed regressions from candidates. "
        "Only this machine's series are confirmed (the runs are made here). Exit 0 when done, 1 when a candidate's "
        "measured code failed, 2 on bad input.",
    )
    p.add_argument("--store", default=DEFAULT_HISTORY, help=f"history store (default: {DEFAULT_HISTORY})")
    p.add_argument("--steps", type=int, default=None, metavar="N", help="confirm at most N candidates, newest first")
    p.add_argument("--metric", action="append", help="only candidates of this metric (repeatable)")
    p.add_argument("--commit", metavar="REV", help="only the candidates whose first bad commit is REV")
    p.add_argument("--retry", action="store_true", help="also measure again candidates already confirmed or dismissed")
    p.add_argument(
        "--max-rounds",
        type=int,
        default=None,
        metavar="N",
        help="the most interleaved rounds per candidate (default: 40; at least 10, the first look)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help="untimed repeats each run makes first, in the same process, left out (default: 1 for `run`, 0 for "
        "`profile`); --warmup 0 turns it off",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="timed repeats per run (default: 1), as `rlbench ab --repeats`: a few calls of a short benchmark per "
        "process steady each round beside a busy neighbour",
    )
    p.add_argument(
        "--allow-busy",
        action="store_true",
        help="judge timings even when the load differed between the sides' runs (a neighbour during one side only)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def history_confirm_command(argv: list[str]) -> int:
    """``rlbench history confirm``: 0 when done, 1 when a candidate's measured code failed, 2 on bad input."""
    from rlbench.analysis.ab import repo_top, resolve_commit
    from rlbench.analysis.candidates import candidates
    from rlbench.analysis.confirm import confirm, confirmation_dict
    from rlbench.analysis.gate import DEFAULT_MAX_ROUNDS, check_max_rounds
    from rlbench.core.errors import DataError, interrupt_exit_code
    from rlbench.results.fingerprint import machine_fingerprint
    from rlbench.results.history import HistoryStore

    args = build_history_confirm_parser().parse_args(argv)
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {args.steps}")
    max_rounds = DEFAULT_MAX_ROUNDS if args.max_rounds is None else args.max_rounds
    check_max_rounds(max_rounds)
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f"--warmup must be at least 0, got {args.warmup}")
    root = Path(args.store)
    if not root.is_dir():
        raise DataError(f"no history store at {args.store!r} (make one with `rlbench history run` or `history add`)")
    top = repo_top(Path.cwd())  # the commits are measured again: this must be their repository
    commit = resolve_commit(top, args.commit) if args.commit else None
    store = HistoryStore(root)
    machine = str(machine_fingerprint().get("id"))
    machines = store.machines()
    if machine not in machines:
        raise DataError(
            f"the history {args.store!r} holds no series measured on this machine (id {machine}; it holds "
            f"{', '.join(machines) or 'none'}): confirm measures here, so it confirms this machine's steps; measure the "
            "range here first with `rlbench history run`"
        )
    found = candidates(store, machine, top, metrics=args.metric, commit=commit, retry=args.retry)
    if commit is not None and not found:
        raise DataError(
            f"no candidate regression of this machine's history in {args.store!r} has {args.commit!r} "
            f"({commit[:12]}) as its first bad commit (`rlbench history show` lists the steps)"
        )
    if args.steps is not None:
        found = found[: args.steps]
    from rich.console import Console
    from rich.text import Text

    err = Console(stderr=True)
    if not found:
        if args.json:
            print(json.dumps({"store": args.store, "machine": machine, "candidates": 0, "recorded": [], "failed": []}))
        else:
            print(f"nothing to confirm: no candidate regression of machine {machine} in {args.store} is left unconfirmed")
        return 0
    _dirty_warning("history confirm")

    def progress(number: int, cand: Any, k: int, side: str) -> None:
        if not args.json:
            which = "last good" if side == "base" else "first bad"
            err.print(Text(f"candidate {number}/{len(found)} {cand.label()}: round {k + 1}, {which}", style="dim"))

    def done(number: int, cand: Any, recorded: Any, note: str) -> None:
        if args.json:
            return
        if recorded is None:
            err.print(Text(f"candidate {number}/{len(found)}: not measured: {note}", style="yellow"))
            return
        for c in recorded:
            err.print(Text(f"candidate {number}/{len(found)} {c.metric}: {c.verdict} after {c.rounds} round(s)"))

    try:
        result = confirm(
            found,
            store,
            machine,
            Path.cwd(),
            max_rounds=max_rounds,
            warmup=args.warmup,
            repeats=args.repeats,
            allow_busy=args.allow_busy,
            on_run=progress,
            on_done=done,
        )
    except KeyboardInterrupt as exc:
        print(
            "rlbench: interrupted: the confirmations finished before it are kept in the history store; no worktree is "
            "left; the same command goes on with the candidates still open",
            file=sys.stderr,
        )
        return interrupt_exit_code(exc)
    failed = [{"candidate": f.candidate.label(), "message": f.message, "exit_code": f.exit_code} for f in result.failed]
    if args.json:
        print(
            json.dumps(
                {
                    "store": args.store,
                    "machine": machine,
                    "candidates": len(found),
                    "rounds": result.rounds,
                    "seconds": round(result.seconds, 3),
                    "warmup": result.warmup,
                    "repeats": result.repeats,
                    "recorded": [confirmation_dict(c) for c in result.recorded],
                    "failed": failed,
                }
            )
        )
    else:
        _print_confirmations(result, len(found), args.store)
    if result.failed:
        first = result.failed[0]
        code = 1 if any(f.exit_code == 1 for f in result.failed) else 2
        more = f" (and {len(result.failed) - 1} more)" if len(result.failed) > 1 else ""
        print(f"rlbench: error: {len(result.failed)} candidate(s) not measured: {first.message}{more}", file=sys.stderr)
        return code
    return 0


def _print_confirmations(result: Any, candidates: int, store: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console(width=200 if not sys.stdout.isatty() else None, highlight=False)
    table = Table(
        title=Text(
            f"history confirm: {candidates} candidate(s), {len(result.recorded)} verdict(s) recorded in {store}, "
            f"{result.rounds} round(s) in {result.seconds:.0f} s"
        ),
        title_justify="left",
    )
    for col in ("benchmark", "metric", "last good..first bad", "verdict", "ratio", "CI", "rounds", "why"):
        table.add_column(col, overflow="fold")
    for c in result.recorded:
        ci = f"[{c.ci[0]:.3f}, {c.ci[1]:.3f}]" if c.ci and None not in c.ci else ""
        colour = {"confirmed": "red", "dismissed": "green"}.get(c.verdict, "yellow")
        table.add_row(
            Text(c.benchmark),
            Text(c.metric),
            f"{c.last_good[:12]}..{c.first_bad[:12]}",
            Text(c.verdict, style=colour),
            "" if c.ratio is None else f"{c.ratio:.3f}",
            ci,
            str(c.rounds),
            Text(c.reason),
        )
    out.print(table)


# ---- bisect ------------------------------------------------------------------------------------------------------


def build_bisect_parser() -> Parser:
    """Options of ``rlbench bisect`` (the command to measure follows ``--``)."""
    p = Parser(
        prog="rlbench bisect",
        description="Find the first commit after GOOD up to BAD where a metric got worse by more than a threshold. Each "
        "tested commit runs against GOOD in interleaved rounds, as `rlbench ab --rounds auto` does (rounds added until "
        "the gate decides, up to --max-rounds), in worktrees (your checkout is not touched); the gate's verdict decides "
        "good (PASS) or bad (FAIL); a commit whose run fails, or that --max-rounds rounds cannot decide, is skipped like "
        "`git bisect skip`, and the end says what would settle it. Exit 0 when found, 2 when it cannot decide.",
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
        "--rounds",
        default=None,
        metavar="N|auto",
        help="interleaved rounds per tested commit (default: auto, as `ab --rounds auto`: looks after rounds 10, 20, "
        "40, ... up to --max-rounds until every threshold is PASS or FAIL; 1 when every threshold is a counter)",
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        default=None,
        metavar="N",
        help="with --rounds auto: the most rounds per tested commit (default: 40; at least 10, the first look)",
    )
    p.add_argument("--repeats", type=int, default=1, help="repeats per run (default: 1); rounds x repeats samples per side")
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help="untimed repeats each run makes first, in the same process, left out (default: 1 for `run`, whose first call "
        "in a fresh process pays one-time costs; 0 for `profile`); --warmup 0 turns it off",
    )
    p.add_argument(
        "--allow-busy",
        action="store_true",
        help="judge timings even when the load differed between the sides' runs (a neighbour during one side only)",
    )
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
    from rlbench.analysis.gate import DEFAULT_MAX_ROUNDS, Threshold, check_max_rounds

    split_run_args(run_argv, "bisect")
    thresholds = [Threshold.parse(t) for t in args.fail]
    rounds = _rounds_option(args.rounds)
    if args.max_rounds is not None and rounds is not None:
        raise UsageError(
            f"--max-rounds applies to --rounds auto only; with --rounds {rounds} bisect runs exactly that many rounds per "
            "commit: leave --max-rounds out, or leave --rounds out (auto)"
        )
    if args.max_rounds is not None:
        check_max_rounds(args.max_rounds)
    _dirty_warning("bisect")
    from rich.console import Console
    from rich.text import Text

    err = Console(stderr=True)

    def progress(number: int, info: Any, k: int, side: str) -> None:
        if not args.json:
            who = "GOOD" if side == "base" else f"{info.sha[:8]} {(info.subject or '')[:50]}"
            err.print(Text(f"test {number}, round {k + 1}: {who}", style="dim"))  # a subject is text, never markup

    def looked(number: int, info: Any, done: int, outcome: Any) -> None:
        if not args.json:
            words = (
                ", ".join(f"{c.threshold.metric} {c.verdict}" for c in outcome.checks)
                if outcome is not None
                else "no verdict yet"
            )
            err.print(Text(f"test {number}, look after {done} rounds: {words}", style="dim"))

    result = bisect(
        args.good,
        args.bad,
        thresholds,
        run_argv,
        Path.cwd(),
        rounds=rounds,
        max_rounds=DEFAULT_MAX_ROUNDS if args.max_rounds is None else args.max_rounds,
        repeats=args.repeats,
        warmup=args.warmup,
        allow_busy=args.allow_busy,
        on_test=progress,
        on_look=looked,
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
                    "max_rounds": result.max_rounds,
                    "rounds_run": result.rounds_run,
                    "seconds": round(result.seconds, 3),
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


def _rounds_option(text: str | None) -> int | None:
    """``--rounds``: ``None`` for auto (or left out), else the number.

    Raises:
        UsageError: Neither a number nor ``auto``.
    """
    if text is None or text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--rounds {text!r}: give a number of rounds or auto") from None


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
    how = (
        f"rounds auto up to {result.max_rounds}" if result.rounds == "auto" else f"{result.rounds} round(s)"
    ) + f" per commit, warm-up {result.warmup} repeat(s) per run"
    table = Table(
        title=Text(
            f"bisect {args.good}..{args.bad}: {result.searched} commit(s), {len(result.tested)} tested against GOOD "
            f"({', '.join(args.fail)}; {how})"
        ),
        title_justify="left",
    )
    for col in ("#", "commit", "subject", "verdict", "metric", "ratio", "CI", "rounds", "why"):
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
            f"{t.rounds} ({t.seconds:.0f} s)",
            Text(t.reason + (f"; to decide it: {t.settle}" if t.settle else "")),
        )
    out.print(table)
    used = f"used {result.rounds_run} round(s) against GOOD in {result.seconds:.0f} s over {len(result.tested)} test(s)"
    out.print(Text(used))
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

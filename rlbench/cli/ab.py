"""``rlbench ab BASE_REV [HEAD_REV] [options] -- run BENCHMARK [run options]``."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from rlbench.cli.parser import Parser, write_output
from rlbench.core.errors import UsageError

#: the fewest paired rounds the gate draws an interval from (a metric with one sample per run)
MIN_ROUNDS = 5
#: what ``ab --keep DIR`` puts in DIR: both stores, and the output of a side that failed
KEPT = ("store-base/", "store-head/", "base-output.log", "head-output.log")


def build_ab_parser() -> Parser:
    """Options of ``rlbench ab`` (the run command follows ``--``)."""
    from rlbench.analysis.gate import DEFAULT_MAX_ROUNDS, FIRST_LOOK

    p = Parser(
        prog="rlbench ab",
        description="Run two git revisions' own code interleaved on this machine, then compare or gate. Everything after "
        "`--` is the rlbench command to run, e.g. `-- run ppo-cartpole --total-steps 20000`, or, in your own "
        "repository, `-- profile -- python train.py --total-timesteps 50000` or `-- run my-suite-benchmark`.",
    )
    p.add_argument("base_rev", help="baseline revision (branch, tag, sha)")
    p.add_argument("head_rev", nargs="?", default="HEAD", help="candidate revision (default: HEAD)")
    p.add_argument(
        "--rounds",
        default="5",
        metavar="N|auto",
        help="runs per revision, interleaved A B / B A (default: 5); auto (with --fail): add rounds until every threshold "
        "is PASS or FAIL, looking at rounds 10, 20, 40, ... up to --max-rounds with Bonferroni alpha spending, so the "
        "false-verdict rate stays at 5%% however early it stops",
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        default=None,
        metavar="N",
        help=f"only with --rounds auto: the most rounds per revision (default: {DEFAULT_MAX_ROUNDS}; at least "
        f"{FIRST_LOOK}, the first look)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help="untimed repeats each run makes first, in the same process, left out of the comparison (default: 1 for "
        "`run`, whose first call in a fresh process pays one-time costs; 0 for `profile`, a fresh process per repeat); "
        "--warmup 0 turns it off",
    )
    p.add_argument(
        "--max-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="only with --rounds auto: start no new look after this many seconds (default: no limit)",
    )
    p.add_argument(
        "--fail",
        action="append",
        metavar="METRIC:PCT%",
        help="gate: exit 1 if METRIC is significantly worse by more than PCT%% (repeatable); without it, just compare",
    )
    p.add_argument("--learning-drop", default="10%", metavar="PCT%", help="gate also on eval_return dropping (default: 10%%)")
    p.add_argument("--no-learning-check", action="store_true", help="do not gate on eval_return")
    p.add_argument(
        "--min-effect", type=float, default=0.05, help="comparison: smallest change that earns a verdict (default 0.05)"
    )
    p.add_argument("--metric", action="append", help="comparison: only this metric (repeatable)")
    from rlbench.cli.compare import add_all_metrics_argument, add_inconclusive_argument

    add_all_metrics_argument(p)
    p.add_argument("--allow-mismatch", action="store_true", help="compare even if benchmark definitions differ")
    p.add_argument(
        "--allow-busy",
        action="store_true",
        help="gate even when the two sides' machine load differs enough to explain the result (rare: rounds interleave)",
    )
    add_inconclusive_argument(p)
    p.add_argument("--summary", metavar="PATH", help="write the gate's markdown table here (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--report", metavar="PATH", help="write the markdown comparison report here")
    p.add_argument(
        "--comment",
        metavar="PATH",
        help="with --fail: write a pull-request comment body here (the verdict per threshold, ratio and interval, rounds "
        "used, what an INCONCLUSIVE would need), its first line a hidden marker that a workflow updates it by "
        "(docs/ci.md: one sticky comment per pull request)",
    )
    p.add_argument("--keep", metavar="DIR", help="keep both sides' records in DIR/store-base and DIR/store-head")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def ab_command(argv: list[str]) -> int:
    """Parse, run both revisions, then gate (with --fail) or compare."""
    if "--" not in argv:
        if any(a in ("-h", "--help") for a in argv):
            build_ab_parser().print_help()
            return 0
        raise UsageError(
            "missing the command after `--`: rlbench ab BASE [HEAD] [options] -- run ppo-cartpole "
            "(or `-- profile -- python train.py`)"
        )
    cut = argv.index("--")
    args = build_ab_parser().parse_args(argv[:cut])
    run_argv = argv[cut + 1 :]
    from rlbench.analysis.ab import run_ab, split_run_args, uncommitted_changes, warmup_for, warmup_note
    from rlbench.analysis.compare import compare, mismatches
    from rlbench.analysis.gate import DEFAULT_MAX_ROUNDS, AutoRounds, Threshold, check_max_rounds, evaluate, gate_look
    from rlbench.cli.compare import hide_internal
    from rlbench.report.comparison import gate_markdown

    checked, _ = split_run_args(run_argv)  # validate before any checkout
    warmup = warmup_for(checked, args.warmup)
    thresholds = [Threshold.parse(t) for t in args.fail or []]
    auto = args.rounds == "auto"
    if auto:
        if not thresholds:
            raise UsageError("--rounds auto adds rounds until the gate can decide: give at least one --fail METRIC:PCT%")
        if args.max_time is not None and not args.max_time > 0:
            raise UsageError(f"--max-time must be a positive number of seconds, got {args.max_time:g}")
        max_rounds = DEFAULT_MAX_ROUNDS if args.max_rounds is None else args.max_rounds
        check_max_rounds(max_rounds)
        design = AutoRounds.plan(max_rounds)
        looks, confidence = list(design.looks), design.confidence
        rounds = looks[-1]
    else:
        for flag, value in (("--max-rounds", args.max_rounds), ("--max-time", args.max_time)):
            if value is not None:
                raise UsageError(
                    f"{flag} applies to --rounds auto only; with --rounds {args.rounds} ab runs exactly that many rounds: "
                    f"leave {flag} out, or add rounds until the gate decides with --rounds auto"
                )
        try:
            rounds = int(args.rounds)
        except ValueError:
            raise UsageError(f"--rounds {args.rounds!r}: give a number of rounds or auto") from None
        if rounds < 1:
            raise UsageError(f"--rounds must be at least 1, got {rounds}")
        looks, confidence = None, 0.95
    more = (
        f"give a larger --max-rounds (each side's metric needs {MIN_ROUNDS} samples)"
        if auto
        else f"give more --rounds (at least {MIN_ROUNDS} when each run records the metric once)"
    )
    drop = None if args.no_learning_check else Threshold.parse(f"eval_return:{args.learning_drop}").fraction
    from rlbench.results.outputs import check_outputs

    # every output checked before any checkout or round: nothing measured is lost to a path that cannot be written
    if args.comment and not thresholds:
        raise UsageError("--comment writes the gate's verdicts: add at least one --fail METRIC:PCT%")
    report, summary, comment = check_outputs(
        [(args.report, "--report"), (args.summary, "--summary"), (args.comment, "--comment")],
        folders=[(args.keep, "--keep", KEPT)],
    )

    from rich.console import Console
    from rich.text import Text  # revisions and metric names are user text, never rich markup

    err = Console(stderr=True)
    dirty = uncommitted_changes(Path.cwd())
    dirty_note = (
        f"uncommitted changes in {len(dirty)} tracked file(s) ({', '.join(dirty[:3])}{', ...' if len(dirty) > 3 else ''}) "
        f"are not measured: rlbench ab compares the commits {args.base_rev} and {args.head_rev}; commit the changes to "
        "measure them"
        if dirty
        else None
    )
    if dirty_note:
        print(f"rlbench: warning: {dirty_note}", file=sys.stderr, flush=True)

    def progress(k: int, side: str) -> None:
        if not args.json:
            upto = f"up to {rounds}" if auto else str(rounds)
            err.print(
                Text(f"round {k + 1}/{upto}: {side} ({args.base_rev if side == 'base' else args.head_rev})", style="dim")
            )

    def gate(base, head):
        return evaluate(
            base,
            head,
            thresholds,
            learning_drop=drop,
            confidence=confidence,
            allow_busy=args.allow_busy,
            on_inconclusive=args.inconclusive,
            more=more,
            interleaved=True,
        )

    decided_at: dict[str, int] = {}  # metric -> rounds after which its verdict was first PASS or FAIL

    def decided(base, head, look: int) -> bool:
        outcome, stop = gate_look(lambda: gate(base, head))
        if outcome is None:  # a busy machine or too few samples at this look: not decided yet
            return False
        for c in outcome.checks:
            if c.verdict != "INCONCLUSIVE":
                decided_at.setdefault(c.threshold.metric, looks[look])
        if not args.json:
            words = ", ".join(f"{c.threshold.metric} {c.verdict}" for c in outcome.checks)
            err.print(Text(f"look {look + 1}/{len(looks)} after {looks[look]} rounds: {words}", style="dim"))
        return stop

    result = run_ab(
        args.base_rev,
        args.head_rev,
        run_argv,
        rounds,
        Path.cwd(),
        Path(args.keep) if args.keep else None,
        on_run=progress,
        looks=looks,
        decided=decided if auto else None,
        max_time=args.max_time,
        warmup=warmup,
    )
    diffs = [d for d in mismatches(result.base, result.head) if not d.startswith("machine")]
    if diffs and not args.allow_mismatch:
        from rlbench.core.errors import DataError

        raise DataError("the revisions' records differ in " + "; ".join(diffs) + " (pass --allow-mismatch to compare anyway)")
    notes = [
        f"{args.base_rev} = {result.base_rev[:12]} vs {args.head_rev} = {result.head_rev[:12]}, {result.rounds} "
        "interleaved rounds, paired by seed",
        warmup_note(checked, warmup),
    ] + [f"MISMATCH (compared anyway): {d}" for d in diffs]
    if dirty_note:
        notes.append(f"NOTE: {dirty_note}")
    if auto:
        assert looks is not None
        stopped = ", ".join(f"{m} decided after {n}" for m, n in decided_at.items()) or "no threshold decided"
        notes.append(
            f"--rounds auto: looks planned at rounds {', '.join(map(str, looks))}; each look's interval at "
            f"{confidence:.2%} (Bonferroni alpha spending over {len(looks)} looks: at most 5% false verdicts in all); "
            f"stopped after {result.rounds} rounds ({stopped})"
        )
    if args.report:
        from rlbench.report.comparison import comparison_markdown

        compared = compare(result.base, result.head, min_effect=args.min_effect, metrics=args.metric)
        results, hidden = hide_internal(compared, args)
        report_notes = notes + ([hidden] if hidden else [])
        write_output(report, comparison_markdown(results, result.base, result.head, report_notes, args.min_effect), "--report")
    if thresholds:
        outcome = gate(result.base, result.head)
        from rlbench.analysis.compare import sample_flags

        notes = notes + outcome.load_notes() + sample_flags([c.result for c in outcome.checks])
        text = gate_markdown(outcome, notes)
        if args.summary:
            write_output(summary, text, "--summary")
        if args.comment:
            from rlbench.report.comment import pr_comment

            body = pr_comment(
                outcome,
                base_rev=args.base_rev,
                head_rev=args.head_rev,
                base_sha=result.base_rev,
                head_sha=result.head_rev,
                rounds=result.rounds,
                decided_at=decided_at,
                auto=auto,
                notes=notes,
                command="rlbench ab " + shlex.join(argv),
            )
            write_output(comment, body, "--comment")
        if args.json:
            from rlbench.cli.compare import check_dict

            out = {
                "exit_code": outcome.exit_code,
                "verdict": outcome.verdict,
                "base": result.base_rev,
                "head": result.head_rev,
                "rounds": result.rounds,
                "decided_after": decided_at,
                "warmup": warmup,
                "load": outcome.load.to_dict() if outcome.load is not None else None,
                "notes": notes,
                "checks": [check_dict(c) for c in outcome.checks],
            }
            print(json.dumps(out))
        else:
            sys.stdout.write(text)
        sys.stdout.flush()
        from rlbench.cli.compare import finish_gate

        return finish_gate(outcome)
    compared = compare(result.base, result.head, min_effect=args.min_effect, metrics=args.metric)
    results, hidden = hide_internal(compared, args)
    notes += [hidden] if hidden else []
    if args.json:
        print(json.dumps({"base": result.base_rev, "head": result.head_rev, "cases": [r.to_dict() for r in results]}))
    else:
        from rlbench.report.comparison import comparison_markdown

        sys.stdout.write(comparison_markdown(results, result.base, result.head, notes, args.min_effect))
    return 0

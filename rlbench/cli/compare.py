"""``rlbench compare`` and ``rlbench gate``: read two sides, compare, render, exit."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlbench.cli.parser import prepare_output, write_output
from rlbench.core.errors import DataError, UsageError
from rlbench.results.records import Record


def add_side_arguments(p: argparse.ArgumentParser, cand_optional: bool = False) -> None:
    """BASE, CAND and the options both commands share (``cand_optional``: compare's ``--by`` needs BASE only)."""
    p.add_argument(
        "base",
        help="baseline: a records file, a store directory (its latest run) or a run id in --store; several, joined by "
        "commas (RUN1,RUN2), are merged by seed",
    )
    if cand_optional:
        p.add_argument("cand", nargs="?", help="candidate: same forms as BASE (left out with --by)")
    else:
        p.add_argument("cand", help="candidate: same forms as BASE")
    p.add_argument("--store", default=".rlbench", help="store where run ids are looked up (default: .rlbench)")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare even records from different machines, software or benchmark definitions (flagged on top)",
    )
    p.add_argument(
        "--allow-busy",
        action="store_true",
        help="give verdicts even when the two sides' machine load (other processes' CPU use, recorded per repeat) "
        "differs enough to explain them (flagged on top)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of tables")
    if not cand_optional:  # gate (compare's CAND is optional for --by): what an INCONCLUSIVE threshold exits with
        add_inconclusive_argument(p)
    p.add_argument(
        "--ignore-param",
        action="append",
        default=[],
        metavar="NAME",
        help="leave this parameter out when matching cases, to compare variants (repeatable): init",
    )


def add_inconclusive_argument(p: argparse.ArgumentParser) -> None:
    """``--inconclusive pass|fail|error``: what a threshold the run could not judge exits with (gate, ab)."""
    p.add_argument(
        "--inconclusive",
        choices=("pass", "fail", "error"),
        default="error",
        help="when the interval neither rules out a regression beyond the limit nor shows one: exit 2 with what would "
        "decide it (error, default), exit 0 (pass) or exit 1 (fail); the table says INCONCLUSIVE either way",
    )


def add_all_metrics_argument(p: argparse.ArgumentParser) -> None:
    """``--all-metrics``: show rlbench's own metrics too (compare, ab; publish has its own)."""
    p.add_argument(
        "--all-metrics",
        action="store_true",
        help="also show rlbench's own metrics (profile/..., timer/..., machine/..., iterations, env_steps), hidden by "
        "default; a metric named with --metric is always shown",
    )


def hide_internal(results: list, args: argparse.Namespace) -> tuple[list, str | None]:
    """The compared cases to show: without ``--all-metrics``, those of rlbench's own metrics
    (:func:`rlbench.results.metrics.is_internal`) left out unless named with ``--metric``; and a note naming what was
    hidden (``None`` when nothing was)."""
    from rlbench.results.metrics import is_internal

    if getattr(args, "all_metrics", False):
        return results, None
    named = set(getattr(args, "metric", None) or [])
    shown = [r for r in results if r.case.metric in named or not is_internal(r.case.metric)]
    hidden = sorted({r.case.metric for r in results} - {r.case.metric for r in shown})
    if not hidden:
        return shown, None
    listed = ", ".join(hidden[:4]) + (f" and {len(hidden) - 4} more" if len(hidden) > 4 else "")
    return shown, f"rlbench's own metrics hidden ({listed}): --all-metrics shows them"


def finish_gate(outcome) -> int:
    """The gate's exit code; INCONCLUSIVE checks get their one line on stderr (an error, or a warning when mapped)."""
    from rlbench.core.errors import DataError

    line = outcome.inconclusive_line()
    if line and outcome.verdict != "FAIL":
        if outcome.on_inconclusive == "error":
            raise DataError(line)
        print(f"rlbench: warning: {line} (counted as {outcome.on_inconclusive} by --inconclusive)", file=sys.stderr)
    return outcome.exit_code


def load_side(spec: str, store: str) -> list[Record]:
    """Records of one side: one run or several, comma-separated, merged (cases pool their samples by seed).

    Each part is a records file, a store directory (its latest run) or a run id (unique prefix) in ``store``.

    Raises:
        DataError: If a part names nothing readable, or the same run twice.
    """
    parts = [p for p in spec.split(",") if p.strip()] if "," in spec and not Path(spec).exists() else [spec]
    records: list[Record] = []
    runs: set[str] = set()
    for part in parts:
        found = _load_run(part.strip(), store)
        run = found[0].run_id
        if run in runs:
            raise DataError(f"{spec!r} names run {run} twice; list each run once")
        runs.add(run)
        records += found
    return records


def _load_run(spec: str, store: str) -> list[Record]:
    from rlbench.results.store import read_run

    path = Path(spec)
    if path.exists():
        return read_run(path)
    if not Path(store).is_dir():
        raise DataError(f"{spec!r} is neither a file nor a directory, and there is no store {store!r} to look it up in")
    return read_run(store, spec)


def load_pair(args: argparse.Namespace) -> tuple[list[Record], list[Record], list[str]]:
    """Both sides, plus the notes to print on top; refuses mismatched records unless allowed."""
    from rlbench.analysis.compare import load_check, mismatches

    base, cand = load_side(args.base, args.store), load_side(args.cand, args.store)
    diffs = mismatches(base, cand)
    if diffs and not args.allow_mismatch:
        raise DataError(
            "refusing to compare records that differ in " + "; ".join(diffs) + " (pass --allow-mismatch to compare anyway)"
        )
    notes = [f"MISMATCH (compared anyway, --allow-mismatch): {d}" for d in diffs]
    load = load_check(base, cand).note
    return base, cand, notes + ([load] if load else [])


def compare_command(args: argparse.Namespace) -> int:
    """Compare two runs; print a table, write ``--report``, or print ``--json``."""
    from rlbench.analysis.compare import compare

    if not 0.0 <= args.min_effect < 1.0:
        raise UsageError(f"--min-effect must be a fraction in [0, 1), got {args.min_effect}")
    if args.by:
        return compare_by_command(args)
    if args.cand is None:
        raise UsageError("compare needs BASE and CAND (or one run and --by PARAM, e.g. --by impl)")
    if args.against:
        raise UsageError("--against picks the baseline group of --by; give --by PARAM too")
    report = prepare_output(args.report, "--report")
    base, cand, notes = load_pair(args)
    metrics = args.metric or None
    results = compare(base, cand, min_effect=args.min_effect, metrics=metrics, ignore_params=tuple(args.ignore_param))
    if not results:
        raise DataError("no case (benchmark, parameters, metric) is present on both sides: nothing to compare")
    results, hidden = hide_internal(results, args)
    if not results:
        raise DataError(f"only rlbench's own metrics are present on both sides: {hidden}")
    from rlbench.analysis.compare import DECIDED
    from rlbench.analysis.gate import refuse_if_busy

    refuse_if_busy(base, cand, [r for r in results if r.verdict in DECIDED], args.allow_busy)
    from rlbench.analysis.compare import sample_flags
    from rlbench.analysis.gate import detectable_note

    noise = detectable_note(results)
    notes = notes + sample_flags(results) + ([noise] if noise else [])
    shown = [hidden] if hidden else []
    if args.report:
        from rlbench.report.comparison import comparison_markdown

        write_output(report, comparison_markdown(results, base, cand, notes + shown, args.min_effect), "--report")
    if args.json:
        print(json.dumps({"notes": notes + shown, "cases": [r.to_dict() for r in results], "report": args.report}))
        return 0
    from rich.text import Text

    from rlbench.report.summary import print_comparison

    console = print_comparison(results, base, cand, notes)
    for line in shown:  # a note, not a warning: after the table, dim
        console.print(line, style="dim", markup=False, highlight=False)
    if args.report:
        console.print(Text(f"report: {args.report}"))  # a path is text, never rich markup
    return 0


def split_by(records: list[Record], param: str, against: str | None) -> tuple[str, dict[str, list[Record]]]:
    """One run's records grouped by the value of ``param``: the baseline value and every group.

    Raises:
        UsageError: If no record has ``param``, fewer than two values occur, or ``against`` is not one of them.
    """
    groups: dict[str, list[Record]] = {}
    for r in records:
        if param in r.params:
            groups.setdefault(str(r.params[param]), []).append(r)
    if len(groups) < 2:
        found = ", ".join(groups) or "none"
        raise UsageError(f"--by {param}: the run needs records with at least two values of {param!r} (found: {found})")
    base = against or ("rlbench" if "rlbench" in groups else next(iter(groups)))
    if base not in groups:
        raise UsageError(f"--against {base!r} is not a value of {param!r} in this run; choose from {', '.join(groups)}")
    return base, groups


def compare_by_command(args: argparse.Namespace) -> int:
    """``compare RUN --by PARAM``: every group of one run against the baseline group, case by case."""
    from rlbench.analysis.compare import compare, sample_flags

    if args.cand is not None:
        raise UsageError(f"--by compares the groups of ONE run; drop {args.cand!r} (or drop --by to compare two runs)")
    report = prepare_output(args.report, "--report")
    records = load_side(args.base, args.store)
    base_value, groups = split_by(records, args.by, args.against)
    ignore = (args.by, *args.ignore_param)
    outcome: dict[str, list] = {}
    for value, group in groups.items():
        if value != base_value:
            outcome[value] = compare(
                groups[base_value], group, min_effect=args.min_effect, metrics=args.metric or None, ignore_params=ignore
            )
    if not any(outcome.values()):
        raise DataError(f"no case (metric and parameters other than {args.by}) is present in two groups: nothing to compare")
    everything = [r for results in outcome.values() for r in results]
    _, hidden = hide_internal(everything, args)  # one note for every group
    for value in outcome:
        outcome[value] = hide_internal(outcome[value], args)[0]
    if not any(outcome.values()):
        raise DataError(f"only rlbench's own metrics are present in two groups: {hidden}")
    shown = [hidden] if hidden else []
    if args.report:
        from rlbench.report.comparison import comparison_markdown

        parts = [
            f"<!-- {args.by}={value} against {args.by}={base_value} -->\n"
            + comparison_markdown(results, groups[base_value], groups[value], sample_flags(results) + shown, args.min_effect)
            for value, results in outcome.items()
        ]
        write_output(report, "\n".join(parts), "--report")
    if args.json:
        cases = {v: [r.to_dict() for r in results] for v, results in outcome.items()}
        print(json.dumps({"by": args.by, "baseline": base_value, "groups": cases, "report": args.report}))
        return 0
    from rich.text import Text

    from rlbench.report.summary import print_comparison

    for value, results in outcome.items():
        console = print_comparison(results, groups[base_value], groups[value], [f"{args.by}: {base_value} → {value}"])
    for line in shown:
        console.print(line, style="dim", markup=False, highlight=False)
    if args.report:
        console.print(Text(f"report: {args.report}"))  # a path is text, never rich markup
    return 0


def gate_command(args: argparse.Namespace) -> int:
    """Gate a candidate against a baseline: exit 0 pass, 1 regression, 2 error."""
    from rlbench.analysis.gate import Threshold, evaluate
    from rlbench.report.comparison import gate_markdown

    if not args.fail:
        raise UsageError("no threshold: give at least one --fail METRIC:PERCENT%, e.g. --fail sps:5%")
    thresholds = [Threshold.parse(t) for t in args.fail]
    drop = None if args.no_learning_check else Threshold.parse(f"eval_return:{args.learning_drop}").fraction
    summary = prepare_output(args.summary, "--summary")
    base, cand, notes = load_pair(args)
    outcome = evaluate(
        base,
        cand,
        thresholds,
        learning_drop=drop,
        ignore_params=tuple(args.ignore_param),
        allow_busy=args.allow_busy,
        on_inconclusive=args.inconclusive,
    )
    from rlbench.analysis.compare import sample_flags

    notes = notes + sample_flags([c.result for c in outcome.checks])
    text = gate_markdown(outcome, notes)
    if args.summary:
        write_output(summary, text, "--summary")
    if args.json:
        print(
            json.dumps(
                {
                    "exit_code": outcome.exit_code,
                    "verdict": outcome.verdict,
                    "notes": notes,
                    "checks": [check_dict(c) for c in outcome.checks],
                }
            )
        )
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
    return finish_gate(outcome)


def check_dict(c) -> dict:
    """One gate check as JSON."""
    row = c.result.to_dict()
    row["comparison"] = row.pop("verdict")  # the comparison's words; "verdict" is the gate's PASS/FAIL/INCONCLUSIVE
    return {
        "metric": c.threshold.metric,
        "limit": c.threshold.fraction,
        "verdict": c.verdict,
        "failed": c.failed,
        "reason": c.reason,
        "advice": c.advice,
        **{k: v for k, v in row.items() if k != "metric"},
    }

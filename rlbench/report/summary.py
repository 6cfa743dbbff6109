"""What the report kinds' console summaries share: scalar medians over repeats, leaf phases, the footer naming
where records and report went, and the comparison table of ``rlbench compare``."""

from __future__ import annotations

import math
from typing import Any

from rlbench.analysis.stats import median
from rlbench.results.metrics import BASELINE, PROFILE_SELF_S, TIME, VARIANT, WARMUP
from rlbench.results.records import Record


def scalar_summary(records: list[Record]) -> dict[str, Any]:
    """Median over repeats of each scalar metric of the setting as given (a repeat's value: its samples' mean).

    What-if variants are left out (their report compares them), and so are curves (``x``), per-iteration
    times and diagnostics. A metric with no finite sample is ``None``.
    """
    per_repeat: dict[str, dict[int, float]] = {}
    for r in records:
        if r.params.get(VARIANT, BASELINE) != BASELINE:
            continue
        if r.x is not None or r.metric.startswith(("iter_time/", "diag/")) or r.metric == PROFILE_SELF_S:
            continue  # curves, per-iteration times, diagnostics, pyinstrument's per-frame times
        xs = [v for v in r.samples if isinstance(v, (int, float)) and math.isfinite(v)]
        if xs:
            per_repeat.setdefault(r.metric, {})[r.repeat] = sum(xs) / len(xs)
    out: dict[str, Any] = {}
    for name, by_repeat in per_repeat.items():
        med = median(list(by_repeat.values()))
        out[name] = med if math.isfinite(med) else None
    return out


def console_footer(console: Any, summary: dict[str, Any]) -> None:
    """The two lines after every summary table: where the records and the report went (paths: text, never markup)."""
    from rich.text import Text

    console.print(Text(f"records: {summary['records']}\nreport:  {summary['report']}"))


def where_line(summary: dict[str, Any]) -> str:
    """The one line ``--quiet`` still prints (on stderr): where the report and the records went."""
    return f"rlbench: report written to {summary['report']} (records in {summary['records']})"


def leaf_phase_times(summary: dict[str, Any]) -> list[tuple[str, float]]:
    """``(phase, seconds)`` of the run's leaf phases (no recorded child; warm-up apart), largest first."""
    phases = {k[len(TIME) :]: v for k, v in summary.items() if k.startswith(TIME) and isinstance(v, (int, float))}
    phases.pop(WARMUP, None)
    leaves = [(p, v) for p, v in phases.items() if not any(q.startswith(p + "/") for q in phases)]
    return sorted(leaves, key=lambda pv: -pv[1])


def print_comparison(results: list, base: list, cand: list, notes: list[str]) -> Any:
    """A rich table of compared cases (ratio, 95% CI, verdict coloured); returns the console for further lines."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # run ids, benchmarks, metrics and notes are user text, never rich markup

    from rlbench.report.comparison import fmt_value

    console = Console()
    for n in notes:
        console.print(Text(n, style="bold red"))

    def runs(records: list) -> str:
        return " + ".join(sorted({r.run_id for r in records}))

    table = Table(title=Text(f"{runs(base)} → {runs(cand)}"))
    several = len({r.case.benchmark for r in results}) > 1
    for col in ("Benchmark",) * several + ("Metric", "Baseline", "Candidate", "Ratio", "95% CI", "Verdict"):
        table.add_column(col, justify="left" if col in ("Benchmark", "Metric", "Verdict") else "right")
    colors = {"faster": "green", "better": "green", "slower": "red", "worse": "red"}
    for r in results:
        color = colors.get(r.verdict, "")
        verdict = Text(r.verdict, style=color)
        table.add_row(
            *((Text(r.case.benchmark),) if several else ()),
            Text(r.case.metric),
            fmt_value(r.base_median),
            fmt_value(r.cand_median),
            fmt_value(r.ratio),
            Text(f"[{fmt_value(r.ci_low)}, {fmt_value(r.ci_high)}]"),
            verdict,
        )
    console.print(table)
    return console

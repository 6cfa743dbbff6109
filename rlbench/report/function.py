"""The report of an ``@rlbench.benchmark`` function: per case, the time per call and what the function returned.

A decorated function that times a piece of code (a GAE, a buffer, a kernel) is a micro-benchmark, and its user
expects what pytest-benchmark shows: per case (the benchmark with its parameters), the calls timed, min, median,
max, IQR, mean and calls per second; then the phases it named with ``rlbench.phase`` and the values it returned,
each in its unit (``rlbench.Value``). A function that ran an RL loop (the automatic attribution counted agent steps)
gets the training report instead (:mod:`rlbench.report.training`), with its phases, layers and learning outcome.

Rendered from records alone, so ``rlbench report`` re-renders it identically.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rlbench.analysis.stats import Summary, summarize
from rlbench.report import training
from rlbench.report.charts import Chart
from rlbench.report.format import fmt, fmt_s, md_code, md_table, md_text, provenance
from rlbench.report.profiled import KNOWN, KNOWN_PREFIXES
from rlbench.report.summary import console_footer, scalar_summary
from rlbench.results.metrics import ENV_STEPS, TIME, WALL_S, WARMUP
from rlbench.results.records import Record


def trains(records: list[Record]) -> bool:
    """Whether the function ran an RL loop: the automatic attribution counted agent steps."""
    return any(r.metric == ENV_STEPS and any(math.isfinite(v) and v > 0 for v in r.samples) for r in records)


def _call_s(r: Record) -> float:
    """One repeat's call of the function: its time under the attribution (``meta.run_s``), start-up excluded."""
    run = r.meta.get("run_s")
    return float(run) if isinstance(run, (int, float)) else (r.samples[0] if r.samples else math.nan)


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "seed") or "(none)"


def _value(v: float, unit: str) -> str:
    """A value in its unit: seconds as s, ms or µs; anything else with 4 significant figures."""
    if unit == "s":
        return fmt_s(v)
    if v is None or not math.isfinite(v):
        return "–"
    text = f"{v:,.4g}" if abs(v) < 1e15 else f"{v:.4g}"
    return f"{text} {unit}".rstrip()


def _row(s: Summary, unit: str) -> list[str]:
    iqr = _value(s.iqr, unit) if s.n > 1 else "–"
    return [str(s.n), _value(s.min, unit), _value(s.median, unit), _value(s.max, unit), iqr, _value(s.mean, unit)]


class Case:
    """One case's records: the benchmark with one set of parameters."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.first = records[0]
        self.calls = summarize([_call_s(r) for r in records if r.metric == WALL_S])
        self.phases: dict[str, list[float]] = {}
        self.values: dict[str, list[Record]] = {}
        for r in records:
            if r.metric.startswith(TIME) and r.metric != TIME + WARMUP:
                self.phases.setdefault(r.metric[len(TIME) :], []).extend(r.samples)
            elif r.metric not in KNOWN and not r.metric.startswith(KNOWN_PREFIXES):
                self.values.setdefault(r.metric, []).append(r)

    @property
    def label(self) -> str:
        return f"{md_code(self.first.benchmark)} ({md_text(_params(self.first.params))})"

    def calls_per_s(self) -> float:
        return 1.0 / self.calls.mean if self.calls.n and self.calls.mean > 0 else math.nan


def cases(records: list[Record]) -> list[Case]:
    """The run's cases, in recorded order."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        key = (r.benchmark, json.dumps({k: v for k, v in r.params.items() if k != "seed"}, sort_keys=True, default=str))
        groups.setdefault(key, []).append(r)
    return [Case(recs) for recs in groups.values()]


def render(
    records: list[Record], chart_stem: str | None = None, context: list[Record] | None = None
) -> tuple[str, list[Chart]]:
    """Markdown of a function benchmark's run (the training report if it ran an RL loop), and its charts."""
    if trains(records):
        return training.render(records, chart_stem, context)
    first = records[0]
    runs = cases(records)
    lines = [
        *provenance(first, f"rlbench benchmark report: {md_code(first.benchmark)}"),
        "",
        f"Each repeat calls the function of {md_code(first.benchmark)} once, in rlbench's process, under the automatic "
        "phase attribution; a case's figures are over its calls (`--repeats N` makes N of them). Calls/s is 1 / mean, "
        "as pytest-benchmark's OPS.",
        "",
        "## Time per call",
        "",
        md_table(
            ["Case", "Calls", "Min", "Median", "Max", "IQR", "Mean", "Calls/s"],
            [[c.label, *_row(c.calls, "s"), fmt(c.calls_per_s(), 1)] for c in runs],
        ),
        "",
        "The time per call is the records' `wall_s`: `rlbench gate --fail wall_s:5%` (or `rlbench ab --fail wall_s:5%`) "
        "gates it, as any returned value declared with a better direction.",
    ]
    for c in runs:
        heading = f" of {c.label}" if len(runs) > 1 else ""
        if c.phases:
            rows = []
            for phase, samples in c.phases.items():
                s = summarize(samples)
                share = s.median / c.calls.median if c.calls.n and c.calls.median > 0 else math.nan
                rows.append([md_code(phase), *_row(s, "s")[1:5], f"{100 * share:.1f}%" if math.isfinite(share) else "–"])
            lines += [
                "",
                f"## Phases{heading}",
                "",
                "The phases the function named with `rlbench.phase` (and those the attribution found), per call.",
                "",
                md_table(["Phase", "Min", "Median", "Max", "IQR", "Share of the call (medians)"], rows),
            ]
        if c.values:
            rows, undeclared = [], []
            for name, recs in c.values.items():
                r = recs[0]
                s = summarize([v for x in recs for v in x.samples])
                better = {"lower": "lower", "higher": "higher"}.get(r.direction, "– (not gated)")
                rows.append([md_code(name), md_text(r.unit or "–"), better, *_row(s, r.unit)])
                if r.direction not in ("lower", "higher"):
                    undeclared.append(name)
            lines += [
                "",
                f"## Returned values{heading}",
                "",
                md_table(["Value", "Unit", "Better", "Samples", "Min", "Median", "Max", "IQR", "Mean"], rows),
            ]
            if undeclared:
                lines += [
                    "",
                    f"{', '.join(md_code(n) for n in undeclared)} came without a unit or a better direction, so "
                    f"`rlbench gate` and `ab` cannot judge {'it' if len(undeclared) == 1 else 'them'}: return "
                    '`rlbench.Value(x, unit="s", direction="lower")` to declare one.',
                ]
    return "\n".join(lines) + "\n", []


def summary(records: list[Record]) -> dict[str, Any]:
    """The headline figures (what ``--json`` prints): every scalar metric's median over repeats, and per case the time
    per call (``cases``: parameters, calls, min, median, max, IQR, mean in seconds, calls per second)."""
    out = scalar_summary(records)
    if trains(records):
        return out

    def finite(v: float) -> float | None:
        return v if math.isfinite(v) else None

    out["cases"] = [
        {
            "params": {k: v for k, v in c.first.params.items() if k != "seed"},
            "calls": c.calls.n,
            **{
                f"{k}_s": finite(getattr(c.calls, k)) if k != "iqr" or c.calls.n > 1 else None
                for k in ("min", "median", "max", "iqr", "mean")
            },
            "calls_per_s": finite(c.calls_per_s()),
            "values": {name: {"unit": recs[0].unit, "direction": recs[0].direction} for name, recs in c.values.items()},
        }
        for c in cases(records)
    ]
    return out


def print_summary(summary: dict[str, Any]) -> None:
    """The console table: per case its time per call, then each returned value's median (the training table for a
    function that ran an RL loop)."""
    if "cases" not in summary:
        training.print_summary(summary)
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # parameters and value names are user text, never rich markup

    table = Table(title=Text(f"{summary['benchmark']} ({summary['repeats']} call(s) per case)"))
    for col in ("Case", "Calls", "Min", "Median", "Max", "IQR", "Calls/s"):
        table.add_column(col, justify="left" if col == "Case" else "right")
    for c in summary["cases"]:
        table.add_row(
            Text(_params(c["params"])),
            str(c["calls"]),
            *(fmt_s(c[f"{k}_s"]) for k in ("min", "median", "max", "iqr")),
            fmt(c["calls_per_s"], 1),
        )
    console = Console()
    console.print(table)
    names = sorted({n for c in summary["cases"] for n in c["values"]})
    if names:
        values = Table(title="Returned values (medians)")
        for col in ("Value", "Median", "Better"):
            values.add_column(col, justify="right" if col == "Median" else "left")
        for name in names:
            unit = next(c["values"][name]["unit"] for c in summary["cases"] if name in c["values"])
            direction = next(c["values"][name]["direction"] for c in summary["cases"] if name in c["values"])
            shown = _value(summary.get(name), unit)
            values.add_row(Text(name), Text(shown), direction if direction != "none" else "–")
        console.print(values)
    console_footer(console, summary)

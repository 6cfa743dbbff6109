"""The micro-benchmark report: per group, implementations x sizes, speed-ups, the fastest marked, scaling plots.

Rendered from records alone (metric ``time/call``, case parameters ``group``, ``impl``, ``size``,
``op``), so ``rlbench report`` re-renders it identically.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from rlbench.analysis.stats import median, summarize
from rlbench.report.format import fmt_s, md_code, md_dest, md_table, md_text, provenance
from rlbench.report.summary import console_footer
from rlbench.results.metrics import LEGACY_TIME_CALL, TIME_CALL
from rlbench.results.records import Record

REFERENCE = "reference"


@dataclass
class Line:
    """One implementation's median time over a group's sizes, for a log-log scaling plot."""

    label: str
    x: list[float]
    y: list[float]


@dataclass
class ScalingChart:
    """A log-log chart of median time against problem size, one line per implementation."""

    suffix: str
    title: str
    lines: list[Line]
    xlabel: str = "problem size (elements)"
    ylabel: str = "median time per call (µs)"


def _us(v: float) -> str:
    if not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _header(first: Record, run_id: str) -> list[str]:
    return [
        *provenance(first, "rlbench micro-benchmark report", run_id, ("numba",)),
        "",
        "Times are per call, medians of the timed rounds (pytest-benchmark rounds for the micro suites; IQR beside "
        "them). Speed-up is the reference's median "
        "over the implementation's at the same size; ★ marks the fastest at each size."
        + (
            f" The benchmarks ran in a subprocess with {first.params['threads']} torch/OpenMP intra-op thread(s) "
            "(`--threads`); the table above gives the CLI process's own setting."
            if "threads" in first.params
            else ""
        ),
    ]


def _against_peers(stats: dict[str, dict[str, Any]], sizes: list[str], peers: set[str]) -> list[str]:
    """Rows: each other library's time over rlbench's fastest implementation at each size (same run, same process)."""
    present = sorted(p for p in peers if p in stats)
    ours = [i for i in stats if i not in peers and i != REFERENCE]
    if not present or not ours:
        return []
    rows = []
    for peer in present:
        row = [f"{md_code(peer)}"]
        for s in sizes:
            mine = [(stats[i][s].median, i) for i in ours if s in stats[i] and stats[i][s].n]
            theirs = stats[peer].get(s)
            if not mine or theirs is None or not theirs.n:
                row.append("–")
                continue
            best, name = min(mine)
            ratio = theirs.median / best if best > 0 else math.nan
            if not math.isfinite(ratio) or ratio <= 0:
                row.append("–")
            elif ratio >= 1:
                row.append(f"{md_code(name)} {ratio:.1f}× faster" if ratio >= 1.05 else f"{md_code(name)} {ratio:.2f}× faster")
            else:
                row.append(f"{md_code(name)} {1 / ratio:.2f}× **slower**")
        rows.append(row)
    return [
        "",
        "Other libraries, timed in the same process and run (on inputs in their own layout): rlbench's fastest "
        "implementation against each.",
        "",
        md_table(["Library", *sizes], rows),
    ]


def render(records: list[Record], chart_stem: str | None = None, context: Any = None) -> tuple[str, list[ScalingChart]]:
    """Markdown of a micro-benchmark run and its scaling charts (one per group and operation)."""
    cells: dict[tuple[str, str], dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    elements: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    peers = {str(r.params.get("impl")) for r in records if r.meta.get("peer")}
    for r in records:
        if r.metric not in (TIME_CALL, LEGACY_TIME_CALL):
            continue
        group = str(r.params.get("group") or r.benchmark)
        op = str(r.params.get("op") or "call")
        size, impl = str(r.params.get("size")), str(r.params.get("impl"))
        cells[(group, op)][impl].setdefault(size, []).extend(r.samples)
        n = r.meta.get("elements")
        if isinstance(n, (int, float)):
            elements[(group, op)][size] = float(n)
    lines = _header(records[0], records[0].run_id)
    all_notes = sorted({str(n) for r in records for n in (r.meta.get("notes") or [])})
    failed = [n for n in all_notes if " failed: " in n]
    notes = [n for n in all_notes if n not in failed]
    if notes:
        lines += [
            "",
            "Device matrix: torch variants run on every available device (rows `impl@device`; CPU rows unsuffixed). "
            "Not measured here: " + "; ".join(notes) + ".",
        ]
    if failed:
        lines += ["", "**Failed, not timed** (the other implementations' timings stand):", ""]
        lines += [f"- {md_code(n.partition(' failed: ')[0])}: {n.partition(' failed: ')[2]}" for n in failed]
    charts = []
    for (group, op), by_impl in sorted(cells.items()):
        sizes = sorted({s for per in by_impl.values() for s in per}, key=lambda s: (elements[(group, op)].get(s, math.inf), s))
        stats = {impl: {s: summarize(v) for s, v in per.items()} for impl, per in by_impl.items()}
        fastest = {s: min((st[s].median, impl) for impl, st in stats.items() if s in st)[1] for s in sizes}
        rows = []
        for impl in sorted(stats, key=lambda i: (i != REFERENCE, i)):
            row = [f"{md_code(impl)}"]
            for s in sizes:
                st = stats[impl].get(s)
                if st is None or st.n == 0:
                    row.append("–")
                    continue
                ref = stats.get(REFERENCE, {}).get(s)
                speedup = f", {ref.median / st.median:.1f}×" if ref is not None and ref.n and impl != REFERENCE else ""
                star = " ★" if fastest[s] == impl else ""
                row.append(f"{_us(st.median * 1e6)} µs (IQR {_us(st.iqr * 1e6)}{speedup}){star}")
            rows.append(row)
        title = group if op == "call" else f"{group}: {op}"
        lines += ["", f"## {md_text(title)}", "", md_table(["Implementation", *sizes], rows)]
        lines += _against_peers(stats, sizes, peers)
        if chart_stem is not None and any(s in elements[(group, op)] for s in sizes):
            suffix = f"-{group}-{op}.png".replace("/", "_").replace(" ", "-")
            chart_lines = []
            for impl, st in sorted(stats.items()):
                pts = [(elements[(group, op)][s], st[s].median * 1e6) for s in sizes if s in st and s in elements[(group, op)]]
                if pts:
                    chart_lines.append(Line(impl, [p[0] for p in pts], [p[1] for p in pts]))
            charts.append(ScalingChart(suffix, f"{title}: time per call vs size", chart_lines))
            lines += ["", f"![{md_text(title)} scaling]({md_dest(chart_stem + suffix)})"]
    return "\n".join(lines) + "\n", charts


def summary(records: list[Record]) -> dict[str, Any]:
    """Median seconds per call of every (group, op, size, impl) case, pooled over repeats."""
    pooled: dict[tuple[str, ...], list[float]] = {}
    for r in records:
        if r.metric not in (TIME_CALL, LEGACY_TIME_CALL):
            continue
        p = r.params
        key = (str(p.get("group")), str(p.get("op", "call")), str(p.get("size")), str(p.get("impl")))
        pooled.setdefault(key, []).extend(v for v in r.samples if math.isfinite(v))
    cases = [{"group": g, "op": o, "size": s, "impl": i, "median_s": median(v)} for (g, o, s, i), v in pooled.items() if v]
    return {"cases": cases}


def print_summary(summary: dict[str, Any]) -> None:
    """Per group and size, the fastest implementation and its median time."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # names and values from records are user text, never rich markup

    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for c in summary["cases"]:
        key = (c["group"], c["op"], c["size"])
        if key not in best or c["median_s"] < best[key]["median_s"]:
            best[key] = c
    table = Table(title=Text(f"{summary['benchmark']}: fastest implementation per size (medians)"))
    for col in ("Group", "Size", "Fastest", "Median per call"):
        table.add_column(col, justify="right" if col == "Median per call" else "left")
    for (group, op, size), c in sorted(best.items()):
        table.add_row(
            Text(group if op == "call" else f"{group} {op}"), Text(str(size)), Text(str(c["impl"])), fmt_s(c["median_s"])
        )
    console = Console()
    console.print(table)
    console_footer(console, summary)

"""The roofline report: an update's phases against this machine's matmul rate, bandwidth and dispatch floor.

Rendered from the records of ``rlbench run update-roofline`` alone (metrics ``roofline/...``), so ``rlbench report``
re-renders it identically. Repeats are pooled by median.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from rlbench.analysis.stats import median, summarize
from rlbench.report.format import finite, fmt, md_code, md_table, provenance
from rlbench.report.summary import console_footer
from rlbench.results.records import Record

UNSTEADY = 0.2
"""Repeats whose median update times differ by more than this fraction of the lowest flag the run as unsteady."""


def _med(records: list[Record], metric: str) -> float:
    xs = [v for r in records if r.metric == metric for v in r.samples if math.isfinite(v)]
    return median(xs) if xs else math.nan


def verdict(seconds: float, achievable_s: float, dispatch_s: float, memory_s: float = 0.0) -> str:
    """Which lower bound explains most of a phase's time: its products at the achievable rate, its ops at the
    dispatch floor, or its bytes at the copy bandwidth."""
    if not seconds > 0:
        return "–"
    shares = {"compute-bound": achievable_s, "dispatch-bound": dispatch_s, "memory-bound": memory_s}
    name, value = max(shares.items(), key=lambda kv: kv[1] if math.isfinite(kv[1]) else -1.0)
    return name if value / seconds >= 0.1 else "none of the three (Python, other)"


def summary(records: list[Record]) -> dict[str, Any]:
    """What ``rlbench run update-roofline --json`` prints: the machine's limits and each phase, medians over repeats."""
    pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
    metas: dict[str, dict[str, Any]] = {}
    for r in records:
        phase = str(r.params.get("phase"))
        pooled[(r.metric, phase)].extend(v for v in r.samples if math.isfinite(v))
        if r.metric == "roofline/phase_s":
            metas.setdefault(phase, r.meta)
    med = {k: median(v) if v else math.nan for k, v in pooled.items()}
    limits = ("peak_gflops", "peak_gflops_bf16", "memory_gbps", "cache_gbps", "dispatch_us")
    machine = {k: med[(f"roofline/{k}", "machine")] for k in limits if (f"roofline/{k}", "machine") in med}
    phases = []
    for phase, meta in metas.items():
        secs = med[("roofline/phase_s", phase)]
        flops = float(meta.get("flops", 0.0))
        bound = verdict(secs, meta.get("achievable_s", 0.0), meta.get("dispatch_floor_s", 0.0), meta.get("memory_s", 0.0))
        phases.append(
            {
                "phase": phase,
                "ms": secs * 1e3,
                "ops": int(meta.get("ops", 0)),
                "mflop": flops / 1e6,
                "achieved_gflops": flops / secs / 1e9 if secs > 0 else None,
                "bound": bound,
            }
        )
    update_ms = med.get(("roofline/update_s", "update"), math.nan) * 1e3
    return finite({"machine": machine, "update_ms": update_ms, "phases": phases})


def spread_line(records: list[Record]) -> str:
    """The update time's spread: each repeat's median, the quartiles of all updates, and a warning when the
    repeats disagree by more than :data:`UNSTEADY` (the machine's speed moved during the run)."""
    per_repeat: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.metric == "roofline/update_s":
            per_repeat[r.repeat].extend(r.samples)
    medians = [m for _, v in sorted(per_repeat.items()) if math.isfinite(m := median(v))]
    if not medians:
        return ""
    s = summarize([v for xs in per_repeat.values() for v in xs])
    text = (
        f"Per repeat, median {', '.join(fmt(m * 1e3, 3) for m in medians)} ms; quartiles of all "
        f"{s.n:,} timed updates {fmt(s.q1 * 1e3, 3)}–{fmt(s.q3 * 1e3, 3)} ms."
    )
    if len(medians) > 1 and max(medians) > (1.0 + UNSTEADY) * min(medians):
        text += (
            f" **Unsteady machine:** the repeats' medians differ by {100 * (max(medians) / min(medians) - 1):.0f}%, so"
            " this machine's speed moved during the run; compare updates only side by side in one run (`rlbench ab`,"
            " `--what-if`)."
        )
    return text


def render(records: list[Record], chart_stem: str | None = None, context: Any = None) -> tuple[str, list[Any]]:
    """Markdown of one roofline run."""
    first = records[0]
    p = first.params
    peak, peak_bf16, bw, cache_bw, floor_us = (
        _med(records, f"roofline/{m}") for m in ("peak_gflops", "peak_gflops_bf16", "memory_gbps", "cache_gbps", "dispatch_us")
    )
    cache_row = [
        "Cache bandwidth",
        f"{fmt(cache_bw, 1)} GB/s",
        "1 MiB `copy_` (a 2 MiB working set); ops whose tensors total at most 4 MiB are priced at it",
    ]
    total = _med(records, "roofline/update_s")
    precision = next((r.meta.get("precision") for r in records if r.metric == "roofline/update_s"), None)
    how = "1024×1024×1024 `torch.mm`, median of rounds"
    bf16_row = ["Achievable bf16 matmul rate", f"{fmt(peak_bf16, 1)} GFLOP/s", f"bf16 {how}"]
    lines = [
        *provenance(first, f"rlbench roofline report: the {str(p.get('algo', '')).upper()} update against this machine"),
        "",
        f"Update: batch {p.get('batch_size')}, hidden {'x'.join(map(str, p.get('hidden') or []))}, critics "
        f"{md_code(p.get('critics'))}, gradients {md_code(p.get('gradients'))}, {p.get('threads')} threads, "
        f"on {md_code(first.device)}; "
        f"{p.get('updates')} timed updates after {p.get('warmup')}."
        + (
            f" Matrix products in {md_code(precision)} (precision {md_code(p.get('precision'))}): "
            "each product is priced at this "
            "machine's rate for its own dtype."
            if precision
            else ""
        ),
        "",
        "## This machine's limits (measured in this run)",
        "",
        md_table(
            ["Limit", "Value", "How"],
            [
                ["Achievable matmul rate", f"{fmt(peak, 1)} GFLOP/s", f"fp32 {how}"],
                *([bf16_row] if math.isfinite(peak_bf16) else []),
                ["Memory bandwidth", f"{fmt(bw, 1)} GB/s", "256 MiB `copy_`, bytes read + written"],
                *([cache_row] if math.isfinite(cache_bw) else []),
                ["Dispatch floor", f"{fmt(floor_us, 2)} µs per op", "one-element `torch.add(out=)`"],
            ],
        ),
    ]
    phases: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if r.metric == "roofline/phase_s":
            phases[str(r.params.get("phase"))].append(r)
    rows, sums = [], {"secs": 0.0, "flops": 0.0, "ach": 0.0, "disp": 0.0, "mem": 0.0, "ops": 0}
    for name, recs in phases.items():
        secs = median([v for r in recs for v in r.samples])
        meta = recs[0].meta
        flops, ops = float(meta.get("flops", 0.0)), int(meta.get("ops", 0))
        ach, disp = float(meta.get("achievable_s", 0.0)), float(meta.get("dispatch_floor_s", 0.0))
        mem = float(meta.get("memory_s", 0.0))
        achieved = flops / secs / 1e9 if secs > 0 else math.nan
        at_shapes = flops / ach / 1e9 if ach > 0 else math.nan
        rows.append(
            [
                f"{md_code(name)}",
                fmt(secs * 1e3, 3),
                str(ops),
                fmt(flops / 1e6, 2),
                fmt(achieved, 2),
                fmt(at_shapes, 1) if ach > 0 else "–",
                f"{100 * ach / secs:.1f}%" if secs > 0 and ach > 0 else "–",
                f"{100 * disp / secs:.0f}%" if secs > 0 else "–",
                f"{100 * mem / secs:.0f}%" if secs > 0 else "–",
                verdict(secs, ach, disp, mem),
            ]
        )
        sums["mem"] += mem
        sums["secs"] += secs
        sums["flops"] += flops
        sums["ach"] += ach
        sums["disp"] += disp
        sums["ops"] += ops
    s = sums
    rows.append(
        [
            "**all phases**",
            fmt(s["secs"] * 1e3, 3),
            str(s["ops"]),
            fmt(s["flops"] / 1e6, 2),
            fmt(s["flops"] / s["secs"] / 1e9, 2) if s["secs"] > 0 else "–",
            fmt(s["flops"] / s["ach"] / 1e9, 1) if s["ach"] > 0 else "–",
            f"{100 * s['ach'] / s['secs']:.1f}%" if s["secs"] > 0 else "–",
            f"{100 * s['disp'] / s['secs']:.0f}%" if s["secs"] > 0 else "–",
            f"{100 * s['mem'] / s['secs']:.0f}%" if s["secs"] > 0 else "–",
            verdict(s["secs"], s["ach"], s["disp"], s["mem"]),
        ]
    )
    spread = spread_line(records)
    lines += [
        "",
        "## Each phase against them",
        "",
        f"Median time per update {fmt(total * 1e3, 3)} ms. *Achieved* is the phase's matmul FLOPs over its measured "
        "time; *at its shapes* is the rate this machine reaches on the phase's own matrix products timed alone; "
        "*compute share* is the time those products need at that rate over the measured time; *dispatch share* is the "
        "phase's ops at the dispatch floor over it; *memory share* is the bytes its ops read and write at the copy "
        "bandwidth of their size over it (an op's tensors that fit the caches at the cache bandwidth, larger ones at "
        "the DRAM rate). Each is a lower bound on the time; "
        "the largest names the bound, and what none explains is Python and everything else.",
        "",
        *([spread, ""] if spread else []),
        md_table(
            [
                "Phase",
                "ms",
                "ops",
                "MFLOP",
                "achieved GFLOP/s",
                "GFLOP/s at its shapes",
                "compute share",
                "dispatch share",
                "memory share",
                "bound",
            ],
            rows,
        ),
    ]
    shapes: dict[str, int] = defaultdict(int)
    rates: dict[str, float] = {}
    for recs in phases.values():
        for k, n in (recs[0].meta.get("matmuls") or {}).items():
            shapes[k] += int(n)
        rates.update(recs[0].meta.get("rates_gflops") or {})
    if shapes:
        lines += [
            "",
            "Matrix products of one update (kind, b×m×k×n with b = 0 for a plain product, dtype) and this machine's rate "
            "on each shape and dtype alone:",
            "",
            md_table(
                ["Product", "Per update", "GFLOP/s alone"],
                [
                    [f"{md_code(k)}", str(n), fmt(rates.get(k.split(" ", 1)[1], math.nan), 1)]
                    for k, n in sorted(shapes.items())
                ],
            ),
        ]
    return "\n".join(lines) + "\n", []  # no charts


def print_summary(summary: dict[str, Any]) -> None:
    """The machine's limits, then each update phase: time, achieved GFLOP/s and its bound."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # names and values from records are user text, never rich markup

    m = summary.get("machine", {})
    table = Table(
        title=Text(
            f"{summary['benchmark']}: {fmt(m.get('peak_gflops'), 1)} GFLOP/s achievable, "
            f"{fmt(m.get('memory_gbps'), 1)} GB/s, {fmt(m.get('dispatch_us'), 2)} µs per op (medians)"
        )
    )
    for col in ("Phase", "ms", "Achieved GFLOP/s", "Bound"):
        table.add_column(col, justify="left" if col in ("Phase", "Bound") else "right")
    for ph in summary.get("phases", []):
        table.add_row(Text(str(ph["phase"])), fmt(ph["ms"], 3), fmt(ph["achieved_gflops"], 1), Text(str(ph["bound"])))
    console = Console()
    console.print(table)
    console_footer(console, summary)

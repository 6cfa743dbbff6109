"""The table printed after ``rlbench run``."""

from __future__ import annotations

from typing import Any

from rlbench.metrics import EVAL_RETURN, INIT_S, SPS, SPS_STEADY, TIME, TRAIN_S, WARMUP, WARMUP_S
from rlbench.report.format import fmt, fmt_s


def leaf_phase_times(summary: dict[str, Any]) -> list[tuple[str, float]]:
    """``(phase, seconds)`` of the run's leaf phases (no recorded child; warm-up apart), largest first."""
    phases = {k[len(TIME) :]: v for k, v in summary.items() if k.startswith(TIME) and isinstance(v, (int, float))}
    phases.pop(WARMUP, None)
    leaves = [(p, v) for p, v in phases.items() if not any(q.startswith(p + "/") for q in phases)]
    return sorted(leaves, key=lambda pv: -pv[1])


def print_summary(summary: dict[str, Any]) -> None:
    """Print the run's headline figures (medians over repeats) and where records and report went."""
    from rich.console import Console
    from rich.table import Table

    def get(key: str) -> float | None:
        return summary.get(key)

    table = Table(title=f"{summary['benchmark']} on {summary['device']} ({summary['repeats']} repeat(s), medians)")
    table.add_column("Metric")
    table.add_column("Value", justify="right")
    table.add_row("Training SPS (agent steps/s)", fmt(get(SPS), 0))
    table.add_row("Steady-state SPS", fmt(get(SPS_STEADY), 0))
    table.add_row("Training time", fmt_s(get(TRAIN_S)))
    table.add_row("Init / warm-up", f"{fmt_s(get(INIT_S))} / {fmt_s(get(WARMUP_S))}")
    table.add_row("Eval return (deterministic)", fmt(get(EVAL_RETURN), 1))
    steady = (get(TRAIN_S) or 0.0) - (get(WARMUP_S) or 0.0)
    for phase, seconds in leaf_phase_times(summary)[:8]:  # whatever the run timed, largest first
        if steady > 0 and seconds >= 0.01 * steady:
            table.add_row(f"  {phase}", f"{fmt_s(seconds)}  ({100 * seconds / steady:.1f}%)")
    table.add_row("Wall, CLI start to report written", fmt_s(get("cli_wall_s")))
    console = Console()
    console.print(table)
    console.print(f"records: {summary['records']}\nreport:  {summary['report']}")


def print_micro_summary(summary: dict[str, Any]) -> None:
    """Per group and size, the fastest implementation and its median time."""
    from rich.console import Console
    from rich.table import Table

    best: dict[tuple[str, str, str], dict[str, Any]] = {}
    for c in summary["cases"]:
        key = (c["group"], c["op"], c["size"])
        if key not in best or c["median_s"] < best[key]["median_s"]:
            best[key] = c
    table = Table(title=f"{summary['benchmark']}: fastest implementation per size (medians)")
    for col in ("Group", "Size", "Fastest", "Median per call"):
        table.add_column(col, justify="right" if col == "Median per call" else "left")
    for (group, op, size), c in sorted(best.items()):
        table.add_row(group if op == "call" else f"{group} {op}", size, c["impl"], fmt_s(c["median_s"]))
    console = Console()
    console.print(table)
    console.print(f"records: {summary['records']}\nreport:  {summary['report']}")


def print_roofline_summary(summary: dict[str, Any]) -> None:
    """The machine's limits, then each update phase: time, achieved GFLOP/s and its bound."""
    from rich.console import Console
    from rich.table import Table

    m = summary.get("machine", {})
    table = Table(
        title=f"{summary['benchmark']}: {fmt(m.get('peak_gflops'), 1)} GFLOP/s achievable, "
        f"{fmt(m.get('memory_gbps'), 1)} GB/s, {fmt(m.get('dispatch_us'), 2)} µs per op (medians)"
    )
    for col in ("Phase", "ms", "Achieved GFLOP/s", "Bound"):
        table.add_column(col, justify="left" if col in ("Phase", "Bound") else "right")
    for ph in summary.get("phases", []):
        table.add_row(ph["phase"], fmt(ph["ms"], 3), fmt(ph["achieved_gflops"], 1), ph["bound"])
    console = Console()
    console.print(table)
    console.print(f"records: {summary['records']}\nreport:  {summary['report']}")


def print_pipeline_summary(summary: dict[str, Any]) -> None:
    """Throughput, each stage's capacity (the lowest bounds the pipeline), weight sync, lag and learning."""
    from rich.console import Console
    from rich.table import Table

    def get(key: str) -> float | None:
        v = summary.get(key)
        return v if isinstance(v, (int, float)) else None

    caps = {s: get(f"pipeline/capacity/{s}") for s in ("generators", "scorer", "learner")}
    known = {s: v for s, v in caps.items() if v is not None}
    bound = min(known, key=lambda s: known[s]) if known else "–"
    table = Table(title=f"{summary['benchmark']} ({summary['repeats']} repeat(s), baseline medians)")
    table.add_column("Metric")
    table.add_column("Value", justify="right")
    rows = [
        ("Samples/s reached", fmt(get("pipeline/samples_per_s"), 0)),
        ("Learner updates/s", fmt(get("pipeline/updates_per_s"), 1)),
        ("Slices generated/s", fmt(get("pipeline/trajectories_per_s"), 1)),
        *((f"Capacity: {s} (samples/s)", fmt(v, 0)) for s, v in caps.items()),
        ("Bounding stage", bound),
        ("Weight sync, mean latency", fmt_s(get("pipeline/weight_sync_s"))),
        ("Policy lag, mean (versions)", fmt(get("pipeline/policy_lag"), 2)),
        ("Greedy reward after training", fmt(get("pipeline/greedy_reward"), 3)),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console = Console()
    console.print(table)
    console.print(f"records: {summary['records']}\nreport:  {summary['report']}")


def print_transports_summary(summary: dict[str, Any]) -> None:
    """Per model, env step time and actor count: the fastest transport, its requests/s and p99 latency."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['benchmark']}: fastest transport per case")
    for col in ("Model", "Env step µs", "Actors", "Fastest", "Requests/s", "p99 ms"):
        table.add_column(col, justify="left" if col in ("Model", "Fastest") else "right")
    for c in summary["cases"]:
        table.add_row(
            c["model"], str(c["env_us"]), str(c["actors"]), c["transport"], fmt(c["requests_per_s"], 0), fmt(c["p99_ms"], 2)
        )
    console = Console()
    console.print(table)
    console.print(f"records: {summary['records']}\nreport:  {summary['report']}")


def print_peers_summary(summary: dict[str, Any]) -> None:
    """Per implementation: SPS, rlbench's speed-up over it with its interval, and whether it learned."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['benchmark']}: {summary['algo']}, seeds interleaved")
    for col in ("Implementation", "SPS", "rlbench ÷ this", "95% CI", "Eval return", "Learned"):
        table.add_column(col, justify="left" if col == "Implementation" else "right")
    for r in summary["impls"]:
        ci = f"{fmt(r['ratio_low'], 2)} – {fmt(r['ratio_high'], 2)}" if r["ratio"] is not None else "–"
        table.add_row(
            r["impl"],
            fmt(r["sps"], 0),
            f"{fmt(r['ratio'], 2)}×" if r["ratio"] is not None else "–",
            ci,
            fmt(r["eval_return"], 1),
            "yes" if r["learned"] else "[red]no[/]",
        )
    console = Console()
    console.print(table)
    for f in summary["flags"]:
        console.print(f"[bold red]{f}[/]")
    console.print(f"records: {summary['records']}\nreport:  {summary['report']}")


def print_comparison(results: list, base: list, cand: list, notes: list[str]) -> Any:
    """A rich table of compared cases (ratio, 95% CI, verdict coloured); returns the console for further lines."""
    from rich.console import Console
    from rich.table import Table

    from rlbench.report.comparison import fmt_value

    console = Console()
    for n in notes:
        console.print(f"[bold red]{n}[/]")

    def runs(records: list) -> str:
        return " + ".join(sorted({r.run_id for r in records}))

    table = Table(title=f"{runs(base)} → {runs(cand)}")
    several = len({r.case.benchmark for r in results}) > 1
    for col in ("Benchmark",) * several + ("Metric", "Baseline", "Candidate", "Ratio", "95% CI", "Verdict"):
        table.add_column(col, justify="left" if col in ("Benchmark", "Metric", "Verdict") else "right")
    colors = {"faster": "green", "better": "green", "slower": "red", "worse": "red"}
    for r in results:
        color = colors.get(r.verdict, "")
        verdict = f"[{color}]{r.verdict}[/]" if color else r.verdict
        table.add_row(
            *((r.case.benchmark,) if several else ()),
            r.case.metric,
            fmt_value(r.base_median),
            fmt_value(r.cand_median),
            fmt_value(r.ratio),
            f"[{fmt_value(r.ci_low)}, {fmt_value(r.ci_high)}]",
            verdict,
        )
    console.print(table)
    return console

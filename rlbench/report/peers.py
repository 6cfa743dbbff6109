"""The peers report: rlbench's PPO or SAC beside other libraries', measured in one run, seed by seed.

Rendered from the records of ``rlbench run peers`` alone (each carries ``impl`` among its parameters), so
``rlbench report`` re-renders it identically. SPS ratios are rlbench's median over a peer's, with a percentile
bootstrap interval over the seeds; phase shares come from rlbench's timers and, for the peers, from the automatic
attribution of an extra, untimed pass.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from rlbench.analysis.compare import bootstrap_ratio
from rlbench.analysis.stats import median
from rlbench.report.format import finite, fmt, fmt_s, md_table, pct, provenance
from rlbench.report.summary import console_footer
from rlbench.results.metrics import (
    ENV_STEPS,
    EVAL_RETURN,
    INIT_S,
    LAYERS,
    PEER_ERROR,
    PEER_PHASE_WALL_S,
    PROFILE_OVERHEAD_S,
    SPS,
    STEPS_TO_THRESHOLD,
    THRESHOLD_REACHED,
    TIME_TO_THRESHOLD_S,
)
from rlbench.results.records import Record

BASE = "rlbench"


def _by_impl(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if "impl" in r.params:
            out[str(r.params["impl"])].append(r)
    return out


def _per_seed(records: list[Record], metric: str) -> dict[int, float]:
    """One value per seed: the median of that seed's samples."""
    out: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.metric == metric:
            out[r.seed if r.seed is not None else -1].extend(v for v in r.samples if math.isfinite(v))
    return {s: median(v) for s, v in out.items() if v}


def layer_shares(records: list[Record]) -> dict[str, float]:
    """Share of the training wall per layer, median over the seeds that measured phases (self time of each phase)."""
    per_seed: dict[int, dict[str, float]] = defaultdict(dict)
    walls: dict[int, float] = {}
    layers: dict[str, str] = {}
    for r in records:
        seed = r.seed if r.seed is not None else -1
        if r.metric == PEER_PHASE_WALL_S:
            walls[seed] = r.samples[0]
        elif r.metric.startswith("time/") and "source" in r.meta:
            phase = r.metric[len("time/") :]
            per_seed[seed][phase] = r.samples[0]
            layers[phase] = str(r.meta.get("layer", "other"))
    shares: dict[str, list[float]] = defaultdict(list)
    for seed, phases in per_seed.items():
        wall = walls.get(seed, math.nan)
        if not wall > 0:
            continue
        by_layer: dict[str, float] = defaultdict(float)
        for phase, secs in phases.items():
            children = sum(s for p, s in phases.items() if p.rsplit("/", 1)[0] == phase and "/" in p)
            by_layer[layers[phase]] += max(0.0, secs - children)
        top = sum(s for p, s in phases.items() if "/" not in p)
        by_layer["other"] += max(0.0, wall - top)
        for layer, secs in by_layer.items():
            shares[layer].append(secs / wall)
    return {layer: median(v) for layer, v in shares.items()}


def rows(records: list[Record]) -> list[dict[str, Any]]:
    """One summary row per implementation, rlbench first: SPS, ratio with its interval, learning, threshold."""
    groups = _by_impl(records)
    base_sps = np.array(list(_per_seed(groups.get(BASE, []), SPS).values()))
    out = []
    for impl in sorted(groups, key=lambda i: (i != BASE, i)):
        rs = groups[impl]
        sps = _per_seed(rs, SPS)
        evals = _per_seed(rs, EVAL_RETURN)
        first = next((r for r in rs if r.metric == SPS), None)
        ratio = (math.nan, math.nan, math.nan)
        if impl != BASE and base_sps.size and sps:
            ratio = bootstrap_ratio(np.array(list(sps.values())), base_sps)
        reached = _per_seed(rs, THRESHOLD_REACHED)
        out.append(
            {
                "impl": impl,
                "library": first.meta.get("library", impl) if first else impl,
                "seeds": len(sps),
                "sps": median(list(sps.values())) if sps else math.nan,
                "sps_min": min(sps.values()) if sps else math.nan,
                "sps_max": max(sps.values()) if sps else math.nan,
                "ratio": ratio[0],
                "ratio_low": ratio[1],
                "ratio_high": ratio[2],
                "env_steps": median(list(_per_seed(rs, ENV_STEPS).values()) or [math.nan]),
                "init_s": median(list(_per_seed(rs, INIT_S).values()) or [math.nan]),
                "eval_return": median(list(evals.values())) if evals else math.nan,
                "eval_per_seed": [evals[s] for s in sorted(evals)],
                "reached": f"{int(sum(reached.values()))}/{len(reached)}" if reached else "–",
                "steps_to_threshold": median(list(_per_seed(rs, STEPS_TO_THRESHOLD).values()) or [math.nan]),
                "time_to_threshold_s": median(list(_per_seed(rs, TIME_TO_THRESHOLD_S).values()) or [math.nan]),
                "errors": sorted({str(r.meta.get("error")) for r in rs if r.metric == PEER_ERROR}),
                "notes": list(first.meta.get("notes", [])) if first else [],
                "shares": layer_shares(rs),
                "profile_overhead": median(
                    [float(r.meta.get("share", math.nan)) for r in rs if r.metric == PROFILE_OVERHEAD_S] or [math.nan]
                ),
            }
        )
    return out


def flags(table: list[dict[str, Any]], learned_bar: float) -> list[str]:
    """Peers that are faster than rlbench but do not learn, and implementations that raised."""
    base = next((r for r in table if r["impl"] == BASE), None)
    out = []
    for r in table:
        if r["errors"]:
            out.append(f"**{r['impl']} raised** in some seeds: {'; '.join(r['errors'])}")
        if r["eval_return"] < learned_bar or not math.isfinite(r["eval_return"]):
            faster = base is not None and r["impl"] != BASE and r["sps"] > base["sps"]
            what = "is faster than rlbench but does not learn" if faster else "does not learn"
            out.append(f"**{r['impl']} {what}**: median eval return {fmt(r['eval_return'], 1)} < {fmt(learned_bar, 1)}")
    return out


def summary(records: list[Record]) -> dict[str, Any]:
    """What ``rlbench run peers --json`` prints: one row per implementation and the flags (NaN as ``None``)."""
    bar = _learned_bar(records)
    table = rows(records)
    keys = ("impl", "library", "seeds", "sps", "ratio", "ratio_low", "ratio_high", "env_steps", "eval_return")
    impls = []
    for r in table:
        row: dict[str, Any] = {k: r[k] for k in keys}
        row["learned"] = bool(r["eval_return"] >= bar)
        row["shares"] = r["shares"]
        impls.append(row)
    algo = next((r.params.get("algo") for r in records if r.metric == SPS), None)
    return finite({"algo": algo, "learned_bar": bar, "impls": impls, "flags": flags(table, bar)})


def _learned_bar(records: list[Record]) -> float:
    p = next((r.params for r in records if r.metric == SPS), {})
    bar = p.get("learned", math.nan)
    if isinstance(bar, (int, float)) and math.isfinite(bar):
        return float(bar)
    return 450.0 if p.get("algo") == "ppo" else -200.0


def render(records: list[Record], chart_stem: str | None = None, context: Any = None) -> tuple[str, list[Any]]:
    """The peers report's markdown."""
    first = next(r for r in records if r.metric == SPS)
    algo = first.params.get("algo", "?")
    title = f"rlbench peers report: {'PPO CartPole-v1' if algo == 'ppo' else 'SAC Pendulum-v1'}"
    table = rows(records)
    bar = _learned_bar(records)
    threshold = next((r.meta.get("threshold") for r in records if r.metric == THRESHOLD_REACHED), None)
    seeds = sorted({r.seed for r in records if r.metric == SPS and r.seed is not None})
    lines = provenance(first, title, extra_packages=("stable-baselines3", "torchrl", "rlox"))
    lines += [
        "",
        f"Seeds {', '.join(map(str, seeds))}: each seed trains every implementation once, in one process, in the "
        "order of `--impls` on even seeds and reversed on odd ones (ABBA). Figures are medians over seeds; the "
        "ratio is rlbench's SPS over the implementation's, with a 95% bootstrap interval over seeds.",
        "",
        "Fairness rules: every implementation trains with the built-in benchmark's hyperparameters, agent steps and "
        "torch thread count; SPS counts the agent steps each one actually took over its training call alone "
        "(construction is timed apart as init); evaluation is the same deterministic episodes with the same seeds "
        "for all.",
        "",
        "## Speed and learning",
        "",
        md_table(
            [
                "Implementation",
                "Library",
                "SPS (median)",
                "min – max",
                "rlbench ÷ this [95% CI]",
                "Steps taken",
                "Init",
                "Eval return (median)",
                "Per seed",
                f"Training return reached {fmt(threshold, 0)}",
                "Steps to it",
                "Time to it",
            ],
            [
                [
                    f"**{r['impl']}**" if r["impl"] == BASE else r["impl"],
                    r["library"],
                    fmt(r["sps"], 0),
                    f"{fmt(r['sps_min'], 0)} – {fmt(r['sps_max'], 0)}",
                    "–"
                    if r["impl"] == BASE
                    else f"**{fmt(r['ratio'], 2)}×** [{fmt(r['ratio_low'], 2)}, {fmt(r['ratio_high'], 2)}]",
                    fmt(r["env_steps"], 0),
                    fmt_s(r["init_s"]),
                    fmt(r["eval_return"], 1),
                    ", ".join(fmt(v, 0) for v in r["eval_per_seed"]),
                    r["reached"],
                    fmt(r["steps_to_threshold"], 0),
                    f"{fmt(r['time_to_threshold_s'], 1)} s" if math.isfinite(r["time_to_threshold_s"]) else "–",
                ]
                for r in table
            ],
        ),
        "",
        f"Learning check: median eval return ≥ {fmt(bar, 1)}. Threshold: mean of the last 10 finished training episodes.",
    ]
    found = flags(table, bar)
    if found:
        lines += ["", *[f"- {f}" for f in found]]
    layers = [layer for layer in LAYERS if any(layer in r["shares"] for r in table)]
    if layers:
        lines += [
            "",
            "## Where the training time goes",
            "",
            "Share of the training wall per layer. rlbench's from its phase timers in the timed runs; the peers' from "
            "rlbench's automatic attribution (env steps, module calls with and without grad, backward, optimizer) in "
            "an extra pass, whose measured hook overhead is in the last row.",
            "",
            md_table(
                ["Layer", *[r["impl"] for r in table]],
                [
                    [LAYERS[layer], *[pct(r["shares"].get(layer, 0.0) if r["shares"] else None) for r in table]]
                    for layer in layers
                ]
                + [["profiler overhead", *[pct(r["profile_overhead"]) if r["impl"] != BASE else "–" for r in table]]],
            ),
        ]
    lines += ["", "## Seed by seed", "", _seed_table(records, [r["impl"] for r in table])]
    notes = [(r["impl"], n) for r in table for n in r["notes"]]
    if notes:
        lines += ["", "## Departures from the setting", "", *[f"- {impl}: {n}" for impl, n in notes]]
    return "\n".join(lines) + "\n", []  # no charts


def _seed_table(records: list[Record], impls: list[str]) -> str:
    groups = _by_impl(records)
    sps = {i: _per_seed(groups[i], SPS) for i in impls}
    evals = {i: _per_seed(groups[i], EVAL_RETURN) for i in impls}
    order: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for r in records:
        if r.metric == SPS and "position" in r.meta:
            order[r.seed].append((int(r.meta["position"]), str(r.params["impl"])))
    seeds = sorted({s for d in sps.values() for s in d})
    return md_table(
        ["Seed", "Order", *[f"{i} SPS (eval)" for i in impls]],
        [
            [
                str(s),
                " → ".join(i for _, i in sorted(order.get(s, []))),
                *[f"{fmt(sps[i].get(s), 0)} ({fmt(evals[i].get(s), 0)})" for i in impls],
            ]
            for s in seeds
        ],
    )


def print_summary(summary: dict[str, Any]) -> None:
    """Per implementation: SPS, rlbench's speed-up over it with its interval, and whether it learned."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text  # names and values from records are user text, never rich markup

    table = Table(title=Text(f"{summary['benchmark']}: {summary['algo']}, seeds interleaved"))
    for col in ("Implementation", "SPS", "rlbench ÷ this", "95% CI", "Eval return", "Learned"):
        table.add_column(col, justify="left" if col == "Implementation" else "right")
    for r in summary["impls"]:
        ci = f"{fmt(r['ratio_low'], 2)} – {fmt(r['ratio_high'], 2)}" if r["ratio"] is not None else "–"
        table.add_row(
            Text(str(r["impl"])),
            fmt(r["sps"], 0),
            f"{fmt(r['ratio'], 2)}×" if r["ratio"] is not None else "–",
            ci,
            fmt(r["eval_return"], 1),
            "yes" if r["learned"] else Text("no", style="red"),
        )
    console = Console()
    console.print(table)
    for f in summary["flags"]:
        console.print(Text(f, style="bold red"))
    console_footer(console, summary)

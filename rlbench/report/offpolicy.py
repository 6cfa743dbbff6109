"""The bottleneck report of an off-policy run (SAC, DDPG), rendered from its records alone.

Sections: header, end-to-end timing, steady-state phases, the gradient update broken down per update (the
table the rlox report estimated, here measured; its rows are whatever children of ``update`` the run timed),
time by layer, learning, measured what-ifs (each variant's paired effect on SPS with a bootstrap confidence
interval), bottlenecks ranked by their Amdahl bound (quoting the what-ifs that measured a suggested switch),
timer overhead, op counts, profile. Main sections describe the baseline setting (``variant == "baseline"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlbench.analysis.compare import bootstrap_paired
from rlbench.analysis.stats import median
from rlbench.report import training
from rlbench.report.advice import bottlenecks_section, findings
from rlbench.report.charts import Chart
from rlbench.report.data import RunData
from rlbench.report.format import fmt, fmt_s, md_code, md_table, pct, renumber_sections
from rlbench.report.phases import Breakdown, breakdown, children, layer_table, phase_chart, phase_table
from rlbench.report.summary import scalar_summary
from rlbench.results.metrics import BASELINE, EVAL_RETURN, FIRST_UPDATE_S, SPS, SPS_STEADY, UPDATES, VARIANT
from rlbench.results.records import Record


def _variant(r: Record) -> str:
    return str(r.params.get(VARIANT, BASELINE))


@dataclass
class VariantEffect:
    """A what-if variant against the baseline, paired by seed.

    Attributes:
        label: ``FIELD=VALUE``.
        sps: ``(ratio, low, high)``: median of per-seed SPS ratios (variant / baseline) and its 95% interval.
        steady: The same for steady-state SPS (warm-up, e.g. compilation, excluded).
        first_update_s: Median seconds of the variant's first update (compilation shows here).
        eval_return: Median evaluation return of the variant.
        pairs: Seeds both ran.
    """

    label: str
    sps: tuple[float, float, float]
    steady: tuple[float, float, float]
    first_update_s: float
    eval_return: float
    pairs: int


def _by_seed(records: list[Record], metric: str, variant: str) -> dict[object, float]:
    out = {}
    for r in records:
        if r.metric == metric and _variant(r) == variant:
            xs = [v for v in r.samples if math.isfinite(v)]
            if xs:
                out[r.seed] = sum(xs) / len(xs)
    return out


def variant_effects(records: list[Record]) -> list[VariantEffect]:
    """Every variant's paired effect, best SPS ratio first."""
    labels = sorted({_variant(r) for r in records} - {BASELINE})
    out = []
    for label in labels:
        ratios = {}
        for metric in (SPS, SPS_STEADY):
            base, cand = _by_seed(records, metric, BASELINE), _by_seed(records, metric, label)
            seeds = sorted(set(base) & set(cand), key=str)
            pairs = np.array([cand[s] / base[s] for s in seeds if base[s] > 0])
            ratios[metric] = bootstrap_paired(pairs) if pairs.size else (math.nan,) * 3
        first = median(list(_by_seed(records, FIRST_UPDATE_S, label).values()))
        evals = median(list(_by_seed(records, EVAL_RETURN, label).values()))
        n = len(set(_by_seed(records, SPS, BASELINE)) & set(_by_seed(records, SPS, label)))
        out.append(VariantEffect(label, ratios[SPS], ratios[SPS_STEADY], first, evals, n))
    return sorted(out, key=lambda e: -e.sps[0] if math.isfinite(e.sps[0]) else math.inf)


MIN_SEEDS = 3  # fewer pairs make a bootstrap interval meaningless


def _ci(r: tuple[float, float, float], pairs: int) -> str:
    ratio, lo, hi = r
    if not math.isfinite(ratio):
        return "–"
    if pairs < MIN_SEEDS:
        return f"{fmt(ratio, 3)}× (no interval: {pairs} seed{'s' if pairs != 1 else ''}, need {MIN_SEEDS})"
    verdict = "faster" if lo > 1 else "slower" if hi < 1 else "no clear effect"
    return f"{fmt(ratio, 3)}× [{fmt(lo, 3)}, {fmt(hi, 3)}] ({verdict})"


def _what_ifs(records: list[Record], d: RunData) -> list[str]:
    effects = variant_effects(records)
    if not effects:
        return []
    rows = []
    for i, e in enumerate(effects, 1):
        cells = [_ci(e.sps, e.pairs), _ci(e.steady, e.pairs), fmt_s(e.first_update_s), fmt(e.eval_return, 1)]
        rows.append([str(i), f"{md_code(e.label)}", *cells, str(e.pairs)])
    base_first = d.med(FIRST_UPDATE_S)
    return [
        "## What-ifs, measured",
        "",
        "Each repeat trained the baseline and every variant with the same seed, back to back in one process (order "
        "reversed on odd seeds). Effect = median over seeds of the per-seed SPS ratio variant / baseline, with a 95% "
        f"bootstrap interval over seeds (with {MIN_SEEDS} seeds or more); an interval that excludes 1 is a measured effect, "
        "not an estimate. Steady-state "
        "SPS leaves out the warm-up (random frames and the first update, where `torch.compile` compiles). "
        f"Baseline first update: {fmt_s(base_first)}; baseline eval return {fmt(d.med('eval_return'), 1)}.",
        "",
        md_table(
            ["Rank", "Variant", "SPS effect [95% CI]", "Steady SPS effect [95% CI]", "First update", "Eval return", "Seeds"],
            rows,
        ),
    ]


def _update_table(d: RunData, b: Breakdown) -> list[str]:
    updates = d.med(UPDATES) - 1  # the first update belongs to warm-up
    total = d.med("time/update")
    if not (updates > 0 and math.isfinite(total)):
        return []
    rows = []
    parts = children(d, "update")
    for phase in parts:
        s = d.med(f"time/{phase}")
        rows.append([f"{md_code(phase)}", fmt(s / updates * 1e6, 0), pct(s / total)])
    inner = sum(d.med(f"time/{p}") for p in parts)
    rows.append(["Python/other inside `update`", fmt((total - inner) / updates * 1e6, 0), pct((total - inner) / total)])
    rows.append(["**One gradient update**", f"**{fmt(total / updates * 1e6, 0)}**", "100%"])
    collect = d.med("time/collect")
    steps = d.med(SPS_STEADY) * b.steady_s if math.isfinite(d.med(SPS_STEADY)) else math.nan
    return [
        "## Gradient update, broken down",
        "",
        f"Median over repeats of {fmt(updates, 0)} steady-state updates per run; µs per update. "
        f"Collection costs {fmt(collect / steps * 1e6, 0) if steps else '–'} µs per agent step on top.",
        "",
        md_table(["Phase", "µs / update", "Share of update"], rows),
    ]


def measured_switches(effects: list[VariantEffect]) -> dict[str, str]:
    """What each what-if measured, by option name, for the advice to quote next to the switch it suggests."""
    out = {}
    for e in effects:
        name = e.label.partition("=")[0]
        if math.isfinite(e.sps[0]) and name not in out:
            out[name] = f"measured here: **{fmt(e.sps[0], 2)}× SPS** ({md_code(e.label)})"
    return out


def _counters(d: RunData) -> list[str]:
    rows = []
    for phase in ("collect", "update"):
        vals = d.per_repeat(f"ops/{phase}")
        if vals:
            same = "yes" if len(set(vals)) == 1 else "**no**"
            label = "one collection step" if phase == "collect" else "one gradient update"
            rows.append([label, fmt(vals[0], 0), same])
    if not rows:
        return []
    return [
        "## Operation counts (noise-free)",
        "",
        "Torch operators dispatched by one collection step and one gradient update, counted on an extra untimed run "
        "with a dispatch mode (identical run to run: `rlbench gate --fail ops/update:0%` catches one extra op).",
        "",
        md_table(["What", "Torch ops", "Same in every repeat"], rows),
    ]


def render(records: list[Record], chart_stem: str | None = None, context: Any = None) -> tuple[str, list[Chart]]:
    """Markdown of the report for one run's records, and the charts it links to.

    Args:
        records: Records of a single run (baseline and any what-if variants).
        chart_stem: Stem of the report file; the phase chart is ``<stem>-phases.png`` (``None``: no chart).
    """
    base = [r for r in records if _variant(r) == BASELINE]
    d = RunData.from_records(base)
    b = breakdown(d)
    chart = phase_chart(d, b)
    chart_file = f"{chart_stem}-phases.png" if chart_stem and chart.bars else None
    effects = variant_effects(records)
    sections = [
        training.header(d, chart_file),
        training.timing(d, "Warm-up (random frames + first update)"),
        phase_table(d, b),
        _update_table(d, b),
        layer_table(d, b),
        training.learning(d),
        _what_ifs(records, d),
        bottlenecks_section(findings(d, b, measured_switches(effects))),
        training.overhead_table(d, b),
        _counters(d),
        training.profile_table(d),
    ]
    text = "\n\n".join("\n".join(s) for s in sections if s) + "\n"
    return renumber_sections(text), [chart] if chart.bars else []


def summary(records: list[Record]) -> dict[str, Any]:
    """Median over repeats of each scalar metric of the setting as given (what ``--json`` prints)."""
    return scalar_summary(records)


print_summary = training.print_summary  # the same headline table as an on-policy run

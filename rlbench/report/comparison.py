"""Markdown of a comparison (``rlbench compare --report``) and of a gate's checks (``rlbench gate --summary``)."""

from __future__ import annotations

from rlbench.analysis.compare import CaseResult, level, power_factor
from rlbench.analysis.gate import FAIL, PASS, GateOutcome, detectable_note
from rlbench.report.format import md_code, md_table, md_text
from rlbench.results.records import Record


def fmt_value(v: float) -> str:
    if v != v:
        return "–"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def comparison_markdown(results: list, base: list[Record], cand: list[Record], notes: list[str], min_effect: float) -> str:
    """The comparison report: one row per case."""
    confidence = results[0].confidence if results else 0.95
    lines = ["# rlbench comparison", ""]
    lines += [f"> **{n}**" for n in notes]
    lines += [
        "",
        f"Baseline {_runs(base)} vs candidate {_runs(cand)}. {RATIO_LEGEND} {level(confidence)} bootstrap interval; a "
        f"verdict needs a significant change of at least {100 * min_effect:g}%. {detectable_legend(confidence)}",
        "",
    ]
    rows = []
    for r in results:
        c = r.case
        n = f"{r.n_base}/{r.n_cand}" + (" paired" if r.paired else "")
        rows.append(
            [
                md_text(c.benchmark),
                f"{md_code(c.metric)} ({md_text(c.unit)})",
                fmt_value(r.base_median),
                fmt_value(r.cand_median),
                fmt_value(r.ratio),
                f"[{fmt_value(r.ci_low)}, {fmt_value(r.ci_high)}]",
                n,
                fmt_detectable(r),
                md_text(r.verdict),
            ]
        )
    head = ["Benchmark", "Metric", "Baseline", "Candidate", "Ratio", f"{level(confidence)} CI", "n", "Detectable", "Verdict"]
    lines.append(md_table(head, rows))
    return "\n".join(lines) + "\n"


def _runs(records: list[Record]) -> str:
    runs = sorted({r.run_id for r in records})
    return ("run " if len(runs) == 1 else "runs (merged by seed) ") + ", ".join(f"{md_code(r)}" for r in runs)


RATIO_LEGEND = (
    "Ratio: candidate / baseline. Unpaired rows: the ratio of the two medians shown. Rows marked *paired* (both sides "
    "ran the same seeds): the median of the per-seed ratios, which cancels drift between rounds and can differ from "
    "the ratio of the pooled medians beside it."
)


def detectable_legend(confidence: float = 0.95) -> str:
    """What the Detectable column means, for intervals at ``confidence``."""
    return (
        "Detectable: the regression this run would have found 4 times in 5 at its measured noise "
        f"({power_factor(confidence):.2f} × the {level(confidence)} interval's half-width on the side a regression must "
        "clear); a smaller one can hide in the noise."
    )


DETECTABLE_LEGEND = detectable_legend()


def fmt_detectable(r: CaseResult) -> str:
    """The detectable change of a row: ``any`` for an exact count, ``–`` without an interval."""
    if r.exact:
        return "any (exact)"
    d = r.detectable
    return f"{100 * d:.1f}%" if d == d else "–"


def case_label(r: CaseResult, several: bool) -> str:
    """The benchmark of a row, with its parameters when the same benchmark appears with several parameter sets."""
    return md_text(f"{r.case.benchmark} {r.case.params}" if several else r.case.benchmark)


def gate_markdown(outcome: GateOutcome, notes: list[str] | None = None) -> str:
    """A markdown table of the checks, fit for a CI job summary (a Case column when several cases are gated)."""
    verdict = outcome.verdict
    status = {FAIL: "FAIL: regression", PASS: "PASS"}.get(verdict, "INCONCLUSIVE: the run could not tell")
    if verdict not in (FAIL, PASS) and outcome.on_inconclusive != "error":
        status += f" (counted as {outcome.on_inconclusive.upper()} by --inconclusive {outcome.on_inconclusive})"
    lines = [f"## rlbench gate: {status}", ""]
    noise = detectable_note([c.result for c in outcome.checks])
    notes = [*(notes or []), *([noise] if noise else [])]
    lines += [f"> {n}" for n in notes]
    if notes:
        lines.append("")
    cases = {(c.result.case.benchmark, c.result.case.params) for c in outcome.checks}
    benchmarks = {b for b, _ in cases}
    show = len(cases) > 1
    ci = f"{level(outcome.confidence)} CI"
    head = ["Case"] * show + ["Metric", "Limit", "Baseline", "Candidate", "Ratio", ci, "Detectable", "Verdict", "Result"]
    marks = {FAIL: "❌", PASS: "✅"}
    rows = []
    for c in outcome.checks:
        r = c.result
        case = [case_label(r, len(cases) > len(benchmarks))] * show
        cells = [
            f"{md_code(c.threshold.metric)}",
            f"{100 * c.threshold.fraction:g}%",
            fmt_value(r.base_median),
            fmt_value(r.cand_median),
            f"{r.ratio:.3f}" + (" (paired)" if r.paired else ""),
            f"[{r.ci_low:.3f}, {r.ci_high:.3f}]",
            fmt_detectable(r),
            f"{marks.get(c.verdict, '❔')} {c.verdict}",
            c.reason + (f". {c.advice}" if c.advice else ""),
        ]
        rows.append(case + cells)
    lines.append(md_table(head, rows))
    legends = [RATIO_LEGEND, "", interval_legend(outcome.confidence), "", verdict_legend(outcome.confidence)]
    return "\n".join([*lines, "", *legends, detectable_legend(outcome.confidence)]) + "\n"


def interval_legend(confidence: float) -> str:
    """Where the CI column's level comes from."""
    if round(confidence, 6) == 0.95:
        return "CI: the 95% bootstrap interval of the ratio."
    looks = (1.0 - 0.95) / (1.0 - confidence)
    spread = (
        f"the 5% error rate spread evenly over the {looks:.0f} looks that `--rounds auto` planned (Bonferroni), so that "
        "all looks together give at most 5% false verdicts"
        if abs(looks - round(looks)) < 1e-6
        else "a level other than 95%"
    )
    return f"CI: the {level(confidence)} bootstrap interval of the ratio, not 95%: {spread}."


def verdict_legend(confidence: float = 0.95) -> str:
    """What PASS, FAIL and INCONCLUSIVE mean, for intervals at ``confidence``."""
    return (
        f"PASS: the {level(confidence)} interval rules out a regression larger than the limit. FAIL: significantly "
        "worse by more than the limit. INCONCLUSIVE: neither; the run was too noisy (or the machine too busy) to tell."
    )


VERDICT_LEGEND = verdict_legend()

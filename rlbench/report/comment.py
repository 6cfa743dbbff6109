"""The pull-request comment of ``rlbench ab ... --comment FILE``: the gate's verdicts as one markdown body.

Its first line is a hidden marker (:data:`MARKER`, an HTML comment GitHub does not show), so a workflow finds the
comment it posted before and updates it on each push: one sticky comment per pull request ([ci.md](../../docs/ci.md)).
Then: the overall verdict, the revisions and the rounds, one row per threshold (verdict, ratio and interval, rounds
used), what each INCONCLUSIVE threshold would need, and the full gate table folded away.
"""

from __future__ import annotations

from rlbench.analysis.compare import level
from rlbench.analysis.gate import FAIL, INCONCLUSIVE, PASS, GateOutcome
from rlbench.report.comparison import case_label, fmt_detectable, fmt_value, gate_markdown
from rlbench.report.format import md_code, md_table, md_text

MARKER = "<!-- rlbench-ab-comment -->"
"""The comment's first line: what the sticky-comment workflow looks for to update the comment it posted before."""

_HEADLINE = {
    PASS: "✅ **PASS**: no regression beyond the limits",
    FAIL: "❌ **FAIL**: a regression beyond a limit",
    INCONCLUSIVE: "❔ **INCONCLUSIVE**: this run could not tell",
}
_MARK = {PASS: "✅", FAIL: "❌", INCONCLUSIVE: "❔"}


def pr_comment(
    outcome: GateOutcome,
    *,
    base_rev: str,
    head_rev: str,
    base_sha: str,
    head_sha: str,
    rounds: int,
    decided_at: dict[str, int] | None = None,
    auto: bool = False,
    notes: list[str] | None = None,
    command: str = "",
) -> str:
    """The comment body (see the module docstring).

    Args:
        outcome: The gate's checks.
        base_rev: The baseline as the user named it; ``base_sha``: its commit.
        head_rev: The candidate as named; ``head_sha``: its commit.
        rounds: Interleaved rounds run per side.
        decided_at: ``--rounds auto``: per metric, the rounds after which its verdict was first PASS or FAIL.
        auto: Whether rounds were added until the gate decided (``--rounds auto``).
        notes: The gate's notes (mismatches, uncommitted changes, ...), folded with the full table.
        command: The ``rlbench ab`` command line, shown at the bottom.
    """
    decided_at = decided_at or {}
    verdict = outcome.verdict
    headline = _HEADLINE.get(verdict, verdict)
    if verdict == INCONCLUSIVE and outcome.on_inconclusive != "error":
        headline += f" (counted as {outcome.on_inconclusive.upper()} by `--inconclusive {outcome.on_inconclusive}`)"
    how = f"{rounds} interleaved round{'s' if rounds != 1 else ''} per side, paired by seed"
    if auto:
        how += " (`--rounds auto`: rounds added until every threshold was decided, or the limit)"
    lines = [
        MARKER,
        f"## rlbench ab: {headline}",
        "",
        f"{md_code(base_rev)} ({md_code(base_sha[:12])}) → {md_code(head_rev)} ({md_code(head_sha[:12])}): {how}.",
        "",
    ]
    cases = {(c.result.case.benchmark, c.result.case.params) for c in outcome.checks}
    show = len(cases) > 1
    several = len(cases) > len({b for b, _ in cases})
    ci = f"{level(outcome.confidence)} CI"
    head = ["Case"] * show + ["Metric", "Limit", "Verdict", "Ratio (head / base)", ci, "Detectable", "Rounds used"]
    rows = []
    for c in outcome.checks:
        r = c.result
        used = decided_at.get(c.threshold.metric, rounds) if c.verdict != INCONCLUSIVE else rounds
        rows.append(
            [case_label(r, several)] * show
            + [
                md_code(c.threshold.metric),
                f"{100 * c.threshold.fraction:g}%",
                f"{_MARK.get(c.verdict, '')} {c.verdict}",
                fmt_value(r.ratio) + (" (paired)" if r.paired else ""),
                f"[{fmt_value(r.ci_low)}, {fmt_value(r.ci_high)}]",
                fmt_detectable(r),
                str(used),
            ]
        )
    lines.append(md_table(head, rows))
    open_ = [c for c in outcome.checks if c.verdict == INCONCLUSIVE]
    if open_:
        lines += ["", "**What would decide the INCONCLUSIVE thresholds:**", ""]
        for c in open_:
            advice = c.advice or "more rounds"
            lines.append(f"- {md_code(c.threshold.metric)} (limit {100 * c.threshold.fraction:g}%): {md_text(advice)}.")
    lines += [
        "",
        "<details><summary>The gate's table, with its reasons and notes</summary>",
        "",
        gate_markdown(outcome, notes),
    ]
    lines += ["</details>", ""]
    if command:
        lines.append(f"<sub>{md_text(command)}</sub>")
    return "\n".join(lines).rstrip("\n") + "\n"

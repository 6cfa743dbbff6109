"""The report of another library's own training loop run under rlbench's runner (``sb3-sac-pendulum``): no phase
timers inside it, so timing and learning only."""

from __future__ import annotations

from typing import Any

from rlbench.report.data import RunData
from rlbench.report.format import renumber_sections
from rlbench.report.summary import scalar_summary
from rlbench.report.training import header, learning, print_summary, timing
from rlbench.results.metrics import SPS
from rlbench.results.records import Record

__all__ = ["print_summary", "render", "summary"]


def render(records: list[Record], chart_stem: str | None = None, context: Any = None) -> tuple[str, list[Any]]:
    """Markdown for another library's training run: header, timing and learning (no charts)."""
    d = RunData.from_records(records)
    lib = d.meta(SPS, "library", "another library")
    sections = [
        header(d, None),
        [f"Measured by running {lib} itself under rlbench's runner (its own training loop, no phase timers inside)."],
        timing(d),
        learning(d),
    ]
    return renumber_sections("\n\n".join("\n".join(s) for s in sections if s) + "\n"), []


def summary(records: list[Record]) -> dict[str, Any]:
    """Median over repeats of each scalar metric (what ``--json`` prints)."""
    return scalar_summary(records)

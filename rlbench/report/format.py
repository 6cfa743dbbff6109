"""Number formatting and markdown tables shared by the reports."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from rlbench.stats import Summary


def fmt(v: float | None, digits: int = 2) -> str:
    """A number with thousands separators and ``digits`` decimals; ``–`` for missing or NaN."""
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:,.{digits}f}"


def fmt_s(v: float | None) -> str:
    """Seconds, with a unit that keeps 3 significant figures readable (s, ms, µs)."""
    if v is None or not math.isfinite(v):
        return "–"
    if abs(v) >= 1:
        return f"{v:,.2f} s"
    if abs(v) >= 1e-3:
        return f"{v * 1e3:.1f} ms"
    return f"{v * 1e6:.1f} µs"


def pct(share: float | None, digits: int = 1) -> str:
    """A fraction as a percentage."""
    if share is None or not math.isfinite(share):
        return "–"
    return f"{100 * share:.{digits}f}%"


def spread(s: Summary, f: Callable[[float], str]) -> str:
    """``min–max`` of a summary, or ``–`` for fewer than two samples."""
    if s.n < 2:
        return "–"
    return f"{f(s.min)} – {f(s.max)}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (cells have ``|`` escaped)."""

    def cell(c: str) -> str:
        return str(c).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def renumber_sections(text: str) -> str:
    """Number the ``## `` headings of a markdown text 1, 2, 3, ... (replacing any existing numbers)."""
    counter = iter(range(1, 1000))
    return re.sub(r"^## (?:\d+\. )?", lambda _: f"## {next(counter)}. ", text, flags=re.M)

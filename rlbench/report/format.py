"""Number formatting and markdown tables shared by the reports."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from rlbench.analysis.stats import Summary
from rlbench.results.fingerprint import cpu_label


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


def finite(value: Any) -> Any:
    """``value`` with every non-finite float as ``None`` (what JSON can carry)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def one_line(value: Any) -> str:
    """``value`` as text on one line: every control character and line or paragraph separator (``\\n``, ``\\r``,
    ``\\t``, U+2028, ...) spelled as its Python escape, so a name can never start a new markdown block."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(value))


def md_code(value: Any) -> str:
    """``value`` as a markdown code span that shows it literally, whatever it holds.

    The span's fence is one backtick longer than the longest run of backticks in the text (so none ends it early),
    padded with a space where the text starts or ends with a backtick or space (CommonMark strips one such pair). Inside
    a code span nothing renders: ``*``, ``<b>``, ``[x](y)`` and ``&amp;`` are shown as typed. A table cell escapes
    its ``|`` (:func:`md_table`), which GitHub's tables undo inside code spans.
    """
    s = one_line(value)
    if not s.strip(" "):
        return "` `" if not s else "`" + s + "`"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


# what can start markup anywhere in a line: escapes, code, emphasis (``_`` only at a word's edge: ``num_envs`` is
# plain), links and images, HTML and entities, table cells, strikethrough
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~&]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_MD_LINE_START = re.compile(r"^([#+=-]|\d+[.)])")  # a heading, a list item or a setext underline at a line's start


def md_text(value: Any) -> str:
    """``value`` as literal markdown text outside a code span (titles, plain table cells, link texts): on one line,
    with every character markdown or HTML could read as markup backslash-escaped, so it renders as typed (and
    plain names such as ``num_envs=8 (ran bf16)`` stay readable in the raw file)."""
    text = _MD_SPECIAL.sub(r"\\\1", one_line(value))
    return _MD_LINE_START.sub(_escape_line_start, text)


def _escape_line_start(m: re.Match[str]) -> str:
    mark = m.group(1)
    return mark[:-1] + "\\" + mark[-1] if mark[0].isdigit() else "\\" + mark  # "1\." , "\#"


def md_dest(path: Any) -> str:
    """A file name as a markdown link destination (an image or a link): percent-encoded, so spaces, parentheses and
    ``<``/``>`` in it never end the link."""
    from urllib.parse import quote

    return quote(str(path), safe="/")


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


def provenance(first: Any, title: str, run_id: str | None = None, extra_packages: tuple[str, ...] = ()) -> list[str]:
    """A report's title and the table of where its figures come from: command, machine, software, commit.

    Args:
        first: A record of the run (its fingerprint and meta are shared by the run).
        title: The report's ``#`` heading text.
        run_id: Run id to name (default: the record's).
        extra_packages: Package versions to list beside torch and numpy (e.g. ``("numba",)``).
    """
    fp = first.fingerprint or {}
    mach, soft, git = fp.get("machine", {}), fp.get("software", {}), fp.get("git", {})
    pkgs = soft.get("packages", {})
    commit = git.get("commit")
    versions = ", ".join(f"{p} {pkgs.get(p)}" for p in ("torch", "numpy", *extra_packages, "rlbench"))
    return [
        f"# {title}",
        "",
        f"Generated by rlbench from the records of run {md_code(run_id or first.run_id)} ({first.timestamp}); "
        "`rlbench report` re-renders it.",
        "",
        md_table(
            ["", ""],
            [
                ["Command", f"{md_code(first.meta.get('command', '?'))}"],
                [
                    "Machine",
                    f"{cpu_label(mach)}, {mach.get('cores', '?')} cores, {mach.get('memory_gib', '?')} GiB; "
                    f"GPUs: {', '.join(mach.get('gpus') or []) or 'none'}; id {md_code(mach.get('id', '?'))}",
                ],
                [
                    "Software",
                    f"Python {soft.get('python', '?')}, {versions}"
                    + (f"; torch threads {soft['torch_threads']}" if soft.get("torch_threads") is not None else ""),
                ],
                ["Commit", (commit[:12] + (" (dirty)" if git.get("dirty") else "")) if commit else "not in a git repository"],
            ],
        ),
    ]

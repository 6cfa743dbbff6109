"""Every name is shown as typed in every markdown context, and `run --json` owns standard output (issue 30, class 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from rlbench.report.format import md_code, md_table, md_text, one_line
from rlbench.report.kinds import render_run
from rlbench.results.store import RunWriter
from tests.faults.fault_helpers import record, rlbench

MD = MarkdownIt("commonmark").enable("table")
NASTY = "a`b``\n# live <b>bold</b> *em* [x](http://e) &amp; | $x$ \\ ~~s~~ \u2028<script>"
names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    [NASTY, "`", "``", " ` ", "  ", "", "\n", "|", "<", "&lt;", "1. x", "- x", "# x", "\\", "\\`"]
)


def _inline(markdown: str) -> list:
    """The inline tokens of a one-paragraph markdown text (fails on anything but one paragraph)."""
    blocks = MD.parse(markdown)
    assert [t.type for t in blocks] == ["paragraph_open", "inline", "paragraph_close"], markdown
    return blocks[1].children


@settings(max_examples=300, deadline=None)
@given(names)
def test_a_code_span_shows_any_name_literally(name: str) -> None:
    tokens = _inline(f"x {md_code(name)} y")
    assert [t.type for t in tokens] == ["text", "code_inline", "text"], (name, tokens)
    assert tokens[1].content == (one_line(name) or " ")
    assert "\n" not in md_code(name)


@settings(max_examples=300, deadline=None)
@given(names)
def test_plain_text_shows_any_name_literally(name: str) -> None:
    tokens = _inline(f"x {md_text(name)} y")
    assert {t.type for t in tokens} <= {"text"}, (name, [t.type for t in tokens])
    assert "".join(t.content for t in tokens) == f"x {one_line(name)} y"


@settings(max_examples=100, deadline=None)
@given(names)
def test_a_table_cell_holds_any_name(name: str) -> None:
    html = MD.render(md_table(["Phase", "Share"], [[md_code(name), "1%"], [md_text(name), "2%"]]))
    assert html.count("<tr>") == 3 and html.count("<td>") == 4, (name, html)
    assert "<b>" not in html and "<script>" not in html


def test_report_of_nasty_names_renders_nothing_live(tmp_path: Path) -> None:
    """A benchmark, phase, metric and command with newlines, backticks, HTML and markdown: one title, no live markup."""
    w = RunWriter(tmp_path / "s", "20260101T000000Z-aaaaaa")
    meta = {"command": "python " + NASTY, "report": "training"}
    w.write(
        [
            record(benchmark=NASTY, metric="sps", meta=meta),
            record(benchmark=NASTY, metric="time/iteration", unit="s", samples=[1.0, 1.0], meta={**meta, "layer": "other"}),
            record(benchmark=NASTY, metric=f"time/{NASTY}", unit="s", samples=[0.5, 0.5], meta={**meta, "layer": "update"}),
        ]
    )
    text = render_run(w.path, tmp_path / "r.md").text
    tokens = MD.parse(text)
    assert sum(t.type == "heading_open" and t.tag == "h1" for t in tokens) == 1
    html = MD.render(text)
    assert "<b>" not in html and "<script>" not in html and "<em>" not in html and 'href="http://e"' not in html
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")]


BENCH = """
import os, subprocess, sys
import rlbench

print("printed at import")

@rlbench.benchmark
def noisy(n: int = 3) -> dict:
    print("printed by the benchmark")
    os.write(1, b"written to fd 1\\n")
    subprocess.run([sys.executable, "-c", "print('printed by its child')"], check=True)
    return {"value": float(n)}
"""


@pytest.mark.slow
def test_run_json_prints_exactly_one_object_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "bench.py").write_text(BENCH)
    proc = rlbench(["run", "bench.py:noisy", "--quiet", "--store", "s", "--json"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # the whole of stdout is one JSON object
    assert out["benchmark"] == "noisy" and proc.stdout.count("\n") == 1
    for line in ("printed at import", "printed by the benchmark", "written to fd 1", "printed by its child"):
        assert line in proc.stderr

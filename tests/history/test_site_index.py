"""The history site's index, from what a newcomer reads there: every series' sparkline drawn over its own measured
commits (benchmarks measured at different cadences included), the change coloured by the metric's direction over the
window it really spans, the parameters' values, and rlbench's own metrics hidden (shown with ``all_metrics``).

The store is built by hand (tests/history/site_data.py's records): the test knows each series' commits and values.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from rlbench.report.site import sparkline, write_site
from rlbench.results.history import HistoryStore
from rlbench.results.metrics import is_internal
from tests.history.site_data import INTERNAL, N, cadence_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> HistoryStore:
    return cadence_store(tmp_path_factory.mktemp("history") / "store")


@pytest.fixture(scope="module")
def site(store: HistoryStore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    write_site(store, out)
    return out


@pytest.fixture(scope="module")
def index(site: Path) -> str:
    return (site / "index.html").read_text(encoding="utf-8")


def charted(site: Path) -> set[str]:
    """The metrics charted on the benchmark pages (their data blocks)."""
    out = set()
    for page in site.glob("bench-*.html"):
        data = json.loads(re.search(r'id="rlbench-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S).group(1))
        out |= {ch["metric"] for ch in data["charts"] if ch["kind"] == "line"}
    return out


def rows_of(index: str) -> dict[tuple[str, str], str]:
    """(benchmark, metric) -> the row's HTML."""
    out = {}
    for row in re.findall(r'<tr class="[^"]*">(.*?)</tr>', index, re.S):
        bench = html.unescape(re.search(r'<td><a href="[^"]+">(.*?)</a></td>', row).group(1))
        metric = html.unescape(re.search(r"<td><code>(.*?)</code></td>", row).group(1))
        out[(bench, metric)] = row
    return out


def path_points(row: str) -> list[tuple[str, float, float]]:
    m = re.search(r'<path d="([^"]*)"', row)
    if m is None:
        return []
    return [(c, float(x), float(y)) for c, x, y in re.findall(r"([ML])([\d.]+) ([\d.]+)", m.group(1))]


def test_sparklines_span_each_series_own_commits(index: str) -> None:
    rows = rows_of(index)
    every = path_points(rows[("every", "sps")])
    assert [c for c, _, _ in every] == ["M"] + ["L"] * (N - 1)  # one line through all 7 commits
    sparse = path_points(rows[("sparse", "sps")])
    assert [c for c, _, _ in sparse] == ["M", "L", "L"]  # measured at 3 of the machine's 7 commits: still one line
    assert sparse[0][1] < 5 and sparse[-1][1] > 110  # spans the whole width, oldest left
    assert [y for _, _, y in sparse] == sorted(y for _, _, y in sparse)  # falling values: y grows downwards
    once = rows[("once", "sps")]
    assert path_points(once) == [] and "<circle" in once  # one measured commit: a dot
    assert 'aria-label="median over the last 3 measured commits"' in rows[("sparse", "sps")]


def test_sparkline_joins_across_missing_values() -> None:
    svg = sparkline([1.0, None, 3.0, float("nan"), 2.0])
    assert re.search(r'd="M[\d. ]+L[\d. ]+L[\d. ]+"', svg) and svg.count("M") == 1
    assert sparkline([None, None]) == ""


def test_change_is_coloured_by_direction_over_its_real_window(index: str) -> None:
    rows = rows_of(index)
    assert "change over 6 commit(s)" in index and "change (20)" not in index  # 7 commits: 6 back, not --last 20
    sps, wall, note = rows[("every", "sps")], rows[("every", "wall_s")], rows[("every", "note")]
    assert re.search(r'<span class="chg good" title="better than [0-9a-f]{8}, 6 measured commit\(s\) earlier', sps)
    assert "▲+60.0%" in sps
    assert '<span class="chg bad"' in wall and "▲+60.0%" in wall  # took longer: worse, although it rose
    assert '<span class="chg same"' in note  # no better direction: no colour
    noisy = rows[("every", "noisy_s")]
    assert '<span class="chg same"' in noisy and "▲+6.0%" in noisy and "within the noise" in noisy
    sparse = rows[("sparse", "sps")]
    assert '<span class="chg bad"' in sparse and "▼" in sparse and '<span class="unit">over 2</span>' in sparse
    assert rows[("once", "sps")].count("–") >= 1 and "chg" not in rows[("once", "sps")]


def test_parameters_show_their_values(index: str) -> None:
    row = rows_of(index)[("every", "sps")]
    assert "(defaults)" not in index
    cell = re.search(r'<details class="params"><summary>3 setting\(s\)</summary>(.*?)</details>', row)
    assert cell and html.unescape(cell.group(1)) == "env=CartPole-v1, hidden=[64, 64], total_steps=2048"


def test_rlbench_internals_are_hidden_unless_asked(store: HistoryStore, site: Path, index: str, tmp_path: Path) -> None:
    shown = {metric for _, metric in rows_of(index)}
    assert shown == {"sps", "wall_s", "note", "noisy_s", "profile/call_s"}
    assert charted(site) == shown
    out = tmp_path / "all"
    write_site(store, out, all_metrics=True)
    everything = {metric for _, metric in rows_of((out / "index.html").read_text(encoding="utf-8"))}
    assert everything == shown | set(INTERNAL) and all(is_internal(m) for m in INTERNAL)
    assert charted(out) == everything

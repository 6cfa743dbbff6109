"""``rlbench publish``'s static site, without a browser: pages, escaping, gaps, machines, points per chart.

The stores are synthetic (tests/history/site_data.py): each test knows from the records it wrote which commits have
samples on which machine, and checks the site's embedded data against that, not against the site's own counts.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rlbench.report import site as site_mod
from rlbench.report.site import (
    confirm_commands,
    median_interval,
    publish,
    run_argv_of,
    script_json,
    write_site,
)
from rlbench.results.history import HistoryStore
from tests.history.site_data import (
    HOSTILE_BENCH,
    HOSTILE_PARAM,
    HOSTILE_SUBJECT,
    Synthetic,
    expected_points,
    synthetic_store,
)

REPO = Path(__file__).resolve().parents[2]
DATA_RE = re.compile(r'<script type="application/json" id="rlbench-data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    return synthetic_store(tmp_path_factory.mktemp("history") / "store")


@pytest.fixture(scope="module")
def site(synthetic: Synthetic, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    assert publish(synthetic.store, out, commit_url="https://git.example/toy/commit/{sha}", last_n=3) == out
    return out


def page_data(path: Path) -> dict:
    blocks = DATA_RE.findall(path.read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"{path.name}: {len(blocks)} data blocks"
    return json.loads(blocks[0])


def bench_page(site: Path, name: str) -> Path:
    pages = [p for p in site.glob("bench-*.html") if page_data(p)["bench"] == name]
    assert len(pages) == 1, [p.name for p in site.glob("bench-*.html")]
    return pages[0]


def test_pages_and_assets_written_once(site: Path, synthetic: Synthetic) -> None:
    names = sorted(p.name for p in site.iterdir())
    assert {"index.html", "regressions.html", "assets", "rlbench-site.json"} <= set(names)
    assert len(list(site.glob("bench-*.html"))) == 2  # toy and the hostile-named benchmark
    plotly = site / "assets" / "plotly-basic.min.js"
    assert plotly.read_bytes() == site_mod._plotly_js() and plotly.stat().st_size > 1_000_000
    # plotly ships once: every page references it, none inlines it (each page is far smaller than plotly)
    for page in site.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert page.stat().st_size < plotly.stat().st_size / 10, page.name
        assert "http://" not in text.replace("http://www.w3.org", "") and "https://cdn" not in text, page.name
        for src in re.findall(r'<script src="([^"]+)"', text) + re.findall(r'<link rel="stylesheet" href="([^"]+)"', text):
            assert (site / src).is_file(), (page.name, src)
    bench = bench_page(site, "toy").read_text(encoding="utf-8")
    assert '<script src="assets/plotly-basic.min.js"></script>' in bench
    assert "plotly" not in (site / "index.html").read_text(encoding="utf-8")  # the index draws SVG only


def test_cdn_plotly_links_the_bundled_version_and_writes_no_copy(synthetic: Synthetic, tmp_path: Path) -> None:
    out = tmp_path / "site"
    summary = write_site(synthetic.store, out, plotly="cdn")
    assert not (out / "assets" / "plotly-basic.min.js").exists()
    assert summary.assets == ["assets/site.js", "assets/site.css"]
    bundled = site_mod._plotly_js()[:300].decode().split("plotly.js (basic - minified) v", 1)[1].split()[0]
    bench = bench_page(out, "toy").read_text(encoding="utf-8")
    assert f'<script src="https://cdn.plot.ly/plotly-basic-{bundled}.min.js"></script>' in bench
    assert '<script src="assets/site.js"></script>' in bench
    with pytest.raises(site_mod.UsageError, match="--plotly must be one of bundle, cdn"):
        write_site(synthetic.store, tmp_path / "other", plotly="inline")


def test_user_text_is_escaped_everywhere(site: Path, synthetic: Synthetic) -> None:
    for page in site.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for raw in (HOSTILE_SUBJECT, HOSTILE_BENCH, HOSTILE_PARAM, "<script>window.__pwned", "<img src=x"):
            assert raw not in text, (page.name, raw)
        # exactly the site's own script tags: a subject's </script> or <script> never made one
        assert text.count("<script") == text.count("</script>"), page.name
        assert text.count("<script") <= 3, page.name
    # the data block parses back to the exact user text
    data = page_data(bench_page(site, "toy"))
    assert HOSTILE_SUBJECT in [c[2] for c in data["commits"]]
    evil = page_data(bench_page(site, HOSTILE_BENCH))
    assert evil["bench"] == HOSTILE_BENCH
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "evil&lt;/script&gt;&lt;img src=x onerror=window.__pwned=2&gt;" in index


def test_script_json_cannot_close_its_block() -> None:
    text = script_json({"s": "</script><!-- \u2028 & >", "x": math.nan})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"s": "</script><!-- \u2028 & >", "x": None}


def test_points_per_chart_match_the_records(site: Path, synthetic: Synthetic) -> None:
    for name in ("toy", HOSTILE_BENCH):
        data = page_data(bench_page(site, name))
        seen = Counter()
        for ch in data["charts"]:
            if ch["kind"] != "line":
                continue
            machine = data["machines"][ch["m"]]["id"]
            points = sum(1 for t in ch["traces"] for y in t["y"] if y is not None)
            assert points == synthetic.points[(machine, name, ch["metric"])], (machine, ch["metric"])
            seen[(machine, ch["metric"])] += 1
        expected = {(m, metric) for (m, bench, metric) in synthetic.points if bench == name}
        assert set(seen) == expected and set(seen.values()) == {1}  # one chart per metric and machine
    # every chart (phase stacks and shares too) has the points the records give, and the HTML says so (data-points)
    html = bench_page(site, "toy").read_text(encoding="utf-8")
    data = page_data(bench_page(site, "toy"))
    kinds = Counter(ch["kind"] for ch in data["charts"])
    assert kinds["stack"] == kinds["share"] == 3  # A: impl=a, impl=b; B: impl=a
    expected = [expected_points(synthetic, data["machines"][ch["m"]]["id"], "toy", ch) for ch in data["charts"]]
    counts = [int(v) for v in re.findall(r'data-points="(\d+)"', html)]
    assert counts == expected
    for ch in data["charts"]:
        traces = ch["traces"] if "traces" in ch else data["charts"][ch["of"]]["traces"]
        if ch["kind"] != "line":
            assert [t["name"] for t in traces] == ["env", "inference", "update"]  # top-level phases only


def test_gaps_are_gaps(site: Path, synthetic: Synthetic) -> None:
    data = page_data(bench_page(site, "toy"))
    a = next(i for i, m in enumerate(data["machines"]) if m["id"] == synthetic.machines["A"])
    axis = [data["commits"][i][0] for i in data["machines"][a]["x"]]
    assert axis == [c[:12] for c in synthetic.commits]  # every commit of machine A, oldest first
    failed, absent = axis.index(synthetic.failed[:12]), axis.index(synthetic.absent_b[:12])
    assert [g[0] for g in data["machines"][a]["gaps"]] == [failed, failed]
    assert {g[1] for g in data["machines"][a]["gaps"]} == {"failed"}
    sps = next(ch for ch in data["charts"] if ch["m"] == a and ch.get("metric") == "sps")
    by_case = {t["name"]: t["y"] for t in sps["traces"]}
    assert set(by_case) == {"impl=a", "impl=b"}
    assert by_case["impl=a"][failed] is None and by_case["impl=b"][failed] is None
    assert by_case["impl=b"][absent] is None and by_case["impl=a"][absent] is not None
    assert all(y is not None for i, y in enumerate(by_case["impl=a"]) if i != failed)
    page = bench_page(site, "toy").read_text(encoding="utf-8")
    assert "RuntimeError: boom" in page and "2 failed, 0 absent" in page


def test_machines_are_kept_apart(site: Path, synthetic: Synthetic) -> None:
    data = page_data(bench_page(site, "toy"))
    ids = [m["id"] for m in data["machines"]]
    assert sorted(ids) == sorted(synthetic.machines.values())
    b = ids.index(synthetic.machines["B"])
    assert len(data["machines"][b]["x"]) == len(synthetic.commits) - 4  # B measured the last n-4 commits only
    for ch in data["charts"]:
        if ch.get("metric") != "sps":
            continue
        values = [y for t in ch["traces"] for y in t["y"] if y is not None]
        if ch["m"] == b:  # B runs at a tenth of A's speed: no A value may have leaked into B's series
            assert max(values) < 200 and len(ch["traces"]) == 1
        else:
            assert min(values) > 500
    html = bench_page(site, "toy").read_text(encoding="utf-8")
    for machine in ids:
        assert html.count(f'<section class="machine" id="m-{machine}">') == 1
    index = (site / "index.html").read_text(encoding="utf-8")
    assert index.count('<section class="machine"') == 2


def test_regressions_page_names_the_injected_commits(site: Path, synthetic: Synthetic) -> None:
    text = (site / "regressions.html").read_text(encoding="utf-8")
    assert f"https://git.example/toy/commit/{synthetic.slow}" in text
    assert f"https://git.example/toy/commit/{synthetic.sync}" in text
    # the confirming commands: the range, the metric, and the recorded run command without the options ab manages
    assert re.search(rf"rlbench ab [0-9a-f]{{12}} {synthetic.slow[:12]} --fail sps:\d+% -- run toy --total-steps 2048", text)
    assert re.search(
        rf"rlbench bisect [0-9a-f]{{12}} {synthetic.slow[:12]} --fail sps:\d+% -- run toy --total-steps 2048", text
    )
    assert "--rounds 1 --fail syncs/iteration:0% -- run toy" in text
    assert "--store" not in text and "--json" not in text and "--repeats" not in text
    # every open-regression flag on the index links to a step on this page
    index = (site / "index.html").read_text(encoding="utf-8")
    anchors = re.findall(r'href="regressions.html#(step-[0-9a-f]+)"', index)
    assert anchors and all(f'id="{a}"' in text for a in anchors)


def test_index_rows_latest_values_and_sparklines(site: Path, synthetic: Synthetic) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr class=\"[^\"]*\">(.*?)</tr>", index, re.S)
    assert len(rows) == len(synthetic.series) == 28  # every machine x benchmark x params x metric
    assert index.count('<svg class="spark"') == len(rows)
    assert "change over 3 commit(s)" in index  # --last 3: every series here has more commits
    assert '<span class="dirty"' in index  # the newest commit was measured from a dirty tree


def test_republish_prunes_old_pages_and_keeps_other_files(synthetic: Synthetic, tmp_path: Path) -> None:
    out = tmp_path / "site"
    out.mkdir()
    (out / ".git").mkdir()
    (out / "CNAME").write_text("bench.example\n")
    write_site(synthetic.store, out)
    stale = out / "bench-gone.html"
    stale.write_text("old")
    old_plotly = out / "assets" / "plotly.min.js"  # the full plotly.js that earlier versions copied
    old_plotly.write_text("old")
    marker = json.loads((out / "rlbench-site.json").read_text())
    marker["pages"].append("bench-gone.html")
    (out / "rlbench-site.json").write_text(json.dumps(marker))
    summary = write_site(synthetic.store, out)
    assert not stale.exists() and (out / "CNAME").is_file() and (out / ".git").is_dir()
    assert not old_plotly.exists() and (out / "assets" / "plotly-basic.min.js").is_file()
    assert summary.pages[:2] == ["index.html", "regressions.html"] and len(summary.pages) == 4


def test_median_interval_is_the_order_statistic_interval() -> None:
    assert median_interval([3.0, 1.0, 2.0])[1:] == (1.0, 3.0, 3, False)  # fewer than 6: the range, not 95%
    assert median_interval([float(v) for v in range(6)])[1:] == (0.0, 5.0, 6, True)
    for n in (6, 10, 25, 100, 301):
        xs = [float(v) for v in range(n)]
        _, lo, hi, _, ok = median_interval(xs)
        k = int(lo) + 1
        # coverage of [x(k), x(n-k+1)] is 1 - 2 P(B <= k-1) >= 95%, and k is the largest such
        tail = sum(math.comb(n, j) for j in range(k)) / 2**n
        assert ok and hi == n - k and (tail <= 0.025 or n > 300)
        if n <= 300:
            assert sum(math.comb(n, j) for j in range(k + 1)) / 2**n > 0.025
    assert math.isnan(median_interval([math.nan])[0])


def test_run_argv_of_recorded_commands() -> None:
    cmd = "rlbench run toy --total-steps 2048 --store .rlbench/x --repeats=3 --json --seed 4 --quiet"
    assert run_argv_of(cmd, "toy") == ["run", "toy", "--total-steps", "2048"]
    assert run_argv_of("rlbench profile --store s -- python train.py --store keep", "x") == [
        "profile",
        "--",
        "python",
        "train.py",
        "--store",
        "keep",
    ]
    assert run_argv_of(None, "my bench") == ["run", "my bench"]
    assert run_argv_of("unbalanced 'quote", "b") == ["run", "b"]


def test_confirm_commands_quote_user_text(synthetic: Synthetic) -> None:
    from rlbench.analysis.steps import Step
    from rlbench.results.history import Series

    s = Series("m", "b; rm -rf /", {}, "sps", "steps/s", "higher", False, ["a" * 40, "b" * 40], [[1.0], [0.8]])
    st = Step(s, 1, "a" * 40, "b" * 40, 0.8, (0.75, 0.85), True, [])
    ab, bisect = confirm_commands(st, ["run", "b; rm -rf /"])
    assert ab == f"rlbench ab {'a' * 12} {'b' * 12} --fail sps:10% -- run 'b; rm -rf /'"
    assert bisect.startswith("rlbench bisect ")


def rlbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlbench", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_publish_json_and_bad_input(synthetic: Synthetic, tmp_path: Path) -> None:
    store = str(synthetic.store.root)
    ok = rlbench("publish", store, "-o", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["pages"][:2] == ["index.html", "regressions.html"] and len(out["machines"]) == 2
    assert all((tmp_path / "out" / p).is_file() for p in out["pages"] + out["assets"])
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("hello")
    bad = [
        (str(tmp_path / "missing"), "-o", str(tmp_path / "o1")),
        (str(tmp_path / "file"), "-o", str(tmp_path / "o2")),
        (str(tmp_path / "empty"), "-o", str(tmp_path / "o3")),
        (str(tmp_path / "foreign"), "-o", str(tmp_path / "o4")),
        (store, "-o", str(tmp_path / "file")),
        (store, "-o", str(tmp_path / "o5"), "--commit-url", "https://x/commit/"),
        (store, "-o", str(tmp_path / "o6"), "--last", "0"),
        (store,),
    ]
    for args in bad:
        proc = rlbench("publish", *args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("rlbench: error:"), (args, proc.stderr)
        assert not proc.stdout
    assert (tmp_path / "file").read_text() == "x"


def test_publish_help_is_listed(tmp_path: Path) -> None:
    top = rlbench("--help", cwd=tmp_path)
    assert "publish" in top.stdout
    own = rlbench("publish", "--help", cwd=tmp_path)
    assert own.returncode == 0 and "--commit-url" in own.stdout


def test_site_module_imports_no_heavy_layers() -> None:
    # rlbench.report may not import torch, run, profiling, suites, engines, algos, components (import-linter checks
    # the package in CI; this keeps the module honest when run alone)
    code = (
        "import sys, rlbench.report.site as s; bad=[m for m in sys.modules if m=='torch' or m.startswith(('rlbench.run',"
        "'rlbench.profiling','rlbench.suites','rlbench.engines','rlbench.algos','rlbench.components'))]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
    assert site_mod.PLOTLY_JS == "plotly-basic.min.js"


def test_empty_history_store_is_refused(tmp_path: Path) -> None:
    from rlbench.core.errors import RlbenchError

    (tmp_path / "h").mkdir()
    with pytest.raises(RlbenchError):
        write_site(HistoryStore(tmp_path / "h"), tmp_path / "site")
    assert not (tmp_path / "site" / "index.html").exists()

"""``rlbench publish``: a history store as a static HTML site (file:// or any static host, no network at view time).

Pages, all written into one output folder:

* ``index.html``: per machine, every benchmark x parameters x metric with its latest median and interval, the change
  over the last N measured commits, an inline SVG sparkline and a flag on open regressions (series whose latest
  detected step is a step for the worse). No JavaScript library: it opens at once.
* ``bench-<name>.html``: one page per benchmark, a section per machine (machines are never mixed): a chart per metric
  over commits (one trace per parameter case, the median with its interval as error bars), the top-level phase
  times (``time/<phase>``) stacked, and their shares, per case; counters; ``eval_return`` beside the speed metric.
  A commit where a case has no samples is a gap in its line; commits recorded as failed or absent are marked.
* ``regressions.html``: every detected step (:func:`rlbench.analysis.steps.detect_all`) with its commit range (last
  good -> first bad, linked through ``--commit-url``), size and 95% interval, the phases that stepped with it, and
  the ``rlbench ab`` / ``rlbench bisect`` commands that confirm it.
* ``assets/``: ``plotly-basic.min.js`` (plotly.js's basic partial bundle: scatter and bar traces, all the site draws;
  shipped in ``site_assets/`` beside its licence), ``site.js`` and ``site.css``. With ``plotly="cdn"`` the chart pages
  load the same bundle and version from plotly's CDN instead and the 1.2 MB copy is not written: for a site kept in a
  repository; viewing it then needs the network.

Per-commit intervals: the distribution-free 95% interval of the median (order statistics of the binomial) where a
commit has 6 or more samples, else the range of its samples (fewer samples cannot give 95%); the hover says which.

Each page's data is one compact JSON object in a ``<script type="application/json">`` block, escaped so that user
text (benchmark names, parameters, commit subjects) can never close the block; ``site.js`` renders a chart when it
scrolls into view, so a page of a thousand commits and dozens of charts opens in well under two seconds.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
import shlex
import stat
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rlbench.analysis.candidates import recorded_commands, run_argv_of, status, step_key, threshold_pct
from rlbench.analysis.steps import Step, detect_all, loaded_share
from rlbench.core.errors import DataError, UsageError
from rlbench.core.intervals import median_interval
from rlbench.results.fingerprint import cpu_label
from rlbench.results.history import (
    COMMITS,
    CONFIRMED,
    DISMISSED,
    GAPS,
    MACHINE_FILE,
    RECORDS,
    UNCONFIRMED,
    UNDECIDED,
    CommitInfo,
    Gap,
    HistoryStore,
    Series,
    params_json,
)
from rlbench.results.metrics import COUNTERS, EVAL_RETURN, TIME, is_internal
from rlbench.results.outputs import write_output

ASSETS = "assets"
PLOTLY_JS = "plotly-basic.min.js"  #: plotly.js's basic partial bundle (npm: plotly.js-basic-dist-min), in site_assets/
STALE_ASSETS = ("plotly.min.js",)  #: what earlier versions wrote into assets/ and a republish removes
SITE_JS = "site.js"
SITE_CSS = "site.css"
BENCH_PREFIX = "bench-"
SPARK_POINTS = 100  #: commits a sparkline spans at most (the series' own latest measured commits)
SITE_FILE = "rlbench-site.json"  #: marks a folder as a published site (so a republish may prune its old pages)

#: metrics shown first, in this order (eval_return right after the speed metric: a faster commit that stopped
#: learning shows beside it)
_LEAD = ("sps", EVAL_RETURN, "sps/steady", "time/call", "wall_s", "train_s", "init_s", "warmup_s", "eval_s", "startup_s")
_LEARNING = (EVAL_RETURN, "threshold_reached", "steps_to_threshold", "time_to_threshold_s", "train/recent_return")
_GROUPS = ("speed", "phases", "counters", "other")
_GROUP_TITLES = {
    "speed": "Speed and learning",
    "phases": "Phases",
    "counters": "Counters (exact: any change is a step)",
    "other": "Other metrics",
}


# --- small helpers --------------------------------------------------------------------------------------------------
def _esc(value: Any) -> str:
    """Text for HTML (element content and quoted attributes)."""
    return html.escape(str(value), quote=True)


def script_json(data: Any) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` and the line separators
    U+2028 / U+2029 are written as ``\\uXXXX`` escapes, so ``</script>`` or ``<!--`` in user text cannot end the block.
    Non-finite numbers become ``null``."""
    text = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for ch, sub in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, sub)
    return text


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _round(v: float | None, digits: int = 6) -> float | None:
    """``digits`` significant digits (enough for a chart; a third of the characters of a full float)."""
    if v is None or not math.isfinite(v):
        return None
    r = float(f"{v:.{digits}g}")
    return int(r) if r.is_integer() and abs(r) < 2**53 else r


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:60] or "x"


def _hash(text: str, n: int = 10) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:n]


def params_label(params: dict[str, Any], shown: Iterable[str] | None = None) -> str:
    """``k=v, k2=v2`` for the parameters named in ``shown`` (all by default); ``(defaults)`` when none."""
    keys = sorted(params) if shown is None else [k for k in sorted(params) if k in set(shown)]
    text = ", ".join(f"{k}={_value_text(params[k])}" for k in keys)
    return text or "(defaults)"


def params_html(s: Series, *, inline: bool = False) -> str:
    """The parameters of a series as HTML: those that tell it apart (``params``) as text, then every other setting of
    its newest record (``values``: the defaults included) -- inline, or folded in a ``<details>`` (a table cell)."""
    ident = ", ".join(f"{k}={_value_text(s.params[k])}" for k in sorted(s.params))
    rest = {k: v for k, v in s.values.items() if k not in s.params}
    if not rest:
        return _esc(ident or "(no parameters)")
    others = ", ".join(f"{k}={_value_text(rest[k])}" for k in sorted(rest))
    if inline:
        return _esc(", ".join(t for t in (ident, others) if t))
    label = f"+{len(rest)} more" if ident else f"{len(rest)} setting(s)"
    head = f"{_esc(ident)} " if ident else ""
    return f'{head}<details class="params"><summary>{_esc(label)}</summary>{_esc(others)}</details>'


def _value_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def _params_key(params: dict[str, Any]) -> str:
    return params_json(params)


def metric_group(s: Series) -> str:
    """``speed`` (speed and learning), ``phases`` (``time/<phase>``), ``counters`` (exact counts) or ``other``."""
    head = s.metric.split("/", 1)[0]
    if s.exact or head in COUNTERS:
        return "counters"
    if s.metric in _LEAD or s.metric in _LEARNING:
        return "speed"
    if s.metric.startswith(TIME):
        return "phases"
    if "/" not in s.metric and (s.metric.endswith("_s") or s.unit in ("steps/s", "s")):
        return "speed"
    return "other"


def _metric_order(metric: str) -> tuple[int, str]:
    return (_LEAD.index(metric) if metric in _LEAD else len(_LEAD), metric)


def _top_phase(metric: str) -> bool:
    """A top-level phase time (``time/update``, not ``time/update/actor``, not a micro benchmark's ``time/call``)."""
    return metric.startswith(TIME) and "/" not in metric[len(TIME) :] and metric != "time/call"


def _fmt_value(v: float | None, unit: str) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    if unit == "s":
        a = abs(v)
        if a >= 1 or a == 0:
            return f"{v:,.3g} s" if a < 1000 else f"{v:,.0f} s"
        if a >= 1e-3:
            return f"{v * 1e3:.3g} ms"
        return f"{v * 1e6:.3g} µs"
    a = abs(v)
    text = f"{v:,.0f}" if a >= 1000 else f"{v:.4g}"
    return f"{text} {unit}".rstrip() if unit and unit not in ("count", "fraction") else text


def _pct(ratio: float) -> str:
    if not math.isfinite(ratio):
        return "from 0" if ratio > 0 else "–"  # a counter that was 0 before the step
    return f"{(ratio - 1) * 100:+.1f}%"


def _date(t: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t)) if t else ""


# --- the model: what the pages show ---------------------------------------------------------------------------------
@dataclass
class MachineView:
    """One machine's commits (oldest first), its series, gaps and steps."""

    id: str
    label: str
    commits: list[str]
    series: list[Series]
    gaps: list[Gap]
    steps: list[Step]


@dataclass
class SiteSummary:
    """What :func:`write_site` wrote (``rlbench publish --json`` prints it)."""

    out: Path
    pages: list[str] = field(default_factory=list)
    assets: list[str] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    series: int = 0
    commits: int = 0
    steps: int = 0
    open_regressions: int = 0
    confirmed: int = 0
    unconfirmed: int = 0
    dismissed: int = 0
    bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "site": str(self.out),
            "index": str(self.out / "index.html"),
            "regressions": str(self.out / "regressions.html"),
            "pages": self.pages,
            "assets": self.assets,
            "machines": self.machines,
            "benchmarks": self.benchmarks,
            "series": self.series,
            "commits": self.commits,
            "steps": self.steps,
            "open_regressions": self.open_regressions,
            "confirmed": self.confirmed,
            "unconfirmed": self.unconfirmed,
            "dismissed": self.dismissed,
            "bytes": self.bytes,
        }


def _machine_label(store: HistoryStore, machine: str) -> str:
    try:
        fp = store.machine_fingerprint(machine) or {}
    except (OSError, ValueError, DataError, KeyError):
        fp = {}
    parts = [cpu_label(fp)]
    if fp.get("cores"):
        parts.append(f"{fp['cores']} cores")
    if fp.get("gpus"):
        parts.append(", ".join(map(str, fp["gpus"])))
    if fp.get("os"):
        parts.append(str(fp["os"]))
    return " · ".join(parts)


def open_steps(steps: Sequence[Step]) -> dict[str, Step]:
    """Per series key, its latest step when that step is for the worse (an open regression)."""
    latest: dict[str, Step] = {}
    for st in steps:
        key = st.series.key()
        if key not in latest or st.index > latest[key].index:
            latest[key] = st
    return {k: st for k, st in latest.items() if st.worse}


def step_id(st: Step) -> str:
    """The anchor of a step on the regressions page (stable across publishes)."""
    return "step-" + _hash(st.series.key() + "|" + st.first_bad, 12)


def _check_store(store: HistoryStore) -> None:
    """A one-line error for a store that is missing, a file, or a folder with nothing of a history store in it
    (checked before reading, so a foreign folder gets this line rather than a warning per file)."""
    root = Path(store.root)
    if not root.exists():
        raise UsageError(f"no history store at {str(root)!r} (make one with `rlbench history run` or `rlbench history add`)")
    if not root.is_dir():
        raise UsageError(f"{str(root)!r} is a file, not a history store (a folder made by `rlbench history run`)")
    parts = (RECORDS, MACHINE_FILE, GAPS)
    if not (root / COMMITS).is_file() and not any(
        d.is_dir() and any((d / p).exists() for p in parts) for d in root.iterdir() if not d.name.startswith(".")
    ):
        raise DataError(
            f"{str(root)!r} is not a history store or holds nothing yet (no {COMMITS}, no machine folder with records); "
            "fill it with `rlbench history run` or `rlbench history add`"
        )


def build_views(
    store: HistoryStore, repo: Path | None = None, *, all_metrics: bool = False
) -> tuple[list[MachineView], dict[str, CommitInfo]]:
    """Every machine with its series, gaps and detected steps; raises DataError when there is nothing to show.

    rlbench's own metrics (:func:`~rlbench.results.metrics.is_internal`: ``profile/*``, ``timer/*``, ``iterations``,
    ``env_steps``) are left out unless ``all_metrics``: neither listed, charted nor searched for steps."""
    _check_store(store)
    machines = store.machines()
    if not machines:
        raise DataError(
            f"{str(store.root)!r} is not a history store or holds no measurements (no machine folder with records)"
        )
    infos = store.commits()
    order = {sha: i for i, sha in enumerate(store.order(repo))}
    views = []
    for machine in machines:
        series = [
            s for s in store.series(machine=machine, repo=repo) if s.commits and (all_metrics or not is_internal(s.metric))
        ]
        gaps = list(store.gaps(machine))
        if not series and not gaps:
            continue
        seen: dict[str, int] = {}
        for s in series:
            for sha in s.commits:
                seen.setdefault(sha, len(seen))
        for g in gaps:
            seen.setdefault(g.commit, len(seen))
        far = len(order)
        commits = sorted(seen, key=lambda sha: (order.get(sha, far), seen[sha]))
        steps = detect_all(series) if series else []
        views.append(MachineView(machine, _machine_label(store, machine), commits, series, gaps, steps))
    if not any(v.series for v in views):
        raise DataError(f"{str(store.root)!r} holds no measured series (nothing to publish)")
    return views, infos


# --- commands that confirm a step -----------------------------------------------------------------------------------
# run_argv_of, threshold_pct and recorded_commands live in rlbench.analysis.confirm (``history confirm`` runs them)


def confirm_commands(st: Step, run_argv: list[str]) -> list[str]:
    """``rlbench ab`` (and, for a step for the worse, ``rlbench bisect``) command lines that confirm ``st``."""
    good, bad = st.last_good[:12], st.first_bad[:12]
    tail = ["--", *run_argv]
    if st.worse:
        fail = ["--fail", f"{st.series.metric}:{threshold_pct(st)}%"]
        rounds = ["--rounds", "1"] if st.series.exact else []
        return [
            shlex.join(["rlbench", "ab", good, bad, *rounds, *fail, *tail]),
            shlex.join(["rlbench", "bisect", good, bad, *fail, *tail]),
        ]
    return [shlex.join(["rlbench", "ab", good, bad, "--metric", st.series.metric, *tail])]


# --- HTML -----------------------------------------------------------------------------------------------------------
def _page(title: str, body: str, *, scripts: Sequence[str] = (), data: Any = None) -> str:
    """A page; ``scripts`` are file names in ``assets/`` or full ``https://`` addresses."""
    data_block = (
        f'<script type="application/json" id="rlbench-data">{script_json(data)}</script>\n' if data is not None else ""
    )
    tags = "".join(f'<script src="{_esc(s if s.startswith("https://") else f"{ASSETS}/{s}")}"></script>\n' for s in scripts)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_esc(title)}</title>\n"
        f'<link rel="stylesheet" href="{ASSETS}/{SITE_CSS}">\n'
        "</head><body>\n"
        f"{body}\n{data_block}{tags}"
        "</body></html>\n"
    )


def _nav(current: str, open_count: int, confirmed: int | None = None) -> str:
    label = f"Regressions ({open_count} open" + (f", {confirmed} confirmed)" if confirmed is not None else ")")
    items = [("index.html", "Index"), ("regressions.html", label)]
    links = " · ".join(
        f'<a href="{href}"{" aria-current=page" if href == current else ""}>{_esc(text)}</a>' for href, text in items
    )
    return f'<nav class="top">{links}</nav>'


class _Site:
    """Renders the pages of one store (the views, the commits' info and the URL template)."""

    def __init__(
        self,
        store: HistoryStore,
        views: list[MachineView],
        infos: dict[str, CommitInfo],
        commit_url: str | None,
        last_n: int,
        plotly_src: str = PLOTLY_JS,
    ):
        self.store = store
        self.plotly_src = plotly_src
        self.views = views
        self.infos = infos
        self.commit_url = commit_url
        self.last_n = last_n
        self.steps = [st for v in self.views for st in v.steps]
        self.confirmations = {v.id: store.confirmations(v.id) for v in views}
        self.status = {id(st): status(st, self.confirmations[v.id]) for v in views for st in v.steps}
        # an open regression is a series' latest step for the worse, unless measuring it again dismissed it
        self.open = {k: st for k, st in open_steps(self.steps).items() if self.status[id(st)] != DISMISSED}
        worse = [st for st in self.steps if st.worse]
        self.confirmed = [st for st in worse if self.status[id(st)] == CONFIRMED]
        self.dismissed = [st for st in worse if self.status[id(st)] == DISMISSED]
        self.unconfirmed = [st for st in worse if self.status[id(st)] in (UNCONFIRMED, UNDECIDED)]
        names = sorted({s.benchmark for v in views for s in v.series} | {g.benchmark for v in views for g in v.gaps})
        self.pages: dict[str, str] = {}
        used: set[str] = set()
        for name in names:
            slug = _slug(name)
            if slug != name or slug.lower() in used:
                slug = f"{slug}-{_hash(name, 8)}"
            used.add(slug.lower())
            self.pages[name] = f"{BENCH_PREFIX}{slug}.html"
        self.generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    # -- shared pieces
    def short(self, sha: str) -> str:
        return sha[:8]

    def commit_html(self, sha: str, *, subject: bool = False) -> str:
        info = self.infos.get(sha)
        label = f"<code>{_esc(self.short(sha))}</code>"
        if self.commit_url:
            label = f'<a href="{_esc(self.commit_url.replace("{sha}", sha))}" title="{_esc(sha)}">{label}</a>'
        else:
            label = f'<span title="{_esc(sha)}">{label}</span>'
        extra = ""
        if info is not None and info.dirty:
            extra += ' <span class="dirty" title="measured from a tree with uncommitted changes">dirty</span>'
        if subject and info is not None and info.subject:
            extra += f' <span class="subject">{_esc(info.subject)}</span>'
        return label + extra

    def footer(self) -> str:
        return (
            f"<footer>Generated by <code>rlbench publish</code> on {_esc(self.generated)}. Per-commit intervals: the 95% "
            "interval of the median with 6 or more samples, else the samples' range.</footer>"
        )

    # -- index
    def index_html(self) -> str:
        commits = len({c for v in self.views for c in v.commits})
        series = sum(len(v.series) for v in self.views)
        parts = [
            _nav("index.html", len(self.open), len(self.confirmed)),
            "<h1>Benchmark history</h1>",
            f'<p class="lead">{len(self.views)} machine(s) · {len(self.pages)} benchmark(s) · {series} series · '
            f'{commits} commit(s) · <a href="regressions.html">{len(self.open)} open regression(s)</a> '
            f"({len(self.confirmed)} confirmed, {len(self.unconfirmed)} candidate(s) not confirmed yet, "
            f"{len(self.dismissed)} dismissed), {len(self.steps)} detected step(s). Change: the latest median against "
            f"the one {self.last_n} measured commits earlier (or the series' first, when it has fewer): green when "
            "better and red when worse for that metric, grey within the noise (the two commits' intervals overlap). "
            "Trend: the series' medians over its own measured commits, oldest left.</p>",
            '<p><label>Filter <input id="filter" type="search" placeholder="benchmark, metric, parameter"></label></p>',
        ]
        for v in self.views:
            parts.append(self.index_machine(v))
        parts.append(self.footer())
        return _page("rlbench history", "\n".join(parts), scripts=(SITE_JS,))

    def change_window(self, s: Series) -> int:
        """How many measured commits back a series' change looks: ``--last``, or fewer when it has fewer."""
        return min(self.last_n, len(s.commits) - 1)

    def index_machine(self, v: MachineView) -> str:
        rows = []
        ordered = sorted(
            v.series,
            key=lambda s: (s.benchmark, _GROUPS.index(metric_group(s)), _metric_order(s.metric), _params_key(s.params)),
        )
        window = max((self.change_window(s) for s in ordered), default=0)
        for s in ordered:
            rows.append(self.index_row(v, s, window))
        longest = max((len(s.commits) for s in ordered), default=0)
        trend = f"trend, last {SPARK_POINTS} measured" if longest > SPARK_POINTS else "trend, measured commits"
        change = (
            f'<th title="the latest median against the one up to {self.last_n} measured commits earlier">'
            f"change over {window} commit(s)</th>"
        )
        head = (
            "<tr><th>benchmark</th><th>parameters</th><th>metric</th><th>latest</th><th>interval</th><th>commit</th>"
            f"{change}<th>{trend}</th><th>regression</th></tr>"
        )
        return (
            f'<section class="machine" id="m-{_esc(_slug(v.id))}"><h2>Machine <code>{_esc(v.id)}</code></h2>'
            f'<p class="machine-label">{_esc(v.label)} · {len(v.commits)} commit(s), {len(v.series)} series</p>'
            f'<table class="series"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table></section>'
        )

    def change_html(self, s: Series, window: int) -> str:
        """The change cell: arrow and percent against the median ``change_window`` measured commits earlier, coloured
        by the metric's direction (``good`` green, ``bad`` red) when the two commits' intervals do not overlap (an
        exact count: when it changed at all); ``same`` (grey) within the noise, unchanged, or without a direction. The
        title says which commit and why; a window shorter than the column's is named."""
        back = self.change_window(s)
        if back < 1:
            return "–"
        old_sha = s.commits[-1 - back]
        med, lo, hi, _, _ = median_interval(s.samples[-1])
        old, old_lo, old_hi, _, _ = median_interval(s.samples[-1 - back])
        if not (old and math.isfinite(old) and math.isfinite(med)):
            return "–"
        ratio = med / old
        arrow = "▲" if ratio > 1 else "▼" if ratio < 1 else ""
        apart = ratio != 1 and (s.exact or lo > old_hi or hi < old_lo)
        better = {"higher": ratio > 1, "lower": ratio < 1}.get(s.direction)
        tone = "same" if better is None or not apart else "good" if better else "bad"
        if tone == "same":
            why = (
                "unchanged"
                if ratio == 1
                else "no better direction"
                if better is None
                else "within the noise: the two commits' intervals overlap"
            )
            title = f"against {self.short(old_sha)}, {back} measured commit(s) earlier: {why}"
        else:
            word = "better" if tone == "good" else "worse"
            title = f"{word} than {self.short(old_sha)}, {back} measured commit(s) earlier ({s.direction} is better)"
        own = f' <span class="unit">over {back}</span>' if back < window else ""
        return f'<span class="chg {tone}" title="{_esc(title)}">{arrow}{_esc(_pct(ratio))}</span>{own}'

    def index_row(self, v: MachineView, s: Series, window: int) -> str:
        med, lo, hi, n, ci = median_interval(s.samples[-1])
        change = self.change_html(s, window)
        page = self.pages[s.benchmark]
        flag = ""
        st = self.open.get(s.key())
        if st is not None:
            word = "confirmed" if self.status[id(st)] == CONFIRMED else "candidate"
            text = f"{_pct(st.ratio)} at {self.short(st.first_bad)} ({word})"
            flag = f'<a class="flag {word}" href="regressions.html#{step_id(st)}">{_esc(text)}</a>'
        spark = sparkline([median_interval(x)[0] for x in s.samples[-SPARK_POINTS:]], s.direction)
        interval = f"{_fmt_value(lo, s.unit)} – {_fmt_value(hi, s.unit)}" if n > 1 else "–"
        kind = "95% CI" if ci else "range"
        return (
            f'<tr class="{"open" if flag else ""}"><td><a href="{page}#m-{_esc(_slug(v.id))}">{_esc(s.benchmark)}</a></td>'
            f"<td>{params_html(s)}</td><td><code>{_esc(s.metric)}</code></td>"
            f"<td class=num>{_esc(_fmt_value(med, s.unit))}</td>"
            f'<td class=num title="{kind} of {n} samples">{_esc(interval)}</td>'
            f"<td>{self.commit_html(s.commits[-1])}</td><td class=num>{change}</td><td>{spark}</td><td>{flag}</td></tr>"
        )

    # -- regressions
    def regressions_html(self) -> str:
        parts = [
            _nav("regressions.html", len(self.open), len(self.confirmed)),
            "<h1>Regressions</h1>",
            f'<p class="lead">{len(self.steps)} step(s) detected. A step for the worse is a <em>candidate</em> until it is '
            "measured again: <code>rlbench history confirm</code> runs the two commits side by side (interleaved rounds "
            "until the gate decides) and records the verdict. "
            f'<span class="count confirmed">{len(self.confirmed)} confirmed regression(s)</span> (worse by more than '
            "half the step, measured again), "
            f'<span class="count unconfirmed">{len(self.unconfirmed)} candidate(s) not confirmed yet</span>, '
            f'<span class="count dismissed">{len(self.dismissed)} dismissed</span> (measured again: a regression of '
            f"half the step's size ruled out); {len(self.open)} open (a series whose latest step is for the worse and "
            "not dismissed). Size: the median after the step over the median before, with its 95% interval. The "
            "commands re-measure the two commits (<code>rlbench ab</code>) and look for the first bad commit between "
            "them (<code>rlbench bisect</code>); the threshold is half the step's size (0% for an exact counter).</p>",
        ]
        order = {sha: i for v in self.views for i, sha in enumerate(v.commits)}
        sections = (
            ("confirmed", "Confirmed regressions", lambda st: st.worse and self.status[id(st)] == CONFIRMED),
            (
                "unconfirmed",
                "Candidates, not confirmed yet",
                lambda st: st.worse and self.status[id(st)] in (UNCONFIRMED, UNDECIDED),
            ),
            ("dismissed", "Dismissed candidates", lambda st: st.worse and self.status[id(st)] == DISMISSED),
            ("other", "Other steps (improvements, changes)", lambda st: not st.worse),
        )
        for v in self.views:
            wanted = {(st.series.benchmark, _params_key(st.series.params)) for st in v.steps}
            commands = recorded_commands(self.store, v.id, wanted, order)
            parts.append(
                f'<section class="machine" id="m-{_esc(_slug(v.id))}"><h2>Machine <code>{_esc(v.id)}</code></h2>'
                f'<p class="machine-label">{_esc(v.label)}</p>'
            )
            if not v.steps:
                parts.append("<p>No step detected.</p>")
            pos = {sha: i for i, sha in enumerate(v.commits)}
            for css, title, keep in sections:
                ranked = sorted(
                    (st for st in v.steps if keep(st)),
                    key=lambda st: (self.open.get(st.series.key()) is not st, -pos.get(st.first_bad, 0), st.series.key()),
                )
                if not ranked:
                    continue
                parts.append(f'<h3 class="status {css}">{_esc(title)} ({len(ranked)})</h3>')
                for st in ranked:
                    key = (st.series.benchmark, _params_key(st.series.params))
                    parts.append(self.step_html(v, st, run_argv_of(commands.get(key), st.series.benchmark)))
            parts.append("</section>")
        parts.append(self.footer())
        return _page("rlbench history: regressions", "\n".join(parts), scripts=(SITE_JS,))

    def step_html(self, v: MachineView, st: Step, run_argv: list[str]) -> str:
        s = st.series
        is_open = self.open.get(s.key()) is st
        kind = "regression" if st.worse else "improvement" if s.direction in ("higher", "lower") else "change"
        state = self.status[id(st)] if st.worse else ""
        classes = " ".join(x for x in ("step", kind, "open" if is_open else "", state) if x)
        lo, hi = st.ci
        size = f"{_pct(st.ratio)} [{_pct(lo)}, {_pct(hi)}]" if lo != hi else f"{_pct(st.ratio)} (exact)"
        phases = self.moved_phases(v, st)
        cmds = "".join(f"<pre><code>{_esc(c)}</code></pre>" for c in confirm_commands(st, run_argv))
        word = {CONFIRMED: "confirmed ", DISMISSED: "dismissed ", UNDECIDED: "candidate ", UNCONFIRMED: "candidate "}
        return (
            f'<article class="{classes}" id="{step_id(st)}">'
            f"<h3>{'OPEN ' if is_open else ''}{word.get(state, '')}{kind}: "
            f'<a href="{self.pages[s.benchmark]}#m-{_esc(_slug(v.id))}">{_esc(s.benchmark)}</a> '
            f"<code>{_esc(s.metric)}</code> {_esc(size)}</h3>"
            f"<p>parameters: {params_html(s, inline=True)} · direction: {_esc(s.direction)} · unit: {_esc(s.unit)}</p>"
            f"<p>last good {self.commit_html(st.last_good, subject=True)}<br>first bad "
            f"{self.commit_html(st.first_bad, subject=True)}</p>"
            f"{self.confirmation_html(v, st)}"
            f"<p>phases that moved: {phases}</p>{cmds}</article>"
        )

    def confirmation_html(self, v: MachineView, st: Step) -> str:
        """What measuring the step again said (``history confirm``), or how to do it."""
        if not st.worse:
            return ""
        c = self.confirmations[v.id].get(step_key(st))
        if c is None:
            return (
                '<p class="confirmation">not measured again yet: <code>rlbench history confirm</code> measures the two '
                "commits side by side and records the verdict</p>"
            )
        ratio = ""
        if c.ratio is not None and c.ci and None not in c.ci:
            ratio = f" ratio {c.ratio:.3f} [{c.ci[0]:.3f}, {c.ci[1]:.3f}]"
        limit = f"limit {100 * c.threshold:g}%"
        when = time.strftime("%Y-%m-%d", time.gmtime(c.time)) if c.time else ""
        return (
            f'<p class="confirmation {_esc(c.verdict)}">measured again{" on " + _esc(when) if when else ""}: '
            f"<strong>{_esc(c.verdict)}</strong> after {c.rounds} interleaved round(s) ({_esc(limit)}){_esc(ratio)}: "
            f"{_esc(c.reason)}</p>"
        )

    def moved_phases(self, v: MachineView, st: Step) -> str:
        """The step's ``phases`` with the size of their own step at the same commit (+-1 on the machine's commits)."""
        if not st.phases:
            return "none" if not st.series.metric.startswith(TIME) else "–"
        pos = {sha: i for i, sha in enumerate(v.commits)}
        at = pos.get(st.first_bad, -10)
        out = []
        for name in st.phases:
            match = [
                o
                for o in v.steps
                if o.series.metric == name
                and o.series.benchmark == st.series.benchmark
                and params_json(o.series.params) == params_json(st.series.params)
                and abs(pos.get(o.first_bad, -10) - at) <= 1
            ]
            out.append(f"<code>{_esc(name)}</code>" + (f" {_esc(_pct(match[0].ratio))}" if match else ""))
        return ", ".join(out)

    # -- benchmark pages
    def bench_html(self, name: str) -> tuple[str, dict[str, Any]]:
        commits: list[list[Any]] = []
        index: dict[str, int] = {}
        machines: list[dict[str, Any]] = []
        charts: list[dict[str, Any]] = []
        sections = []
        for v in self.views:
            series = [s for s in v.series if s.benchmark == name]
            gaps = [g for g in v.gaps if g.benchmark == name]
            if not series and not gaps:
                continue
            first = min(
                [v.commits.index(s.commits[0]) for s in series]
                + [v.commits.index(g.commit) for g in gaps if g.commit in v.commits]
            )
            axis = v.commits[first:]
            for sha in axis:
                if sha not in index:
                    index[sha] = len(commits)
                    info = self.infos.get(sha)
                    commits.append(
                        [
                            sha[:12],
                            _date(info.time if info else None),
                            (info.subject or "") if info else "",
                            int(bool(info and info.dirty)),
                        ]
                    )
            mi = len(machines)
            pos = {sha: i for i, sha in enumerate(axis)}
            gap_marks = [[pos[g.commit], g.status, g.message] for g in gaps if g.commit in pos]
            machines.append({"id": v.id, "x": [index[sha] for sha in axis], "gaps": gap_marks})
            sections.append(self.bench_machine(v, series, gaps, axis, pos, mi, charts))
        cases = {_params_key(s.params): s.params for v in self.views for s in v.series if s.benchmark == name}
        common = _common_params(list(cases.values()))
        settings = _common_params([s.values for v in self.views for s in v.series if s.benchmark == name])
        settings = {k: v for k, v in settings.items() if k not in common}
        shared = " shared by every case" if len(cases) > 1 else ""
        data = {"bench": name, "commits": commits, "machines": machines, "charts": charts}
        head = (
            f"<h1>{_esc(name)}</h1>"
            f'<p class="lead">{len(cases)} parameter case(s){": " + _esc(params_label(common)) if common else ""}. '
            + (f"Settings of the newest records{shared}: {_esc(params_label(settings))}. " if settings else "")
            + "A chart per metric over commits (oldest left); hover a point for its commit, median, interval and sample "
            "count. A missing point is a commit where that case has no samples.</p>"
        )
        toc = "".join(
            f'<li><a href="#m-{_esc(_slug(v["id"]))}">machine <code>{_esc(v["id"])}</code></a></li>' for v in machines
        )
        body = "\n".join(
            [_nav("", len(self.open), len(self.confirmed)), head, f"<ul class=toc>{toc}</ul>", *sections, self.footer()]
        )
        return _page(f"rlbench history: {name}", body, scripts=(self.plotly_src, SITE_JS), data=data), data

    def bench_machine(
        self,
        v: MachineView,
        series: list[Series],
        gaps: list[Gap],
        axis: list[str],
        pos: dict[str, int],
        mi: int,
        charts: list[dict[str, Any]],
    ) -> str:
        cases = {_params_key(s.params): s.params for s in series}
        varying = _varying_params(list(cases.values()))
        by_metric: dict[str, list[Series]] = defaultdict(list)
        for s in series:
            by_metric[s.metric].append(s)
        groups: dict[str, list[str]] = defaultdict(list)
        for metric, ss in by_metric.items():
            groups[metric_group(ss[0])].append(metric)
        out = [
            f'<section class="machine" id="m-{_esc(_slug(v.id))}"><h2>Machine <code>{_esc(v.id)}</code></h2>',
            f'<p class="machine-label">{_esc(v.label)} · {len(axis)} commit(s) from '
            f"{self.commit_html(axis[0])} to {self.commit_html(axis[-1])}</p>",
        ]
        failed = [g for g in gaps if g.status == "failed"]
        absent = [g for g in gaps if g.status != "failed"]
        if gaps:
            items = "".join(
                f"<li>{self.commit_html(g.commit)} {_esc(g.status)} ({_esc(params_label(g.params))}): {_esc(g.message)}</li>"
                for g in gaps[:200]
            )
            out.append(
                f'<details class="gaps"><summary>{len(failed)} failed, {len(absent)} absent commit(s) (marked on the '
                f"charts)</summary><ul>{items}</ul></details>"
            )

        def chart(title: str, spec: dict[str, Any], wide: bool = False) -> str:
            spec["m"] = mi
            charts.append(spec)
            traces = spec["traces"] if "traces" in spec else charts[spec["of"]]["traces"]
            points = sum(sum(1 for y in t["y"] if y is not None) for t in traces)
            return (
                f'<figure class="card{" wide" if wide else ""}"><figcaption>{title}</figcaption>'
                f'<div class="chart" data-chart="{len(charts) - 1}" data-points="{points}"></div></figure>'
            )

        def line_spec(metric: str) -> dict[str, Any]:
            ss = sorted(by_metric[metric], key=lambda s: _params_key(s.params))
            traces = []
            for s in ss:
                y: list[Any] = [None] * len(axis)
                lo: list[Any] = [None] * len(axis)
                hi: list[Any] = [None] * len(axis)
                n: list[int] = [0] * len(axis)
                for sha, samples in zip(s.commits, s.samples):
                    if sha not in pos:
                        continue
                    med, a, b, k, _ = median_interval(samples)
                    i = pos[sha]
                    y[i], lo[i], hi[i], n[i] = _round(med), _round(a, 4), _round(b, 4), k
                trace: dict[str, Any] = {"name": params_label(s.params, varying), "y": y}
                counts = {k for k, v in zip(n, y) if v is not None}
                trace["n"] = counts.pop() if len(counts) == 1 else n  # one number when every commit has as many
                if any(a != b for a, b in zip(lo, hi)):
                    trace["lo"], trace["hi"] = lo, hi  # none: every commit has one sample (or all equal)
                traces.append(trace)
            first = ss[0]
            return {
                "kind": "line",
                "metric": metric,
                "unit": first.unit,
                "dir": first.direction,
                "exact": first.exact,
                "traces": traces,
            }

        def title_of(metric: str) -> str:
            s = by_metric[metric][0]
            better = {"higher": "higher is better", "lower": "lower is better"}.get(s.direction, "")
            return (
                f"<code>{_esc(metric)}</code> <span class=unit>{_esc(s.unit)}{' · ' + better if better else ''}</span>"
                f"{load_note(by_metric[metric])}"
            )

        for group in _GROUPS:
            metrics = sorted(groups.get(group, []), key=_metric_order)
            if not metrics:
                continue
            out.append(f"<h3>{_esc(_GROUP_TITLES[group])}</h3><div class=grid>")
            if group == "phases":
                out.extend(self.phase_stacks(by_metric, axis, pos, varying, chart, charts))
            for metric in metrics:
                out.append(chart(title_of(metric), line_spec(metric)))
            out.append("</div>")
        out.append("</section>")
        return "\n".join(out)

    def phase_stacks(
        self,
        by_metric: dict[str, list[Series]],
        axis: list[str],
        pos: dict[str, int],
        varying: list[str],
        chart: Any,
        charts: list[dict[str, Any]],
    ) -> list[str]:
        """Per case, the top-level phase times stacked over commits, and their shares."""
        per_case: dict[str, list[Series]] = defaultdict(list)
        for metric, ss in by_metric.items():
            if _top_phase(metric):
                for s in ss:
                    per_case[_params_key(s.params)].append(s)
        out = []
        for key in sorted(per_case):
            ss = sorted(per_case[key], key=lambda s: s.metric)
            if len(ss) < 2:
                continue
            traces = []
            for s in ss:
                y: list[Any] = [None] * len(axis)
                for sha, samples in zip(s.commits, s.samples):
                    if sha in pos:
                        y[pos[sha]] = _round(median_interval(samples)[0])
                traces.append({"name": s.metric[len(TIME) :], "y": y})
            label = params_label(ss[0].params, varying) if varying else ""
            suffix = f" <span class=unit>{_esc(label)}</span>" if label else ""
            spec = {"kind": "stack", "unit": "s", "case": key, "traces": traces}
            out.append(chart(f"phase times, stacked (median s){suffix}", spec))
            share = {"kind": "share", "unit": "%", "case": key, "of": len(charts) - 1}  # the stack's traces, not a copy
            out.append(chart(f"phase shares of their total{suffix}", share))
        return out


def load_note(series: list[Series]) -> str:
    """A chart's words on the load its commits were measured under: how many commits saw other processes use more
    than a tenth of the CPU, and the median load ('' when none did, or none was recorded)."""
    loaded = total = 0
    medians = []
    for s in series:
        n, typical = loaded_share(s)
        loaded, total = loaded + n, total + len(s.commits)
        if typical is not None:
            medians.append(typical)
    if not loaded:
        return ""
    typical = sorted(medians)[len(medians) // 2]
    title = (
        "other processes used more than 10% of the CPU while these commits were measured: their timings are slower "
        "and noisier; the step search leaves out a commit whose load differs from the series' usual one"
    )
    return (
        f' <span class="load" title="{_esc(title)}">measured under load: {loaded} of {total} commit(s), median '
        f"{100 * typical:.0f}% of the CPU used by other processes</span>"
    )


def _common_params(cases: list[dict[str, Any]]) -> dict[str, Any]:
    if not cases:
        return {}
    first = cases[0]
    return {k: v for k, v in first.items() if all(k in c and c[k] == v for c in cases[1:])}


def _varying_params(cases: list[dict[str, Any]]) -> list[str]:
    common = _common_params(cases)
    return sorted({k for c in cases for k in c} - set(common))


def sparkline(values: Sequence[float | None], direction: str = "none", width: int = 120, height: int = 24) -> str:
    """An inline SVG line through ``values`` (a series' medians over its own measured commits, oldest first), one
    point per value, evenly spaced; a value that is ``None`` or not finite is skipped and the line joins its
    neighbours. The last value is a dot; one value alone is just the dot."""
    points = [(i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if not points:
        return ""
    lo, hi = min(v for _, v in points), max(v for _, v in points)
    span = hi - lo or 1.0
    n = max(len(values) - 1, 1)
    xy = [(1 + (width - 2) * i / n, height - 2 - (height - 4) * (v - lo) / span) for i, v in points]
    if len(xy) == 1:
        xy = [(width - 2.0, xy[0][1])]  # one commit: its dot at the right end, where the latest goes
    d = " ".join(f"{'L' if k else 'M'}{x:.1f} {y:.1f}" for k, (x, y) in enumerate(xy))
    last = xy[-1]
    dot = f'<circle cx="{last[0]:.1f}" cy="{last[1]:.1f}" r="2"/>'
    path = f'<path d="{d}"/>' if len(xy) > 1 else ""
    return (
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="median over the last {len(values)} measured commits">{path}{dot}</svg>'
    )


# --- writing --------------------------------------------------------------------------------------------------------
def _plotly_js() -> bytes:
    """The plotly.js bundle the site ships (a package resource: no network, no other package)."""
    return _asset(PLOTLY_JS)


def _asset(name: str) -> bytes:
    return resources.files("rlbench.report").joinpath("site_assets", name).read_bytes()


def plotly_version() -> str:
    """The version of the shipped bundle, from its licence header (``plotly.js (basic - minified) v4.1.1``)."""
    m = re.search(rb"plotly\.js \(basic - minified\) v(\d[\w.+-]*)", _plotly_js()[:300])
    if m is None:  # pragma: no cover - the bundle is part of the package
        raise DataError(f"site_assets/{PLOTLY_JS} has no plotly.js basic bundle header; reinstall rlbench")
    return m.group(1).decode()


PLOTLY_CHOICES = ("bundle", "cdn")


def plotly_cdn_url() -> str:
    """The CDN address of the shipped bundle's version (the same code as ``bundle``)."""
    return f"https://cdn.plot.ly/plotly-basic-{plotly_version()}.min.js"


#: entries of a folder that rlbench never writes and a GitHub Pages folder may hold before its first site: a folder
#: holding nothing else counts as empty (a fresh ``gh-pages`` checkout)
PAGES_FILES = (".git", ".nojekyll", "CNAME")
SITE_GENERATOR = "rlbench publish"  #: the marker's ``generator``: what makes a folder an earlier rlbench site
_MARKER_MAX = 1 << 20  #: a marker larger than this is not one rlbench wrote


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UsageError(f"-o: cannot inspect {str(path)!r} ({exc.strerror or exc}); publish into another folder") from None


def _what(path: Path, st: os.stat_result) -> str:
    """What a path is, in words: ``a symbolic link to '/x'``, ``a dangling symbolic link (to '/x')``, ``a FIFO``..."""
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"a symbolic link to {target!r}" if path.exists() else f"a dangling symbolic link (to {target!r})"
    for test, what in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "not a regular file or folder"


def is_site(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a site rlbench published: its :data:`SITE_FILE`, a regular file (not a link) whose JSON
    names :data:`SITE_GENERATOR` (every ``rlbench publish`` writes it last, so a folder with one was written by it)."""
    marker = Path(path) / SITE_FILE
    st = _lstat(marker)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_MAX:
        return False
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("generator") == SITE_GENERATOR


def check_site_dir(out: str | os.PathLike[str], *, force: bool = False) -> Path:
    """The output folder, checked before anything is read or written (nothing here writes).

    Accepted: an absent folder under a folder (created when the site is written), an empty one (or holding only
    :data:`PAGES_FILES`), an earlier rlbench site (:func:`is_site`), and with ``force`` any other folder (the site's
    own files there are replaced; nothing else is touched).

    Raises:
        UsageError: ``out`` is a link (rlbench never writes through one), a file or anything but a folder, not
            writable, under a file, or a non-empty folder that is not an rlbench site (without ``force``).
    """
    path = Path(out)
    st = _lstat(path)
    if st is None:
        parent = path.parent
        while _lstat(parent) is None and parent != parent.parent:
            parent = parent.parent
        pst = _lstat(parent)
        if pst is not None and not parent.is_dir():
            raise UsageError(
                f"-o {str(path)!r}: {str(parent)!r} is {_what(parent, pst)}, not a folder; give a folder for the site"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(f"-o {str(path)!r}: cannot create it, folder {str(parent)!r} is not writable")
        return path
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(
            f"-o {str(path)!r} is {_what(path, st)}; rlbench never writes through a link: give the folder's own path"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"-o {str(path)!r} is {_what(path, st)}, not a folder; give the folder to write the site into")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"-o {str(path)!r}: folder not writable")
    if force or is_site(path):
        return path
    try:
        others = sorted(name for name in os.listdir(path) if name not in PAGES_FILES)
    except OSError as exc:
        raise UsageError(f"-o {str(path)!r}: cannot list the folder ({exc.strerror or exc})") from None
    if others:
        raise UsageError(
            f"-o {str(path)!r} is not empty ({len(others)} entries, e.g. {others[0]!r}) and holds no site rlbench "
            f"published (no {SITE_FILE}): the site would replace files such as index.html there; give a new or empty "
            "folder, or pass --force to write the site's files into it anyway"
        )
    return path


def check_commit_url(url: str) -> None:
    """An ``http(s)://`` address template holding ``{sha}``.

    Raises:
        UsageError: Without ``{sha}``, or of any other scheme (``javascript:``, ``data:``, ``file:``...), or with no host.
    """
    example = "e.g. https://github.com/OWNER/REPO/commit/{sha}"
    if "{sha}" not in url:
        raise UsageError(f"--commit-url must contain {{sha}}, {example}; got {url!r}")
    try:
        parts = urlsplit(url.replace("{sha}", "0" * 40))
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.netloc or url != url.strip():
        raise UsageError(f"--commit-url must be an http:// or https:// address, {example}; got {url!r}")


def _check_targets(root: Path, files: Sequence[str]) -> None:
    """Every file the site writes (paths relative to ``root``), and ``assets/``, before anything is written: each is
    absent or a regular file (``assets/``: absent or a folder), never a link, so nothing is written through one.

    Raises:
        UsageError: Naming the first path that is refused and what it is.
    """
    if _lstat(root) is None:
        return  # created by the write: it holds nothing yet
    assets = root / ASSETS
    st = _lstat(assets)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        link = stat.S_ISLNK(st.st_mode)
        raise UsageError(
            f"-o {str(root)!r}: {str(assets)!r} is {_what(assets, st)}"
            + ("; rlbench never writes through a linked folder" if link else ", not a folder")
            + ": remove it, or publish into another folder"
        )
    for rel in files:
        path = root / rel
        if rel.startswith(ASSETS + "/") and st is None:
            continue  # assets/ is created empty
        fst = _lstat(path)
        if fst is None:
            continue
        if not stat.S_ISREG(fst.st_mode):
            why = "; rlbench never writes through a link" if stat.S_ISLNK(fst.st_mode) else ""
            raise UsageError(
                f"-o {str(root)!r}: {str(path)!r} is {_what(path, fst)}{why}: remove it, or publish into another folder"
            )
        if not os.access(path, os.W_OK):
            raise UsageError(f"-o {str(root)!r}: {str(path)!r} is not writable; publish into another folder")
    if st is not None and not os.access(assets, os.W_OK | os.X_OK):
        raise UsageError(f"-o {str(root)!r}: folder {str(assets)!r} is not writable; publish into another folder")


def _previous_pages(root: Path) -> list[str]:
    """The benchmark pages an earlier publish listed in its marker (a bench-*.html name; nothing else is pruned)."""
    if not is_site(root):
        return []
    try:
        pages = json.loads((root / SITE_FILE).read_text(encoding="utf-8")).get("pages", [])
    except (OSError, ValueError, AttributeError, RecursionError):
        return []
    if not isinstance(pages, list):
        return []
    return [p for p in pages if isinstance(p, str) and p.startswith(BENCH_PREFIX) and p.endswith(".html") and "/" not in p]


def _remove_file(path: Path) -> None:
    """Remove ``path`` when it is a regular file (a stale page or asset of an earlier site); anything else stays."""
    st = _lstat(path)
    if st is not None and stat.S_ISREG(st.st_mode):
        path.unlink(missing_ok=True)


def write_site(
    store: HistoryStore,
    out: str | os.PathLike[str],
    *,
    commit_url: str | None = None,
    last_n: int = 20,
    repo: Path | None = None,
    plotly: str = "bundle",
    force: bool = False,
    all_metrics: bool = False,
) -> SiteSummary:
    """Write the site of ``store`` into ``out`` and say what was written.

    ``plotly="bundle"`` copies plotly.js into ``assets/`` (the site works offline); ``"cdn"`` links its CDN copy.
    ``all_metrics`` shows rlbench's own metrics too (hidden by default, see :func:`build_views`).

    Everything is checked before anything is written: the folder (:func:`check_site_dir`: new, empty, an earlier
    rlbench site, or any folder with ``force``), every page and asset path (absent or a regular file; ``assets/`` a
    real folder: nothing is ever written through a link), and every page is rendered. Pages of a benchmark no longer in
    the store are removed when ``out`` holds an earlier site (its ``rlbench-site.json``); nothing else in ``out`` is
    touched (a ``.git`` of a gh-pages checkout stays).

    Raises:
        UsageError: ``out`` is refused (see above), ``commit_url`` is not an http(s) template with ``{sha}``,
            ``last_n`` < 1, ``plotly`` is neither ``bundle`` nor ``cdn``.
        DataError: the store is missing, empty, or not a history store.
    """
    if commit_url is not None:
        check_commit_url(commit_url)
    if last_n < 1:
        raise UsageError(f"--last must be at least 1, got {last_n}")
    if plotly not in PLOTLY_CHOICES:
        raise UsageError(f"--plotly must be one of {', '.join(PLOTLY_CHOICES)}; got {plotly!r}")
    root = check_site_dir(out, force=force)
    views, infos = build_views(store, repo, all_metrics=all_metrics)
    site = _Site(store, views, infos, commit_url, last_n, PLOTLY_JS if plotly == "bundle" else plotly_cdn_url())
    own_assets = ((PLOTLY_JS,) if plotly == "bundle" else ()) + (SITE_JS, SITE_CSS)
    pages: dict[str, str] = {"index.html": site.index_html(), "regressions.html": site.regressions_html()}
    for name, rel in site.pages.items():
        pages[rel] = site.bench_html(name)[0]
    was_site = _lstat(root) is not None and is_site(root)
    previous = _previous_pages(root) if was_site else []
    _check_targets(root, [*pages, *(f"{ASSETS}/{n}" for n in own_assets), SITE_FILE])

    try:  # nothing was written before this line
        (root / ASSETS).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"-o {str(root)!r}: cannot create folder ({exc.strerror or exc})") from None
    _check_targets(root, [])  # assets/ itself again, now that it exists: still a folder, not a link
    # the marker first, listing this publish's pages and the earlier ones: a publish stopped half-way (a full disk,
    # Ctrl-C) leaves a folder that the next publish recognises as its own and prunes as it should
    pending = {"generator": SITE_GENERATOR, "pages": list(dict.fromkeys([*pages, *previous]))}
    write_output(root / SITE_FILE, json.dumps(pending, indent=1) + "\n", "-o")
    summary = SiteSummary(out=root)
    if plotly == "bundle":
        plotly_js, plotly_dst = _plotly_js(), root / ASSETS / PLOTLY_JS
        if not (plotly_dst.is_file() and plotly_dst.stat().st_size == len(plotly_js) and plotly_dst.read_bytes() == plotly_js):
            write_output(plotly_dst, plotly_js, "-o")  # (unchanged on a republish: not written again)
    for name in (SITE_JS, SITE_CSS):
        write_output(root / ASSETS / name, _asset(name), "-o")
    summary.assets = [f"{ASSETS}/{n}" for n in own_assets]
    for rel, text in pages.items():
        write_output(root / rel, text, "-o")
        summary.pages.append(rel)
    for rel in previous:  # an earlier publish: drop its benchmark pages that this one did not write
        if rel not in pages:
            _remove_file(root / rel)
    if was_site:
        for name in STALE_ASSETS:  # an earlier version's copy of the full plotly.js, which no page loads any more
            _remove_file(root / ASSETS / name)
    summary.machines = [v.id for v in views]
    summary.benchmarks = list(site.pages)
    summary.series = sum(len(v.series) for v in views)
    summary.commits = len({c for v in views for c in v.commits})
    summary.steps = len(site.steps)
    summary.open_regressions = len(site.open)
    summary.confirmed = len(site.confirmed)
    summary.unconfirmed = len(site.unconfirmed)
    summary.dismissed = len(site.dismissed)
    marker = {"generator": SITE_GENERATOR, "pages": summary.pages}
    write_output(root / SITE_FILE, json.dumps(marker, indent=1) + "\n", "-o")
    summary.bytes = sum((root / p).stat().st_size for p in [*summary.pages, *summary.assets])
    return summary


def publish(
    store: HistoryStore,
    out: Path,
    *,
    commit_url: str | None = None,
    last_n: int = 20,
    repo: Path | None = None,
    plotly: str = "bundle",
    force: bool = False,
    all_metrics: bool = False,
) -> Path:
    """Write the static site of ``store`` into ``out`` (see the module docstring); returns ``out``."""
    site = write_site(
        store, out, commit_url=commit_url, last_n=last_n, repo=repo, plotly=plotly, force=force, all_metrics=all_metrics
    )
    return site.out

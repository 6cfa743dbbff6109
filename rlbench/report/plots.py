"""PNG charts for reports: bar charts drawn with Pillow, scaling and timeline charts with matplotlib's Agg canvas
(pyplot is never imported).

A bar chart (the phase chart of a training or profile report) is drawn with Pillow in ~30 ms in-process, so
``rlbench profile`` never waits for matplotlib. Importing matplotlib takes ~0.35 s on the reference machine, so
``rlbench run`` starts a :class:`ChartWorker` subprocess first thing for the kinds whose charts need it: it imports
matplotlib while the run imports torch and trains, then draws the charts it is sent at the end. It runs at the
lowest CPU priority (nice 19), so it takes only the cycles the measured run leaves idle: at normal priority it
competes for the cores with a run that uses them all. Where that fails (or on one core), charts are drawn
in-process, with the same function.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any

from rlbench.core.children import die_with_parent
from rlbench.report.charts import Bar, Chart, Lane, TimelineChart
from rlbench.report.format import one_line
from rlbench.report.micro import Line, ScalingChart
from rlbench.results.outputs import open_output


def save_png(fig: Any, path: str | Path) -> None:
    """Write ``fig`` as a 256-colour palette PNG: a chart's few flat colours survive, the file is about a third of
    matplotlib's RGBA one (the committed reports keep their charts beside them)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    buf.seek(0)
    with Image.open(buf) as im, open_output(path, "chart") as fh:
        _palette(im.convert("RGB")).save(fh, format="PNG")


def save_png_bytes(data: bytes, path: str | Path) -> None:
    """Write a PNG made elsewhere (a browser's screenshot) as a 256-colour palette PNG, like :func:`save_png`: a
    page's flat colours and text survive, the file is under half the size (the committed reports have a size
    budget)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im, open_output(path, "picture") as fh:
        _palette(im.convert("RGB")).save(fh, format="PNG")


def _palette(img: Any) -> Any:
    """``img`` (RGB) with a 256-colour palette, by Pillow's fast octree: about 4 ms for a report's chart where the
    default median cut and an optimized PNG took about 40 ms after the script ended, and the file is smaller."""
    from PIL import Image

    return img.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)


def _plain(s: str) -> str:
    """A name as matplotlib text drawn as typed: on one line, ``$`` not starting mathtext."""
    return one_line(s).replace("$", r"\$")


@cache
def _font(size: int, bold: bool = False) -> Any:
    """DejaVu Sans (the font matplotlib draws with; its copy is found without importing matplotlib), else Pillow's
    own scalable default; loaded once a size."""
    from importlib.util import find_spec

    from PIL import ImageFont

    spec = find_spec("matplotlib")
    for root in (spec.submodule_search_locations or []) if spec else []:
        ttf = Path(root) / "mpl-data" / "fonts" / "ttf" / ("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf")
        if ttf.is_file():
            return ImageFont.truetype(str(ttf), size)
    return ImageFont.load_default(size)


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about ``ticks`` ticks over ``span``."""
    raw = span / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next((m * power for m in (1.0, 2.0, 2.5, 5.0) if m * power >= raw), 10.0 * power)


BAR_FONTS = (15, 13, 16)  # a bar chart's labels, values and title


def prepare_bar_charts() -> None:
    """Load what drawing a bar chart needs ahead of the first one (Pillow's image plugins, which its first save
    imports, and the fonts: ~25 ms), e.g. while the profiled script runs."""
    from PIL import Image

    Image.preinit()
    for size in BAR_FONTS:
        _font(size)


def draw_bar_chart(chart: Chart, path: str | Path) -> Path:
    """Draw ``chart`` as a horizontal bar chart, largest bar on top, values labelled; returns the path.

    Drawn with Pillow, not matplotlib: the same chart (title, labelled bars, x axis) in ~30 ms instead of ~0.45 s of
    importing matplotlib and laying it out, which a profiled command would otherwise wait for after the script ends.
    """
    from PIL import Image, ImageDraw

    bars = [Bar(one_line(b.label), b.value) for b in sorted(chart.bars, key=lambda b: -b.value)]  # names on one line
    text, small, title_font = (_font(size) for size in BAR_FONTS)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    def width(s: str, font: Any) -> float:
        return probe.textlength(s, font=font)

    row, top, bottom, right = 44, 46, 62, 20
    left = int(max([width(b.label, text) for b in bars] or [0.0])) + 24
    w = max(825, left + 420)
    h = top + row * len(bars) + bottom
    xmax = max([*(b.value for b in bars), 1.0]) * 1.18
    plot_w = w - left - right
    img = Image.new("RGB", (w, h), "white")
    g = ImageDraw.Draw(img)
    g.text((left + plot_w / 2, 14), one_line(chart.title), fill="black", font=title_font, anchor="mt")
    axis_y = top + row * len(bars)
    step = _nice_step(xmax)
    tick = 0.0
    while tick <= xmax + 1e-9:
        x = left + plot_w * tick / xmax
        g.line([(x, axis_y), (x, axis_y + 5)], fill="black")
        g.text((x, axis_y + 8), f"{tick:g}", fill="black", font=small, anchor="mt")
        tick += step
    g.text((left + plot_w / 2, h - 8), chart.xlabel, fill="black", font=text, anchor="mb")
    for i, b in enumerate(bars):
        y0 = top + row * i + row * 0.15
        y1 = top + row * (i + 1) - row * 0.15
        x1 = left + plot_w * max(b.value, 0.0) / xmax
        if x1 > left:
            g.rectangle([(left, y0), (x1, y1)], fill="#4C72B0")
        mid = (y0 + y1) / 2
        g.text((left - 8, mid), b.label, fill="black", font=text, anchor="rm")
        g.text((x1 + 4, mid), f"{b.value:.1f}%", fill="black", font=small, anchor="lm")
    g.line([(left, top - 4), (left, axis_y)], fill="black")
    g.line([(left, axis_y), (left + plot_w, axis_y)], fill="black")
    path = Path(path)
    with open_output(path, "chart") as fh:
        _palette(img).save(fh, format="PNG")
    return path


def draw_scaling_chart(chart: ScalingChart, path: str | Path) -> Path:
    """Draw median time against size on log-log axes, one marked line per implementation; returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for line in chart.lines:
        ax.plot(line.x, line.y, marker="o", label=_plain(line.label))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_plain(chart.xlabel))
    ax.set_ylabel(_plain(chart.ylabel))
    ax.set_title(_plain(chart.title), fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    save_png(fig, path)
    return path


COLOURS = {"busy": "#4C72B0", "wait": "#DD8452", "sync": "#C44E52"}


def draw_timeline_chart(chart: TimelineChart, path: str | Path) -> Path:
    """Draw each actor's spans as a horizontal lane on one time axis (gaps are idle); returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    fig = Figure(figsize=(10.0, 0.55 * len(chart.lanes) + 1.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for row, lane in enumerate(reversed(chart.lanes)):
        for kind in chart.kinds:
            bars = [(a, b - a) for k, a, b in lane.spans if k == kind and b > a]
            if bars:
                ax.broken_barh(bars, (row - 0.35, 0.7), facecolors=COLOURS.get(kind, "#8C8C8C"), linewidth=0)
    ax.set_yticks(range(len(chart.lanes)), [lane.label for lane in reversed(chart.lanes)])
    ax.set_xlabel("seconds since the run started")
    ax.set_title(_plain(chart.title), fontsize=11)
    ax.legend(
        handles=[Patch(color=COLOURS.get(k, "#8C8C8C"), label=k) for k in chart.kinds]
        + [Patch(color="white", label="idle (gap)")],
        fontsize=8,
        loc="upper right",
        ncol=4,
    )
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path = Path(path)
    save_png(fig, path)
    return path


def draw(chart: Chart | ScalingChart | TimelineChart, path: str | Path) -> Path:
    """Draw any kind of chart."""
    if isinstance(chart, ScalingChart):
        return draw_scaling_chart(chart, path)
    if isinstance(chart, TimelineChart):
        return draw_timeline_chart(chart, path)
    return draw_bar_chart(chart, path)


def _to_json(chart: Chart | ScalingChart | TimelineChart) -> dict:
    kind = "scaling" if isinstance(chart, ScalingChart) else "timeline" if isinstance(chart, TimelineChart) else "bars"
    return {"kind": kind, **asdict(chart)}


def _from_json(c: dict) -> Chart | ScalingChart | TimelineChart:
    kind = c.pop("kind")
    if kind == "scaling":
        return ScalingChart(c["suffix"], c["title"], [Line(**ln) for ln in c["lines"]], c["xlabel"], c["ylabel"])
    if kind == "timeline":
        lanes = [Lane(ln["label"], [tuple(s) for s in ln["spans"]]) for ln in c["lanes"]]
        return TimelineChart(c["suffix"], c["title"], lanes, tuple(c["kinds"]))
    return Chart(c["suffix"], c["title"], [Bar(**b) for b in c["bars"]], c["xlabel"])


def _background() -> None:
    """The chart worker's ``preexec_fn``: it never outlives rlbench, even after kill -9, and it yields the CPU to
    the measured run (nice 19)."""
    die_with_parent()
    try:
        os.nice(19)
    except OSError:  # not permitted here: it runs at the priority it has
        pass


class ChartWorker:
    """A subprocess that imports matplotlib now and draws charts later (see the module docstring)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if (os.cpu_count() or 1) < 2:
            return
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from rlbench.report.plots import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=_background,
            )
        except OSError:
            self.proc = None

    def draw(self, jobs: list[tuple[Chart | ScalingChart | TimelineChart, Path]], timeout: float = 60.0) -> bool:
        """Send the charts to draw and wait; ``False`` if the worker is absent or failed (draw in-process then)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return False
        payload = json.dumps([{"chart": _to_json(c), "path": str(p)} for c, p in jobs]).encode()
        try:
            proc.communicate(payload, timeout=timeout)
        except (OSError, subprocess.SubprocessError):
            proc.kill()
            return False
        return proc.returncode == 0 and all(p.is_file() for _, p in jobs)

    def close(self) -> None:
        """Stop the worker without drawing (run failed or interrupted)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def serve() -> None:
    """Worker side: import matplotlib, read the jobs from stdin, draw them, exit without teardown."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure  # noqa: F401

    jobs = json.loads(sys.stdin.buffer.read() or b"[]")
    for job in jobs:
        draw(_from_json(job["chart"]), job["path"])
    sys.stdout.flush()
    os._exit(0)

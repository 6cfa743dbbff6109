"""PNG charts for reports (matplotlib's Agg canvas; pyplot is never imported).

Importing matplotlib takes ~0.5 s on the reference machine. ``rlbench run`` and ``rlbench profile`` therefore
start a :class:`ChartWorker` subprocess first thing: it imports matplotlib while the run imports torch and trains,
then draws the charts it is sent at the end. It runs at the lowest CPU priority (nice 19), so it takes only the
cycles the measured run leaves idle: at normal priority it competes for the cores with a run that uses them all.
Where that fails (or on one core), charts are drawn in-process, with the same function.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlbench.core.children import die_with_parent
from rlbench.report.charts import Bar, Chart, Lane, TimelineChart
from rlbench.report.micro import Line, ScalingChart


def save_png(fig: Any, path: str | Path) -> None:
    """Write ``fig`` as a 256-colour palette PNG: a chart's few flat colours survive, the file is about a third of
    matplotlib's RGBA one (the committed reports keep their charts beside them)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    buf.seek(0)
    with Image.open(buf) as im:
        im.convert("RGB").quantize(colors=256, dither=Image.Dither.NONE).save(path, format="PNG", optimize=True)


def draw_bar_chart(chart: Chart, path: str | Path) -> Path:
    """Draw ``chart`` as a horizontal bar chart, largest bar on top, values labelled; returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bars = sorted(chart.bars, key=lambda b: b.value)
    fig = Figure(figsize=(7.5, 0.45 * len(bars) + 1.3), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    labels = [b.label for b in bars]
    values = [b.value for b in bars]
    rects = ax.barh(labels, values, color="#4C72B0")
    ax.bar_label(rects, labels=[f"{v:.1f}%" for v in values], padding=3, fontsize=9)
    ax.set_xlabel(chart.xlabel)
    ax.set_title(chart.title, fontsize=11)
    ax.set_xlim(0, max([*values, 1.0]) * 1.18)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path = Path(path)
    save_png(fig, path)
    return path


def draw_scaling_chart(chart: ScalingChart, path: str | Path) -> Path:
    """Draw median time against size on log-log axes, one marked line per implementation; returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for line in chart.lines:
        ax.plot(line.x, line.y, marker="o", label=line.label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(chart.xlabel)
    ax.set_ylabel(chart.ylabel)
    ax.set_title(chart.title, fontsize=11)
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
    ax.set_title(chart.title, fontsize=11)
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

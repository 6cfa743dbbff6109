"""PNG charts for reports (matplotlib's Agg canvas; pyplot is never imported)."""

from __future__ import annotations

from pathlib import Path

from rlbench.report.training import Chart


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
    ax.set_xlim(0, max(values + [1.0]) * 1.18)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path

"""What a report asks to be drawn: bar charts of shares (drawn by :mod:`rlbench.report.plots`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Bar:
    """One bar of a chart."""

    label: str
    value: float


@dataclass
class Chart:
    """A chart to draw next to the report.

    Attributes:
        suffix: File name suffix appended to the report's stem (``-phases.png``).
        title: Chart title.
        bars: Labelled values (shares in percent).
        xlabel: Axis label.
    """

    suffix: str
    title: str
    bars: list[Bar]
    xlabel: str

"""What a report asks to be drawn: bar charts of shares, actor timelines (drawn by :mod:`rlbench.report.plots`)."""

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


@dataclass
class Lane:
    """One actor's row of a timeline: ``(kind, start, end)`` spans in seconds from the run's start."""

    label: str
    spans: list[tuple[str, float, float]]


@dataclass
class TimelineChart:
    """Every actor's phases on one time axis: idle gaps show as empty stretches of a lane.

    Attributes:
        suffix: File name suffix appended to the report's stem.
        title: Chart title.
        lanes: One per actor, top to bottom.
        kinds: Colour order of the span kinds (``busy``, ``wait``, ``sync``).
    """

    suffix: str
    title: str
    lanes: list[Lane]
    kinds: tuple[str, ...] = ("busy", "wait", "sync")

"""Report kinds: the one table from a run's kind to the module that renders it.

The runner writes its benchmark's kind (``BenchmarkSpec.report``) into every record's ``meta["report"]``, and the
profiler writes ``"profile"``; ``rlbench run``, ``rlbench profile`` and ``rlbench report`` then make one lookup in
:data:`KINDS`. Every kind module offers the same three functions:

* ``render(records, chart_stem=None, context=None) -> (markdown, charts)``: the report of one run's records; the
  charts are written beside the markdown as ``<stem><chart suffix>``; ``context`` holds the other records of the same
  store (micro-benchmarks of this machine that the advice may quote).
* ``summary(records) -> dict``: the headline figures, medians over repeats (what ``--json`` prints).
* ``print_summary(summary)``: the table printed on the console after a run.

A new kind is one module plus one entry here. Records that name no kind (written before kinds were recorded, or
imported from pytest-benchmark JSON) get one from :func:`sniff`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from rlbench.core.errors import DataError
from rlbench.results.metrics import LEGACY_TIME_CALL, SPS, TIME_CALL, UPDATES
from rlbench.results.records import Record

KINDS: dict[str, str] = {
    "training": "rlbench.report.training",  # an on-policy loop: phases, layers, learning, advice
    "offpolicy": "rlbench.report.offpolicy",  # the same plus the update breakdown and what-ifs
    "profile": "rlbench.report.training",  # any script under `rlbench profile` (the training report, profile sections)
    "function": "rlbench.report.function",  # an @rlbench.benchmark function: time per call, phases, returned values
    "external": "rlbench.report.external",  # another library's own loop: timing and learning only
    "micro": "rlbench.report.micro",  # pytest-benchmark timings per group, implementation and size
    "pipeline": "rlbench.report.pipeline",  # generator / scorer / learner on an engine
    "transports": "rlbench.report.transports",  # inference transports grid and stress run
    "peers": "rlbench.report.peers",  # rlbench beside other libraries in one run
    "roofline": "rlbench.report.roofline",  # the update against this machine's limits
}

# The kinds whose reports hold matplotlib charts (scaling lines, actor timelines): only their runs start a chart
# worker (:class:`~rlbench.report.plots.ChartWorker`). The others draw bar charts with Pillow, or none, so a worker
# importing matplotlib beside them would only burn about a second of CPU (1.1-1.3 s on a 2-vCPU Zen 3) and be killed.
# Their ``render`` says so in its return annotation (tests/report/test_kinds.py keeps the two in step).
MATPLOTLIB_KINDS = frozenset({"micro", "pipeline", "transports"})


def sniff(records: list[Record]) -> str:
    """The kind of records that name none, guessed from their metrics (older stores, imported pytest-benchmark JSON)."""
    metrics = {r.metric for r in records}
    if metrics & {TIME_CALL, LEGACY_TIME_CALL} and SPS not in metrics:
        return "micro"
    if "pipeline/samples_per_s" in metrics:
        return "pipeline"
    if any(r.benchmark == "transports" for r in records):
        return "transports"
    if any(r.benchmark == "peers" and "impl" in r.params for r in records):
        return "peers"
    if any(m.startswith("roofline/") for m in metrics):
        return "roofline"
    if any(r.meta.get("library") for r in records):  # another library's run: timing and learning only
        return "external"
    if UPDATES in metrics:  # off-policy training: update breakdown and what-ifs
        return "offpolicy"
    if any(r.meta.get("kind") == "profile" for r in records):
        return "profile"
    return "training"


def kind_of(records: list[Record]) -> str:
    """The kind the records name (``meta["report"]``), else :func:`sniff`'s guess."""
    for r in records:
        kind = r.meta.get("report")
        if kind in KINDS:
            return kind
    return sniff(records)


def renderer(kind: str) -> ModuleType:
    """The module rendering ``kind`` (see the module docstring for the functions it offers)."""
    return import_module(KINDS[kind])


@dataclass
class Rendered:
    """One run's report: its markdown, its kind, and the records it was rendered from."""

    text: str
    kind: str
    records: list[Record]

    def summary(self) -> dict[str, Any]:
        """The kind's headline figures of this run."""
        return renderer(self.kind).summary(self.records)


def render_run(
    records_path: str | Path,
    output: Path | None,
    run_id: str | None = None,
    chart: bool = True,
    worker: Any = None,
    finish: Callable[[str, list[Record]], str] | None = None,
) -> Rendered:
    """Render the report of one run (``run_id`` or the latest) and write it with its charts.

    Args:
        records_path: A records file or a store directory.
        output: Markdown file to write; ``None`` writes nothing.
        run_id: Run to report on (unique prefix accepted); the latest when ``None``.
        chart: Also draw the charts beside ``output``.
        worker: A :class:`~rlbench.report.plots.ChartWorker` to draw matplotlib's charts with (in-process when
            ``None`` or if it fails); bar charts are always drawn in-process, with Pillow.
        finish: Called with the markdown and the records once the charts are drawn, right before the markdown is
            written; returns the markdown to write (``rlbench profile`` fills in its own measured cost).
    """
    from rlbench.results.outputs import check_output, is_device
    from rlbench.results.store import read_run

    if output is not None:
        check_output(output, "--report")
        chart = chart and not is_device(output)  # /dev/null: nothing is drawn beside a device
    records = read_run(records_path, run_id)
    kind = kind_of(records)
    stem = output.stem if output is not None and chart else None
    context = _store_context(records_path) if kind == "profile" else None  # the advice quotes this machine's micro runs
    text, charts = renderer(kind).render(records, stem, context)
    if output is not None and stem is not None and charts:
        from rlbench.report.charts import Chart
        from rlbench.report.plots import draw

        jobs = [(c, output.with_name(output.stem + c.suffix)) for c in charts]
        slow = [(c, path) for c, path in jobs if not isinstance(c, Chart)]  # matplotlib's: the worker's job
        for c, path in jobs:
            if isinstance(c, Chart):  # bar charts: Pillow, in-process, ~30 ms
                draw(c, path)
        if slow and (worker is None or not worker.draw(slow)):
            for c, path in slow:
                draw(c, path)
    if finish is not None:
        text = finish(text, records)
    if output is not None:
        from rlbench.results.outputs import write_output

        write_output(output, text, "--report")
    return Rendered(text, kind, records)


def write_report(
    records_path: str | Path, output: Path | None, run_id: str | None = None, chart: bool = True, worker: Any = None
) -> str:
    """:func:`render_run`'s markdown."""
    return render_run(records_path, output, run_id, chart, worker).text


def _store_context(records_path: str | Path) -> list[Record]:
    """The records of the store the run is in that the advice can quote (envs micro-benchmarks): only lines that
    can hold one are decoded (:data:`rlbench.report.alternatives.CONTEXT_LINES`).

    The store is ``records_path`` itself when it is a directory, else the directory holding the run file.
    """
    from rlbench.report.alternatives import CONTEXT_LINES
    from rlbench.results.store import read_records

    p = Path(records_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unreadable neighbour is not this report's business
        try:
            return read_records(p if p.is_dir() else p.parent, lines_with=CONTEXT_LINES)
        except DataError:
            return []

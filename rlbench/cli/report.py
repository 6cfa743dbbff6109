"""``rlbench report RECORDS``: re-render a run's bottleneck report from stored records alone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlbench.errors import UsageError
from rlbench.metrics import LEGACY_TIME_CALL, SPS, TIME_CALL, UPDATES


def write_report(
    records_path: str | Path, output: Path | None, run_id: str | None = None, chart: bool = True, worker: Any = None
) -> str:
    """Render the report of one run (``run_id`` or the latest) and write it with its chart.

    Args:
        records_path: A records file or a store directory.
        output: Markdown file to write; ``None`` returns the text without writing anything.
        run_id: Run to report on (unique prefix accepted); the latest when ``None``.
        chart: Also draw the PNG chart beside ``output``.
        worker: A :class:`~rlbench.report.plots.ChartWorker` to draw with (in-process when ``None`` or if it fails).

    Returns:
        The markdown text.
    """
    from rlbench.report import micro, training
    from rlbench.store import read_run

    records = read_run(records_path, run_id)
    draw_charts = output is not None and chart
    if is_micro(records):
        text, charts = micro.render(records, output.stem if draw_charts else None)
    elif _is_pipeline(records):
        from rlbench.report import pipeline

        text, charts = pipeline.render(records, output.stem if draw_charts else None)
    elif _is_transports(records):
        from rlbench.report import transports

        text, charts = transports.render(records, output.stem if draw_charts else None)
    elif _is_peers(records):
        from rlbench.report import peers

        text, charts = peers.render(records), []
    elif _is_roofline(records):
        from rlbench.report import roofline

        text, charts = roofline.render(records), []
    elif any(r.meta.get("library") for r in records):  # another library's run: timing and learning only
        from rlbench.report import training

        text, charts = training.render_external(records), []
    elif any(r.metric == UPDATES for r in records):  # off-policy training: update breakdown and what-ifs
        from rlbench.report import offpolicy

        text, charts = offpolicy.render(records, output.stem if draw_charts else None)
    else:
        text, charts = training.render(
            records, f"{output.stem}-phases.png" if draw_charts else None, context=_store_context(records_path)
        )
    if output is not None:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write the report to {str(output)!r} ({exc.strerror or exc})") from None
        if draw_charts and charts:
            jobs = [(c, output.with_name(output.stem + c.suffix)) for c in charts]
            if worker is None or not worker.draw(jobs):
                from rlbench.report.plots import draw

                for c, path in jobs:
                    draw(c, path)
    return text


def _store_context(records_path: str | Path) -> list:
    """Every readable record of the store the run is in (micro-benchmarks the advice can quote).

    The store is ``records_path`` itself when it is a directory, else the directory holding the run file.
    """
    import warnings

    from rlbench.errors import DataError
    from rlbench.store import read_records

    p = Path(records_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unreadable neighbour is not this report's business
        try:
            return read_records(p if p.is_dir() else p.parent)
        except DataError:
            return []


def _is_pipeline(records: list) -> bool:
    from rlbench.report.pipeline import is_pipeline

    return is_pipeline(records)


def _is_peers(records: list) -> bool:
    from rlbench.report.peers import is_peers

    return is_peers(records)


def _is_roofline(records: list) -> bool:
    from rlbench.report.roofline import is_roofline

    return is_roofline(records)


def _is_transports(records: list) -> bool:
    from rlbench.report.transports import is_transports

    return is_transports(records)


def is_micro(records: list) -> bool:
    """Whether a run's records are micro-benchmark timings (rendered as tables per group) rather than a training run."""
    metrics = {r.metric for r in records}
    return bool(metrics & {TIME_CALL, LEGACY_TIME_CALL}) and SPS not in metrics


def report_command(args: argparse.Namespace) -> int:
    """Render the report of stored records; prints where it went (or the markdown with ``-o -``)."""
    src = Path(args.records)
    if args.output == "-":
        sys.stdout.write(write_report(src, None, args.run_id))
        return 0
    if args.output:
        out = Path(args.output)
    elif src.is_dir():
        from rlbench.store import read_run

        run = read_run(src, args.run_id)[0].run_id
        out = src / f"{run}.md"
    else:
        out = src.with_suffix(".md")
    write_report(src, out, args.run_id, chart=not args.no_chart)
    print(f"report: {out}")
    return 0

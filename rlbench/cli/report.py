"""``rlbench report RECORDS``: re-render a run's report from stored records alone."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def report_command(args: argparse.Namespace) -> int:
    """Render the report of stored records; prints where it went (or the markdown with ``-o -``)."""
    from rlbench.report.kinds import write_report

    src = Path(args.records)
    if args.output == "-":
        sys.stdout.write(write_report(src, None, args.run_id))
        return 0
    if args.output:
        out = Path(args.output)
    elif src.is_dir():
        from rlbench.results.store import read_run

        run = read_run(src, args.run_id)[0].run_id
        out = src / f"{run}.md"
    else:
        out = src.with_suffix(".md")
    write_report(src, out, args.run_id, chart=not args.no_chart)
    print(f"report: {out}")
    return 0

"""``rlbench list``: the built-in benchmarks."""

from __future__ import annotations

import argparse
import json

from rlbench.registry import all_specs


def list_command(args: argparse.Namespace) -> int:
    """Print the registered benchmarks as a table (or JSON with ``--json``)."""
    specs = all_specs()
    if args.json:
        print(json.dumps([{"name": s.name, "summary": s.summary, "version": s.version} for s in specs]))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlbench benchmarks", show_lines=False)
    table.add_column("Benchmark", style="bold")
    table.add_column("What it measures")
    for s in specs:
        table.add_row(s.name, s.summary)
    Console().print(table)
    print("Run one with `rlbench run BENCHMARK`; `rlbench run BENCHMARK --help` lists its options.")
    return 0

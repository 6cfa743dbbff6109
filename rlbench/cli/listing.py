"""``rlbench list``: every discovered benchmark, where it comes from, and any suite that failed to load."""

from __future__ import annotations

import argparse
import json

from rlbench.registry import all_specs, load_errors


def list_command(args: argparse.Namespace) -> int:
    """Print the registered benchmarks as a table (or JSON with ``--json``)."""
    specs = all_specs()
    if args.json:
        rows = [{"name": s.name, "summary": s.summary, "version": s.version, "source": s.source} for s in specs]
        print(json.dumps({"benchmarks": rows, "errors": load_errors()} if load_errors() else rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rlbench benchmarks", show_lines=False)
    table.add_column("Benchmark", style="bold")
    table.add_column("What it measures")
    table.add_column("From", style="dim")
    for s in specs:
        table.add_row(s.name, s.summary, s.source)
    console = Console()
    console.print(table)
    for line in load_errors():
        console.print(f"[bold red]warning:[/] {line}", highlight=False)
    print("Run one with `rlbench run BENCHMARK`; `rlbench run BENCHMARK --help` lists its options.")
    return 0

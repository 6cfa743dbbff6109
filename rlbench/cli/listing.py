"""``rlbench list``: every discovered benchmark, where it comes from, and any suite that failed to load.

Benchmarks come from the installed packages' ``rlbench.suites`` entry points (source: the module, and the
distribution when it is not rlbench) and from the working directory's ``./suites/*.py`` (source: the file); the
pytest-benchmark files there (``test_*.py``) are listed by their stem, which ``rlbench run`` accepts too.
"""

from __future__ import annotations

import argparse
import json

from rlbench.run.registry import all_specs, display_path, load_errors, user_pytest_files

PYTEST_FILE_SUMMARY = "pytest-benchmark file: its benchmarks timed as a micro-benchmark"


def benchmark_rows() -> list[dict[str, object]]:
    """One row per benchmark (name, summary, version, source), then one per pytest-benchmark file of ``./suites/``."""
    rows: list[dict[str, object]] = [
        {"name": s.name, "summary": s.summary, "version": s.version, "source": s.source} for s in all_specs()
    ]
    taken = {r["name"] for r in rows}
    for path in user_pytest_files():
        shown = display_path(path)
        # a benchmark of the same name wins `rlbench run NAME`: the file is then listed (and run) by its path
        name = path.stem if path.stem not in taken else shown
        rows.append({"name": name, "summary": PYTEST_FILE_SUMMARY, "version": 1, "source": shown})
    return rows


def list_command(args: argparse.Namespace) -> int:
    """Print the registered benchmarks as a table (or JSON with ``--json``)."""
    rows = benchmark_rows()
    errors = load_errors()
    if args.json:
        print(json.dumps({"benchmarks": rows, "errors": errors} if errors else rows))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="rlbench benchmarks", show_lines=False)
    table.add_column("Benchmark", style="bold")
    table.add_column("What it measures")
    table.add_column("From", style="dim")
    for row in rows:
        table.add_row(*(escape(str(row[k])) for k in ("name", "summary", "source")))
    console = Console()
    console.print(table)
    for line in errors:
        console.print(f"[bold red]warning:[/] {escape(line)}", highlight=False)
    print("Run one with `rlbench run BENCHMARK`; `rlbench run BENCHMARK --help` lists its options.")
    return 0

"""``rlbench export`` and ``rlbench import``: other tools' benchmark formats."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlbench.core.errors import DataError, UsageError
from rlbench.results.outputs import check_output, write_output


def export_command(args: argparse.Namespace) -> int:
    """Write the latest run of ``args.records`` in the chosen format."""
    from rlbench.analysis.interop import to_bencher, to_github_action, to_pytest_benchmark
    from rlbench.results.store import read_run

    output = None if args.output in (None, "-") else check_output(args.output, "--output")
    records = read_run(args.records)
    if args.format == "pytest-benchmark":
        payload = to_pytest_benchmark(records)
    elif args.format == "bencher":
        payload = to_bencher(records)
    else:
        if args.direction is None:
            raise UsageError(
                "--format github-action needs --direction higher (customBiggerIsBetter) or lower (customSmallerIsBetter)"
            )
        payload = to_github_action(records, args.direction)
    text = json.dumps(payload, indent=2)
    if args.output == "-":
        sys.stdout.write(text + "\n")
    elif output is not None:
        write_output(output, text + "\n", "--output")
    return 0


def import_command(args: argparse.Namespace) -> int:
    """Add a pytest-benchmark JSON file to the store as one run."""
    from rlbench.analysis.interop import from_pytest_benchmark
    from rlbench.results.store import RunWriter, read_text

    path = Path(args.file)
    if not path.exists():
        raise DataError(f"no such file: {str(path)!r}")
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*.json"))[:3]
        hint = f" (it holds {', '.join(map(repr, found))}{', ...' if len(found) == 3 else ''})" if found else ""
        raise UsageError(
            f"{str(path)!r} is a folder: give one pytest-benchmark JSON file{hint}, as `pytest --benchmark-json FILE` "
            "or --benchmark-autosave writes them; import several one at a time"
        )
    text = read_text(path)  # a regular file only: a FIFO or /dev/zero is refused, not read forever
    try:
        data = json.loads(text)
    except Exception as exc:  # not JSON, nested past the recursion limit, too large: unreadable all the same
        raise DataError(f"{str(path)!r} is not readable JSON ({type(exc).__name__}: {exc})"[:300]) from None
    records = from_pytest_benchmark(data, str(path))
    writer = RunWriter(args.store, run_id=records[0].run_id)
    writer.write(records)
    print(f"imported {len(records)} benchmark(s) from {path} into {writer.path}")
    return 0

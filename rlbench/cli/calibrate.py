"""``rlbench calibrate``: measure the gate's verdicts on this machine (false FAILs, detections, INCONCLUSIVE rates,
rounds used by ``--rounds auto``), and publish them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rlbench.cli.parser import write_output
from rlbench.cli.progress import Bars, start_bars
from rlbench.core.errors import UsageError

DEFAULT_BENCHMARKS = "ppo-cartpole,gae"


def build_calibrate_parser(p: argparse.ArgumentParser) -> None:
    """The options of ``rlbench calibrate``."""
    p.add_argument(
        "--comparisons",
        type=int,
        default=20,
        metavar="N",
        help="comparisons per quiet condition, per condition with one steady neighbour, and for A/A with a CPU hog "
        "from halfway, interleaved (default 20)",
    )
    p.add_argument(
        "--hog-comparisons",
        type=int,
        default=10,
        metavar="N",
        help="comparisons per other loaded condition: two steady neighbours, a neighbour during B only, A then B with "
        "hogs (default 10)",
    )
    p.add_argument(
        "--max-rounds",
        type=int,
        default=40,
        metavar="N",
        help="--rounds auto: the most rounds per side of an interleaved comparison (default 40; at least 10, the first look)",
    )
    p.add_argument(
        "--separate-rounds",
        type=int,
        default=20,
        metavar="N",
        help="runs per side of the 'A then B' conditions, gated once afterwards (default 20; at least 5)",
    )
    p.add_argument("--threshold", type=float, default=2.5, metavar="PCT", help="gate threshold in percent (default 2.5)")
    p.add_argument(
        "--ppo-steps", type=int, default=16384, metavar="N", help="agent steps per ppo-cartpole run (default 16384)"
    )
    p.add_argument("--gae-calls", type=int, default=1000, metavar="N", help="timed gae calls per run (default 1000)")
    p.add_argument(
        "--benchmarks",
        default=DEFAULT_BENCHMARKS,
        metavar="A,B",
        help=f"benchmarks to calibrate (default {DEFAULT_BENCHMARKS})",
    )
    p.add_argument(
        "--conditions",
        default=None,
        metavar="A,B",
        help="conditions to run (default: all of aa, plus5, plus10, hog-interleaved, hog-a-then-b, steady-aa, "
        "steady-plus5, steady2-aa, steady2-plus5, candidate-interleaved, candidate-hogs)",
    )
    p.add_argument("--out", default="reports/gate-calibration.md", help="markdown report to write; the JSON goes beside it")
    p.add_argument("--json", action="store_true", help="also print every comparison as one JSON object on stdout")
    p.add_argument(
        "--render", metavar="JSON", help="measure nothing: write the report again from the JSON an earlier run saved"
    )


def validate(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Check every option before anything runs; returns the benchmarks and conditions to run.

    Raises:
        UsageError: A value out of range, or an unknown benchmark or condition.
    """
    import math

    from rlbench.analysis.calibration import BENCHMARKS, CONDITIONS, PPO_BATCH, parse_names

    for flag, value, least in (
        ("--comparisons", args.comparisons, 1),
        ("--hog-comparisons", args.hog_comparisons, 1),
        ("--max-rounds", args.max_rounds, 10),
        ("--separate-rounds", args.separate_rounds, 5),
        ("--ppo-steps", args.ppo_steps, 2 * PPO_BATCH),
        ("--gae-calls", args.gae_calls, 1),
    ):
        if value < least:
            why = {
                "--max-rounds": " (the first look of --rounds auto)",
                "--separate-rounds": " (the gate needs 5 paired rounds for an interval)",
                "--ppo-steps": f" (two iterations of {PPO_BATCH:,} steps: the first one is left out)",
            }.get(flag, "")
            raise UsageError(f"{flag} must be at least {least:,}{why}, got {value:,}")
    if not (math.isfinite(args.threshold) and 0 < args.threshold < 100):
        raise UsageError(f"--threshold must be a percentage above 0 and below 100, got {args.threshold:g}")
    names = parse_names(args.benchmarks, BENCHMARKS, "--benchmarks")
    keys = tuple(c.key for c in CONDITIONS)
    conditions = parse_names(args.conditions, keys, "--conditions") if args.conditions is not None else list(keys)
    return names, conditions


def command_line(args: argparse.Namespace, names: list[str], conditions: list[str]) -> str:
    """The command that measured (every option that shapes the numbers, so it can be run again)."""
    from rlbench.analysis.calibration import BENCHMARKS, CONDITIONS

    parts = ["rlbench calibrate", f"--comparisons {args.comparisons}", f"--hog-comparisons {args.hog_comparisons}"]
    parts += [
        f"--max-rounds {args.max_rounds}",
        f"--separate-rounds {args.separate_rounds}",
        f"--threshold {args.threshold:g}",
    ]
    if "ppo-cartpole" in names:
        parts.append(f"--ppo-steps {args.ppo_steps}")
    if "gae" in names:
        parts.append(f"--gae-calls {args.gae_calls}")
    if names != list(BENCHMARKS):
        parts.append(f"--benchmarks {','.join(names)}")
    if conditions != [c.key for c in CONDITIONS]:
        parts.append(f"--conditions {','.join(conditions)}")
    return " ".join(parts)


class CalibrationProgress(Bars):
    """A rich bar per benchmark and condition on stderr, with the verdicts so far."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.progress: Any = None
        self.tasks: dict[tuple[str, str], Any] = {}
        self.counts: dict[tuple[str, str], dict[str, int]] = {}

    def __enter__(self) -> CalibrationProgress:
        if self.enabled:
            # the refresh thread takes the GIL from the timed code: keep it rare
            self.progress = start_bars("comparisons", "verdicts", refresh_per_second=2)
        return self

    def __call__(self, name: str, cond: Any, index: int, count: int, result: dict[str, Any] | None) -> None:
        if self.progress is None:
            return
        key = (name, cond.key)
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(f"{name} {cond.label}", total=count, verdicts="")
            self.counts[key] = {"FAIL": 0, "PASS": 0, "INCONCLUSIVE": 0, "busy": 0}
        if result is None:
            return
        c = self.counts[key]
        c[result["verdict"]] += 1
        c["busy"] += result["verdict"] == "INCONCLUSIVE" and result["busy"]
        words = f"FAIL {c['FAIL']}  PASS {c['PASS']}  INCONCLUSIVE {c['INCONCLUSIVE']} (busy {c['busy']})"
        self.progress.update(self.tasks[key], advance=1, verdicts=f"{words}, last after {result['rounds']} rounds")


def outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """The markdown report and the JSON beside it, both checked before anything is measured (``None``: not written).

    A character device (``--out /dev/null``) is written through and nothing is put beside it, so it gets no JSON.

    Raises:
        UsageError: Either path may not or cannot be written, ``--out`` ends in ``.json`` (its JSON would replace it),
            or an output is the ``--render`` input.
    """
    from rlbench.results.outputs import check_outputs, is_device

    if args.out is None or args.out == "-":
        return None, None
    out = Path(args.out)
    beside = None if args.render or is_device(out) else out.with_suffix(".json")
    if beside == out:
        raise UsageError(
            f"--out {args.out!r}: the report is markdown and its JSON goes beside it as {str(beside)!r}, the same file; "
            f"give a .md path (e.g. {str(out.with_suffix('.md'))!r})"
        )
    report, data = check_outputs(
        [(out, "--out"), (beside, "--out's JSON")], inputs=[(args.render, "the --render input")] if args.render else ()
    )
    return report, data


def read_results(path: str) -> dict[str, Any]:
    """The results an earlier calibration saved (``--render``), read by rlbench's reader (a regular file only).

    Raises:
        UsageError: Not a regular file, not readable, not JSON, or not a calibration's results.
    """
    from rlbench.core.errors import DataError
    from rlbench.results.store import read_text

    try:
        data = json.loads(read_text(Path(path)))
    except DataError as exc:
        raise UsageError(f"--render: {exc}") from None
    except Exception as exc:  # not JSON, nested past the recursion limit, too large: unreadable all the same
        raise UsageError(
            f"--render {path!r}: cannot read a calibration's results from it ({type(exc).__name__}: {exc})"[:300]
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), dict):
        raise UsageError(
            f"--render {path!r}: cannot read a calibration's results from it (no 'benchmarks' object: give the JSON "
            "`rlbench calibrate` writes beside its report)"
        )
    return data


def calibrate_command(args: argparse.Namespace) -> int:
    """Run the calibration and write its report (markdown, and every comparison as JSON beside it)."""
    from rlbench.report.calibration import render
    from rlbench.report.format import finite

    names, conditions = validate(args) if not args.render else ([], [])
    out, beside = outputs(args)  # every output checked before anything is measured
    if args.render:
        data = read_results(args.render)
        try:
            text = render(data)
        except Exception as exc:  # a field of the wrong shape anywhere in the saved results
            raise UsageError(
                f"--render {args.render!r}: cannot read a calibration's results from it ({type(exc).__name__}: {exc})"[:300]
            ) from None
        if out is not None:
            write_output(out, text, "--out")
            print(f"report: {out}")
        else:
            sys.stdout.write(text)
        return 0
    from rlbench.analysis.calibration import calibrate
    from rlbench.results.fingerprint import machine_fingerprint

    t0 = time.perf_counter()
    with CalibrationProgress() as bar:
        data = calibrate(
            args.comparisons,
            args.max_rounds,
            args.threshold,
            args.ppo_steps,
            args.gae_calls,
            hog_comparisons=args.hog_comparisons,
            separate_rounds=args.separate_rounds,
            names=names,
            conditions=conditions,
            on_comparison=bar,
        )
    machine = machine_fingerprint()
    data = finite(
        {
            "command": command_line(args, names, conditions),
            "machine": {k: machine.get(k) for k in ("cpu", "cores", "id")},
            "wall_s": time.perf_counter() - t0,
            **data,
        }
    )
    payload = json.dumps(data, separators=(",", ":")) + "\n"  # compact: reports/ keeps to its size budget
    if beside is not None:  # the measurements first: the report can be written again from them (--render)
        save_results(beside, payload)
    text = render(data)
    if out is not None:
        write_output(out, text, "--out")
    if args.json:
        print(json.dumps(data))
    elif out is not None:
        print(f"report: {out}")
    else:
        sys.stdout.write(text)
    return 0


def save_results(path: Path, payload: str) -> None:
    """Write the calibration's results; if that fails after all (a full disk), into a temporary file instead.

    Raises:
        UsageError: Neither could be written (the message says why; ``--json`` prints them on stdout).
    """
    import tempfile

    try:
        write_output(path, payload, "--out's JSON")
    except UsageError as exc:
        try:
            fd, spare = tempfile.mkstemp(prefix="rlbench-calibration-", suffix=".json")
            with open(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
        except OSError:
            raise exc from None
        raise UsageError(
            f"{exc}; the results are saved in {spare} (`rlbench calibrate --render {spare}` writes the report)"
        ) from None

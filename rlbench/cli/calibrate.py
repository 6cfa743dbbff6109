"""``rlbench calibrate``: measure the gate's false-alarm and detection rates on this machine, and publish them."""

from __future__ import annotations

import argparse
import json

from rlbench.cli.parser import prepare_output, write_output


def build_calibrate_parser(p: argparse.ArgumentParser) -> None:
    """The options of ``rlbench calibrate``."""
    p.add_argument("--comparisons", type=int, default=20, help="comparisons per condition (default 20)")
    p.add_argument("--rounds", type=int, default=8, help="interleaved rounds per comparison (default 8)")
    p.add_argument("--threshold", type=float, default=2.5, help="gate threshold in percent (default 2.5)")
    p.add_argument("--ppo-steps", type=int, default=8192, help="agent steps per ppo-cartpole run (default 8192)")
    p.add_argument("--gae-calls", type=int, default=300, help="timed gae calls per run (default 300)")
    p.add_argument(
        "--hog-comparisons", type=int, default=None, help="comparisons per CPU-hog condition (default: --comparisons)"
    )
    p.add_argument("--out", default="reports/gate-calibration.md", help="markdown report to write")


def calibrate_command(args: argparse.Namespace) -> int:
    """Run the calibration and write its report (markdown, and the raw results as JSON beside it)."""
    from rlbench.analysis.calibration import calibrate
    from rlbench.report.calibration import render
    from rlbench.results.fingerprint import machine_fingerprint

    out = prepare_output(args.out, "--out")
    data = calibrate(args.comparisons, args.rounds, args.threshold, args.ppo_steps, args.gae_calls, args.hog_comparisons)
    options = {k: v for k, v in vars(args).items() if k not in ("out", "command") and v is not None}
    command = "rlbench calibrate " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items())
    write_output(out, render(data, machine_fingerprint(), command), "--out")
    write_output(out.with_suffix(".json"), json.dumps(data, indent=1), "--out")
    print(f"report: {out}")
    return 0

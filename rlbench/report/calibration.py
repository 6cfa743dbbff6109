"""Markdown of a gate calibration (``rlbench calibrate``): false alarms and detections per condition."""

from __future__ import annotations

from typing import Any

import numpy as np


def render(data: dict[str, Any], machine: dict[str, Any], command: str) -> str:
    """Markdown report of a calibration."""
    lines = [
        "# Gate calibration",
        "",
        f"Measured by `{command}` on {machine.get('cpu')}, {machine.get('cores')} cores (machine id `{machine.get('id')}`).",
        "",
        f"Each comparison: {data['rounds']} interleaved rounds (A B, B A, ...) paired by seed, then `rlbench gate` with "
        f"`--fail METRIC:{data['threshold_pct']:g}%` (fails only if significantly worse — 95% bootstrap CI of the paired "
        "median ratio entirely above 1 — and by more than the threshold). Slowdowns are injected with the test-only knob "
        "`RLBENCH_INJECT_DELAY` into the timed phase.",
        "",
        "| Benchmark | Metric | Condition | Gate failed | Rate | Median ratio measured | Median wall / comparison "
        "| Max wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, b in data["benchmarks"].items():
        for label, row in b["conditions"].items():
            res = row["results"]
            n, alarms = len(res), sum(r["alarm"] for r in res)
            walls = [r["wall_s"] for r in res]
            ratio = float(np.median([r["ratio"] for r in res]))
            kind = "false alarms" if label == "A/A" else "detected"
            lines.append(
                f"| {name} ({b['setup']}) | `{b['metric']}` | {label} | {alarms}/{n} {kind} | {100 * alarms / n:.0f}% "
                f"| {ratio:.3f} | {np.median(walls):.1f} s | {max(walls):.1f} s |"
            )
    return "\n".join(lines) + "\n"

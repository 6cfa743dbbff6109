"""Markdown of a gate calibration (``rlbench calibrate``): false alarms and detections per condition."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlbench.report.format import md_code


def render(data: dict[str, Any], machine: dict[str, Any], command: str) -> str:
    """Markdown report of a calibration."""
    lines = [
        "# Gate calibration",
        "",
        f"Measured by {md_code(command)} on {machine.get('cpu')}, {machine.get('cores')} cores "
        f"(machine id {md_code(machine.get('id'))}).",
        "",
        f"Each comparison: {data['rounds']} rounds per side, then `rlbench gate` with "
        f"`--fail METRIC:{data['threshold_pct']:g}%` "
        "(fails only if significantly worse — 95% bootstrap CI of the paired median ratio entirely above 1 — and by more "
        "than the threshold). Rounds interleave A B, B A, ... paired by seed, as `rlbench ab` runs them, except in the "
        "'A then B' condition, which runs every A round and then every B round, as two separate `rlbench run`s compared "
        "afterwards would. Slowdowns are injected with the test-only knob `RLBENCH_INJECT_DELAY` into the timed phase. "
        "'CPU hog from halfway' starts one spinning process per core halfway through the rounds and keeps it until the end.",
        "",
        "Every run records the machine's load (the share of CPU capacity other processes used, from `/proc/stat`). The gate "
        "refuses a verdict, exit 2 'machine was busy', when the two sides' loads differ by 10% of the machine or more in the "
        "direction that would explain the result; the last columns show what it would have said without that check.",
        "",
        "| Benchmark | Metric | Condition | Gate failed | Rate | Refused: machine busy | Failed without the load check "
        "| Load A / B (median) | Median ratio | Median wall / comparison |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, b in data["benchmarks"].items():
        for label, row in b["conditions"].items():
            res = row["results"]
            n, alarms = len(res), sum(r["alarm"] for r in res)
            refused = sum(r.get("refused", False) for r in res)
            unchecked = sum(r.get("alarm_without_load_check", r["alarm"]) for r in res)
            walls = [r["wall_s"] for r in res]
            ratio = float(np.median([r["ratio"] for r in res]))
            kind = "false alarms" if row.get("inject", 0) == 0 else "detected"
            loads = [r.get("load") or [None, None] for r in res]
            la = [x[0] for x in loads if x[0] is not None]
            lb = [x[1] for x in loads if x[1] is not None]
            load = f"{100 * np.median(la):.0f}% / {100 * np.median(lb):.0f}%" if la and lb else "–"
            lines.append(
                f"| {name} ({b['setup']}) | {md_code(b['metric'])} | {label} | {alarms}/{n} {kind} | {100 * alarms / n:.0f}% "
                f"| {refused}/{n} | {unchecked}/{n} | {load} | {ratio:.3f} | {np.median(walls):.1f} s |"
            )
    return "\n".join(lines) + "\n"

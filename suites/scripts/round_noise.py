"""Why a paired interval stays wide: the noise of interleaved ``ppo-cartpole`` rounds, iteration by iteration.

``python -m rlbench.suites.scripts.round_noise [--rounds 100] [--steps 65536] [--neighbours 1] [--report FILE]``

Runs ``--rounds`` interleaved A/A rounds (A B, B A, ...; round ``k`` both sides at seed ``k``), as ``rlbench
calibrate`` runs them (:func:`rlbench.analysis.calibration.ppo_side`, in this process, one torch thread), beside
``--neighbours`` CPU-bound processes, and keeps every iteration's ``update`` time (the first iteration of a run left
out, as the calibration does). Then, from those samples alone:

* **by run length**: each round's ratio (B over A) of a per-run statistic of the first N iterations (N = 15, 31, ...:
  the run lengths of 16,384, 32,768, ... steps), its spread between rounds (median absolute deviation, as a standard
  deviation of the log ratio), and the half-width of the gate's interval (the bootstrap of the median ratio at the
  98.33% per-look level of ``--rounds auto``) over windows of 40 rounds. Per-run statistics: the median (the gate's),
  the 25th percentile, and the minimum.
* **in time**: the share of iterations slower than 1.3 x the median iteration, how long such spells last (in
  iterations), and the autocorrelation of the log iteration time at several lags, over the rounds in the order they
  ran.

It answers whether longer runs would narrow the interval (they do when iterations vary independently, not when the
machine slows for spells longer than a run) and says nothing else; the gate's own calibration is ``rlbench
calibrate``. The samples are saved beside the report (``.samples.json``, a third of a megabyte: git ignores it);
``--samples FILE`` analyses a saved file again.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlbench.results.fingerprint import cpu_label, machine_fingerprint

STATS = {
    "median": lambda x: float(np.median(x)),
    "25th percentile": lambda x: float(np.quantile(x, 0.25)),
    "minimum": lambda x: float(np.min(x)),
}
LOOK_CONFIDENCE = 0.9833
WINDOW = 40


def measure(rounds: int, steps: int, neighbours: int) -> list[dict[str, Any]]:
    """Interleaved A/A rounds of ppo-cartpole: per round, each side's per-iteration update seconds and load."""
    import torch

    from rlbench.analysis.calibration import CPUHog, _order, ppo_side
    from rlbench.instrument.machine_load import LoadProbe

    torch.set_num_threads(1)
    hog = CPUHog(neighbours) if neighbours else None
    out: list[dict[str, Any]] = []
    try:
        if hog is not None:
            hog.start()
            time.sleep(0.5)
        for k in range(rounds):
            row: dict[str, Any] = {}
            for name in _order(k):
                probe = LoadProbe()
                row[name] = ppo_side(k, 0.0, steps)
                row[f"{name}_load"] = probe.stop().other_cpu
            out.append(row)
            print(f"round {k + 1}/{rounds}", file=sys.stderr, flush=True)
    finally:
        if hog is not None:
            hog.stop()
    return out


def _half_widths(log_ratios: np.ndarray) -> list[float]:
    from rlbench.analysis.compare import bootstrap_paired

    widths = []
    for start in range(0, log_ratios.size - WINDOW + 1, 10):
        _, low, high = bootstrap_paired(np.exp(log_ratios[start : start + WINDOW]), LOOK_CONFIDENCE)
        widths.append((high - low) / 2)
    return widths


def by_length(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-round ratio spread and 40-round interval half-width, by run length and per-run statistic."""
    longest = min(len(r["a"]) for r in rows)
    out = []
    n = 15
    while n <= longest:
        for name, stat in STATS.items():
            lr = np.array([math.log(stat(r["b"][:n]) / stat(r["a"][:n])) for r in rows])
            widths = _half_widths(lr)
            out.append(
                {
                    "iterations": n,
                    "steps": (n + 1) * 1024,
                    "statistic": name,
                    "mad": 1.4826 * float(np.median(np.abs(lr - np.median(lr)))),
                    "half_width": float(np.median(widths)) if widths else None,
                }
            )
        n = 2 * n + 1
    return out


def in_time(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Slow spells and autocorrelation of the iteration times, in the order they ran."""
    from rlbench.analysis.calibration import _order

    seq = np.array([v for k, r in enumerate(rows) for name in _order(k) for v in r[name]], dtype=float)
    slow = seq > 1.3 * np.median(seq)
    spells, run = [], 0
    for s in slow:
        if s:
            run += 1
        elif run:
            spells.append(run)
            run = 0
    if run:
        spells.append(run)
    logs = np.log(seq)
    lags = [lag for lag in (1, 5, 20, 100) if lag < logs.size - 2]
    return {
        "iterations": int(seq.size),
        "median_ms": float(np.median(seq) * 1e3),
        "slow_share": float(slow.mean()),
        "spells": len(spells),
        "spell_quantiles": [float(q) for q in np.quantile(spells, [0.5, 0.9, 0.99])] if spells else [],
        "spell_max": max(spells) if spells else 0,
        "autocorrelation": {str(lag): float(np.corrcoef(logs[:-lag], logs[lag:])[0, 1]) for lag in lags},
    }


def render(meta: dict[str, Any], lengths: list[dict[str, Any]], timing: dict[str, Any]) -> str:
    lines = [
        "# Interleaved ppo-cartpole rounds: where the noise is",
        "",
        f"Generated by `{meta['command']}` on {meta['cpu']}, {meta['cores']} cores (machine id `{meta['id']}`): "
        f"{meta['rounds']} interleaved A/A rounds of {meta['steps']:,}-step runs (identical code on both sides), "
        f"beside {meta['neighbours']} CPU-bound neighbour(s), in {meta['wall_s'] / 60:.0f} minutes; median load of "
        f"other processes {meta['load']:.0%}.",
        "",
        "## By run length",
        "",
        "Each round's ratio of a per-run statistic of the first N update iterations (B over A), its spread between "
        f"rounds, and the median half-width of the gate's {LOOK_CONFIDENCE:.2%} interval over windows of {WINDOW} "
        "rounds (the interval `--rounds auto` judges at its last look).",
        "",
        "| Iterations (run length) | Per-run statistic | Spread of the round ratio (MAD) | Interval half-width, 40 rounds |",
        "|---|---|---|---|",
    ]
    for row in lengths:
        hw = "n/a" if row["half_width"] is None else f"{row['half_width']:.2%}"
        lines.append(f"| {row['iterations']} ({row['steps']:,} steps) | {row['statistic']} | {row['mad']:.2%} | {hw} |")
    ac = ", ".join(f"lag {k}: {v:.2f}" for k, v in timing["autocorrelation"].items())
    q = timing["spell_quantiles"]
    spells = f"median {q[0]:g}, 90th percentile {q[1]:g}, 99th {q[2]:g}, longest {timing['spell_max']}" if q else "none"
    lines += [
        "",
        "## In time",
        "",
        f"{timing['iterations']:,} update iterations in the order they ran (median {timing['median_ms']:.2f} ms): "
        f"{timing['slow_share']:.0%} were more than 1.3x the median, in {timing['spells']} spells of consecutive slow "
        f"iterations (length in iterations: {spells}). Autocorrelation of the log iteration time: {ac}.",
        "",
        "Where the spread barely falls with the run length and the iteration times stay correlated over many "
        "iterations, the noise is the machine slowing for spells, not per-iteration jitter: longer runs do not narrow "
        "the interval, more rounds (or a quieter machine) do.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.round_noise", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=100, help="interleaved A/A rounds (default: 100)")
    p.add_argument("--steps", type=int, default=65536, help="agent steps per ppo-cartpole run (default: 65536)")
    p.add_argument("--neighbours", type=int, default=1, help="CPU-bound processes beside the rounds (default: 1)")
    p.add_argument("--samples", default=None, help="analyse a saved samples file instead of measuring")
    p.add_argument("--report", default="round-noise.md", help="markdown report (default: round-noise.md)")
    args = p.parse_args(argv)
    if args.rounds < WINDOW or args.steps < 16 * 1024 or args.neighbours < 0:
        p.error(f"--rounds must be >= {WINDOW}, --steps >= 16384 and --neighbours >= 0")
    report = Path(args.report)
    if args.samples:
        try:
            saved = json.loads(Path(args.samples).read_text(encoding="utf-8"))
            meta, rows = saved["meta"], saved["rounds"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"cannot read samples file {args.samples!r}: {exc}", file=sys.stderr)
            return 2
    else:
        t0 = time.perf_counter()
        rows = measure(args.rounds, args.steps, args.neighbours)
        fp = machine_fingerprint()
        loads = [r[k] for r in rows for k in ("a_load", "b_load") if r.get(k) is not None]
        meta = {
            "command": "python -m rlbench.suites.scripts.round_noise " + " ".join(argv if argv is not None else sys.argv[1:]),
            "cpu": cpu_label(fp),
            "cores": fp.get("cores"),
            "id": fp.get("id"),
            "rounds": args.rounds,
            "steps": args.steps,
            "neighbours": args.neighbours,
            "load": float(np.median(loads)) if loads else math.nan,
            "wall_s": time.perf_counter() - t0,
        }
        report.parent.mkdir(parents=True, exist_ok=True)
        report.with_suffix(".samples.json").write_text(json.dumps({"meta": meta, "rounds": rows}), encoding="utf-8")
    report.write_text(render(meta, by_length(rows), in_time(rows)), encoding="utf-8")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)

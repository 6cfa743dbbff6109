"""What ``rlbench profile --log-to`` and ``--live`` cost, side by side with plain profiling, on the CleanRL-style DQN.

``python -m rlbench.suites.scripts.tracker_cost --rounds 12 --report reports/profile-tracker-cost-cpu.md`` runs, in
every round and in a rotating order (each variant first, second, ... equally often, so a drift of the machine weighs
on all alike), the same ``rlbench profile --quiet`` command of ``cleanrl_dqn.py`` (about 3 s of training at the default
budget here) with:

* ``profile``: plain profiling (the baseline);
* ``--log-to tensorboard:DIR``: rlbench's own event file (the script opens no writer);
* ``--live``: the live view (drawn to a pipe here: its last frame; the script's output goes to a log, as with
  ``--quiet`` on the other sides);
* ``profile`` and ``--log-to tensorboard`` of the script run with ``--tensorboard-dir``: into the script's own writer, at
  its own steps (both sides write the script's own TensorBoard log, so only rlbench's logging differs).

Each figure is the whole command's wall, from its start to its exit (the script, the logging, the records and the
report). Per variant: each round's ratio to that round's baseline, their median and its distribution-free 95% interval
(:func:`rlbench.core.intervals.median_interval`). Beside it, the figure noise does not move: the CPU seconds rlbench's
logging thread itself used, from each run's ``profile/logging_s`` record, as a share of the script's wall. Nothing is
hard-coded: the report is generated from what this run measured, on the machine it names. ``--rounds 2 --steps 600``
is a smoke test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlbench.suites.scripts.accuracy import environment, script_env
from rlbench.suites.scripts.checkpoint import interrupted, package_version, sigterm_as_interrupt, start

from rlbench.core.intervals import median_interval
from rlbench.results.fingerprint import cpu_label
from rlbench.results.store import read_records

HERE = Path(__file__).resolve().parent
SCRIPT = "cleanrl_dqn.py"
DEFAULT_STEPS = 3000
"""About 3 s of training on a 2-vCPU machine of this project's kind (1 ms a step)."""
VARIANTS: dict[str, tuple[list[str], bool]] = {
    # name -> (rlbench profile options, the script writes its own TensorBoard log)
    "profile": ([], False),
    "--log-to tensorboard:DIR": (["--log-to", "tensorboard:{tb}"], False),
    "--live": (["--live"], False),
    "profile, script's writer": ([], True),
    "--log-to tensorboard, script's writer": (["--log-to", "tensorboard"], True),
}


def _baseline(name: str) -> str:
    return "profile, script's writer" if "script's writer" in name else "profile"


def command(name: str, tmp: Path, k: int, steps: int) -> list[str]:
    options, own_writer = VARIANTS[name]
    tag = f"{k}-{list(VARIANTS).index(name)}"
    options = [o.format(tb=str(tmp / f"tb-{tag}")) for o in options]
    store = tmp / f"store-{tag}"
    quiet = [] if "--live" in options else ["--quiet"]  # (--live draws instead: the script's output goes to a log alike)
    cmd = [sys.executable, "-m", "rlbench", "profile", *quiet, "--store", str(store), *options, "--", "python"]
    cmd += [str(HERE / SCRIPT), "--total-timesteps", str(steps), "--seed", "1"]
    if own_writer:
        cmd += ["--tensorboard-dir", str(tmp / f"runs-{tag}")]
    return cmd


def one_run(name: str, tmp: Path, k: int, steps: int) -> dict[str, Any]:
    """One whole command: its wall, start to exit, and what its logging thread used (``profile/logging_s``)."""
    cmd = command(name, tmp, k, steps)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=script_env(), cwd=tmp, timeout=600)
    wall = time.perf_counter() - t0
    store = Path(cmd[cmd.index("--store") + 1])
    records = read_records(store)
    logged = [r for r in records if r.metric == "profile/logging_s"]
    out: dict[str, Any] = {"wall_s": wall}
    if logged:  # the logging thread's CPU, and the wall it ran over (the script's, from the thread's start)
        m = logged[0].meta
        out.update(
            {
                "logging_cpu_s": logged[0].samples[0],
                "script_wall_s": m.get("wall_s"),
                "points": m.get("points"),
                "series": m.get("series"),
                "failures": m.get("failures_n", 0),
            }
        )
    return out


def measure(tmp: Path, rounds: int, steps: int, names: list[str], results: dict[str, Any], save: Any) -> None:
    runs = results.setdefault("runs", {n: [] for n in names})
    for k in range(len(next(iter(runs.values()), [])), rounds):
        order = names[k % len(names) :] + names[: k % len(names)]  # each variant in each position equally often
        row = {}
        for name in order:
            row[name] = one_run(name, tmp, k, steps)
        for name in names:
            runs[name].append(row[name])
        save()
        print(f"round {k + 1}/{rounds}: " + ", ".join(f"{n} {row[n]['wall_s']:.2f} s" for n in names), flush=True)


def _pct(v: float) -> str:
    return f"{100 * v:+.2f}%"


def render(results: dict[str, Any]) -> str:
    meta = results.get("_meta", {})
    env = meta.get("environment", {})
    machine, soft = env.get("machine", {}), env.get("software", {})
    runs = results.get("runs") or {}
    n = min((len(v) for v in runs.values()), default=0)
    lines = [
        "# What `rlbench profile --log-to` and `--live` cost",
        "",
        f"Machine: {cpu_label(machine)}, {machine.get('cores', '?')} cores; Python {soft.get('python', '?')}, torch "
        f"{soft.get('packages', {}).get('torch', '?')}, tensorboard {meta.get('tensorboard', '?')}.",
        "",
        f"Command: `python -m rlbench.suites.scripts.tracker_cost --rounds {meta.get('rounds')} --steps "
        f"{meta.get('steps')}` ({meta.get('seconds', 0) / 60:.0f} min"
        + (f", at {', '.join(str(c)[:7] for c in meta.get('commits') or [])}" if meta.get("commits") else "")
        + f"): `rlbench profile --quiet` of `{SCRIPT} --total-timesteps {meta.get('steps')}`, {n} rounds, the "
        "variants in a rotating order. Each figure is the whole command's wall, start to exit, on this machine, in this "
        "run; each round's ratio is to that round's own baseline (the same script profiled without `--log-to`/`--live`).",
        "",
        "| Variant | Median wall | Against its baseline, per round: median (95% interval) | Logging thread's CPU, of the "
        "script's wall | Points × series |",
        "|---|---|---|---|---|",
    ]
    verdicts = []
    for name, rows in runs.items():
        rows = rows[:n]
        walls = [r["wall_s"] for r in rows]
        base = _baseline(name)
        if name == base:
            against = "baseline"
        else:
            ratios = [r["wall_s"] / b["wall_s"] - 1 for r, b in zip(rows, runs[base][:n])]
            med, low, high, _, exact = median_interval(ratios)
            against = f"**{_pct(med)}** ({_pct(low)} … {_pct(high)})" + ("" if exact else ", too few rounds for 95%")
            verdicts.append((name, med, low, high))
        shares = [
            r["logging_cpu_s"] / r["script_wall_s"]
            for r in rows
            if r.get("logging_cpu_s") is not None and r.get("script_wall_s")
        ]
        cpu = f"{100 * statistics.median(shares):.3f}%" if shares else "–"
        pts = [r for r in rows if r.get("points") is not None]
        points = (
            f"{statistics.median(r['points'] for r in pts):.0f} × {statistics.median(r['series'] for r in pts):.0f}"
            if pts
            else "–"
        )
        lines.append(f"| `{name}` | {statistics.median(walls):.2f} s | {against} | {cpu} | {points} |")
    lines += ["", "Target: each within 1% of plain profiling."]
    for name, med, low, high in verdicts:
        if high < 0.01:
            word = "within 1%: the interval's upper end is below it"
        elif low > 0.01:
            word = "over 1%: the whole interval is above it"
        else:
            word = f"not decided at this noise: the interval spans 1% (median {_pct(med)})"
        lines.append(f"- `{name}`: {word}.")
    lines += [
        "",
        "The logging thread's CPU is what rlbench's own logging code used in the script's process (reading the figures, "
        "computing the series, calling the tracker), from its own thread clock: the figure the machine's noise does not "
        "move. A tracker's own background threads and processes are not in it.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.tracker_cost", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=12, help="rounds; each runs every variant once (default 12)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"the DQN's --total-timesteps (default {DEFAULT_STEPS})")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS), help="which to run")
    p.add_argument("--report", default="profile-tracker-cost.md", help="markdown report (raw numbers beside it, .json)")
    p.add_argument("--restart", action="store_true", help="discard a partial run's numbers and start again")
    p.add_argument("--render", metavar="JSON", help="measure nothing: write the report from an earlier run's raw numbers")
    args = p.parse_args(argv)
    report = Path(args.report)
    if args.render:
        report.write_text(render(json.loads(Path(args.render).read_text(encoding="utf-8"))), encoding="utf-8")
        print(f"report: {report}")
        return 0
    names = list(dict.fromkeys([*(_baseline(v) for v in args.variants), *args.variants]))
    cp = start(report, {"rounds": args.rounds, "steps": args.steps, "variants": names}, args.restart)
    if cp is None:
        return 2
    t0 = time.perf_counter()
    results = cp.data
    try:
        with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="rlbench-tracker-cost-") as tmp:
            measure(Path(tmp), args.rounds, args.steps, names, results, lambda: cp.save(time.perf_counter() - t0))
    except KeyboardInterrupt:
        return interrupted(cp, "python -m rlbench.suites.scripts.tracker_cost " + " ".join(argv or sys.argv[1:]))
    results["_meta"] = {
        "rounds": args.rounds,
        "steps": args.steps,
        "environment": environment(),
        "tensorboard": package_version("tensorboard"),
        **cp.meta(time.perf_counter() - t0),
    }
    report.write_text(render(results), encoding="utf-8")
    report.with_suffix(".json").write_text(json.dumps(results, separators=(",", ":")), encoding="utf-8")
    cp.finish()
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What following a script's processes costs: a child's start-up, the command's fixed cost, a whole run.

``python -m rlbench.suites.scripts.follow_cost --report reports/profile-follow-cost-cpu.md`` measures, alternating the
sides of every pair (ABBA) so that a drift of the machine weighs on both alike:

* **a child's start-up**: a Python child (``python -c "import gymnasium"``, what an env worker starts with) started
  plain and started with the environment ``rlbench profile`` gives the script's processes (its ``sitecustomize`` joins
  the profile: rlbench's hooks imported and installed, a start marker written), each from its start to its exit;
* **the command's fixed cost**: a script that only imports torch and gymnasium, plain, under ``rlbench profile`` (which
  follows its processes: the start-up hook, the process table watched, the collection folder read) and under
  ``rlbench profile --no-follow``;
* **a whole run**: the CleanRL-style DQN (one process) and the CleanRL-style PPO with an ``AsyncVectorEnv`` of four
  worker processes, plain, under ``rlbench profile`` and under ``rlbench profile --no-follow``, each from its start
  to its exit, with the CPU time it and its processes used.

Nothing here is hard-coded: the report is generated from what this run measured, on the machine it names.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlbench.suites.scripts.accuracy import environment, script_env
from rlbench.suites.scripts.checkpoint import interrupted, sigterm_as_interrupt, start

from rlbench.profiling.follow import prepare
from rlbench.profiling.session import Settings
from rlbench.results.fingerprint import cpu_label

HERE = Path(__file__).resolve().parent
RUNS = {
    "cleanrl_dqn": ["cleanrl_dqn.py", "--total-timesteps", "4000", "--seed", "1"],
    "cleanrl_ppo_async": ["cleanrl_ppo.py", "--async-envs", "--total-timesteps", "16384", "--seed", "1"],
}


def _wall(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def _wall_cpu(cmd: list[str], env: dict[str, str], cwd: Path) -> list[float]:
    """``[wall, cpu]``: the command's wall, start to exit, and the CPU seconds (user + system) it and every process it
    waited for used: what a busy neighbour disturbs least, where the hooks' cost shows first."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = _wall(cmd, env, cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)]


def _pairs(a: Any, b: Any, n: int) -> list[tuple[float, float]]:
    """``n`` pairs of ``(a(), b())``, ABBA: a first in pairs 0 and 3 of every four."""
    out = []
    for k in range(n):
        if k % 4 in (1, 2):
            y = b()
            x = a()
        else:
            x = a()
            y = b()
        out.append((x, y))
    return out


def _env() -> dict[str, str]:
    """The scripts' environment, with Python's bytecode cache on (as after any ``pip install``, and in every run but a
    checkout's first): ``PYTHONDONTWRITEBYTECODE`` would have every process compile rlbench's modules anew."""
    env = script_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def child_startup(tmp: Path, n: int, code: str = "import gymnasium") -> list[tuple[float, float]]:
    env = _env()
    followed = {**env, **prepare(tmp / "follow", vars(Settings()), env.get("PYTHONPATH", ""))}
    cmd = [sys.executable, "-c", code]
    _wall(cmd, followed, tmp)  # the bytecode cache written
    return _pairs(lambda: _wall(cmd, env, tmp), lambda: _wall(cmd, followed, tmp), n)


def fixed_cost(tmp: Path, n: int) -> dict[str, list[float]]:
    trivial = tmp / "imports_only.py"
    trivial.write_text("import torch\nimport gymnasium\n", encoding="utf-8")
    env = _env()
    store = str(tmp / "store")
    plain = [sys.executable, str(trivial)]
    follow = [sys.executable, "-m", "rlbench", "profile", "--quiet", "--store", store, "--", "python", str(trivial)]
    nofollow = [*follow[:4], "--no-follow", *follow[4:]]
    runs = {"plain": plain, "profile": follow, "profile --no-follow": nofollow}
    out: dict[str, list[float]] = {k: [] for k in runs}
    order = list(runs)
    for cmd in runs.values():  # the bytecode cache written
        _wall(cmd, env, tmp)
    for k in range(n):
        for side in order if k % 2 == 0 else order[::-1]:
            out[side].append(_wall(runs[side], env, tmp))
    return out


def whole_run(name: str, tmp: Path, n: int) -> dict[str, list[list[float]]]:
    """``n`` rounds of the run plain, under ``rlbench profile`` and under ``rlbench profile --no-follow``, the order
    rotated every round; per side, each round's ``[wall, cpu]``."""
    args = RUNS[name]
    env = _env()
    script = [str(HERE / args[0]), *args[1:]]
    profiled = [sys.executable, "-m", "rlbench", "profile", "--quiet", "--store", str(tmp / "store")]
    runs = {
        "plain": [sys.executable, *script],
        "profile": [*profiled, "--", "python", *script],
        "profile --no-follow": [*profiled, "--no-follow", "--", "python", *script],
    }
    out: dict[str, list[list[float]]] = {k: [] for k in runs}
    order = list(runs)
    for k in range(n):
        for side in order[k % 3 :] + order[: k % 3]:
            out[side].append(_wall_cpu(runs[side], env, tmp))
    return out


def _ms(v: float) -> str:
    return f"{1000 * v:+.0f} ms" if abs(v) >= 0.01 else f"{1000 * v:+.1f} ms"


def _first(v: Any) -> float:
    """A pair side's wall: a number (runs before CPU time was kept), or ``[wall, cpu]``."""
    return float(v[0] if isinstance(v, list) else v)


def render(results: dict[str, Any]) -> str:
    meta = results.get("_meta", {})
    env = meta.get("environment", {})
    machine, soft = env.get("machine", {}), env.get("software", {})
    lines = [
        "# What following a script's processes costs",
        "",
        f"Machine: {cpu_label(machine)}, {machine.get('cores', '?')} cores; Python {soft.get('python', '?')}, torch "
        f"{soft.get('packages', {}).get('torch', '?')}.",
        "",
        f"Command: `python -m rlbench.suites.scripts.follow_cost --pairs {meta.get('pairs')}"
        + (f" --run-pairs {meta['run_pairs']}" if meta.get("run_pairs") else "")
        + "` "
        f"({meta.get('seconds', 0) / 60:.0f} min"
        + (f", at {', '.join(str(c)[:7] for c in meta.get('commits') or [])}" if meta.get("commits") else "")
        + "). Every pair alternates which side runs first (ABBA); each figure is a process's wall from its start to its "
        "exit, on this machine, in this run.",
        "",
    ]
    start_pairs = results.get("child_startup") or []
    bare_pairs = results.get("child_startup_bare") or []
    if start_pairs:
        lines += [
            "## A child's start-up",
            "",
            '`python -c "import gymnasium"` (what a vector env\'s worker starts with) and `python -c pass` (a child '
            "that imports nothing: the whole cost shows), plain, and with the environment `rlbench profile` gives the "
            "script's processes (its `sitecustomize` joins the profile before the child's own code: rlbench's hooks "
            "imported and installed, a start marker written; at exit, its result written). Python's bytecode cache is "
            "on, as after any `pip install`.",
            "",
            "| Child | Plain median | Followed median | **Added, paired (median)** | Range |",
            "|---|---|---|---|---|",
        ]
        for label, pairs in (('`python -c "import gymnasium"`', start_pairs), ("`python -c pass`", bare_pairs)):
            if not pairs:
                continue
            added = [b - a for a, b in pairs]
            lines.append(
                f"| {label} | {statistics.median(a for a, _ in pairs):.3f} s | "
                f"{statistics.median(b for _, b in pairs):.3f} s | **{_ms(statistics.median(added))}** | "
                f"{_ms(min(added))} … {_ms(max(added))} |"
            )
        added = [b - a for a, b in start_pairs]
        lines += [
            "",
            f"Target: following adds at most 50 ms to a child's start-up. Median over {len(added)} pairs of the env "
            f"worker's start: {_ms(statistics.median(added))}"
            + (" (met)." if statistics.median(added) <= 0.05 else " (not met)."),
            "",
        ]
    fixed = results.get("fixed_cost")
    if fixed:
        plain = statistics.median(fixed["plain"])
        lines += [
            "## The command's fixed cost",
            "",
            "A script that only imports torch and gymnasium, plain and under the whole command (records, report and "
            "all). By default the command follows the script's processes; `--no-follow` does not.",
            "",
            "| Side | Median wall | Range | Over plain (medians) |",
            "|---|---|---|---|",
        ]
        for side, walls in fixed.items():
            over = statistics.median(walls) - plain
            lines.append(
                f"| `{side}` | {statistics.median(walls):.3f} s | {min(walls):.3f}–{max(walls):.3f} s | "
                f"{'–' if side == 'plain' else _ms(over)} |"
            )
        over = statistics.median(fixed["profile"]) - plain
        lines += [
            "",
            f"Target: the whole command's fixed cost at most 0.3 s ({len(fixed['plain'])} rounds): {_ms(over)}"
            + (" (met)." if over <= 0.3 else " (not met)."),
            "",
        ]
    for name in RUNS:
        sides = results.get(name) or {}
        if isinstance(sides, list):  # an earlier run's pairs: (plain, profile)
            sides = {"plain": [a for a, _ in sides], "profile": [b for _, b in sides]}
        if not sides.get("plain"):
            continue
        lines += [
            f"## A whole run: `{' '.join(RUNS[name])}`",
            "",
            f"{len(sides['plain'])} rounds, each side once per round (the order rotated); the ratios are per round, "
            "against the same round's plain run.",
            "",
            "| Side | Median wall | Over plain, wall (median, range) | Median CPU | Over plain, CPU (median) |",
            "|---|---|---|---|---|",
        ]
        plain = sides["plain"]
        over: dict[str, float] = {}
        for side, values in sides.items():
            walls = [_first(v) for v in values]
            cpus = [v[1] for v in values if isinstance(v, list)]
            if side == "plain":
                lines.append(
                    f"| `plain` | {statistics.median(walls):.2f} s | – | "
                    f"{f'{statistics.median(cpus):.2f} s' if cpus else '–'} | – |"
                )
                continue
            ratios = [w / _first(p) - 1 for w, p in zip(walls, plain)]
            over[side] = statistics.median(ratios)
            cpu_ratios = [v[1] / p[1] - 1 for v, p in zip(values, plain) if isinstance(v, list) and isinstance(p, list)]
            lines.append(
                f"| `{side}` | {statistics.median(walls):.2f} s | **{100 * over[side]:+.1f}%** "
                f"({100 * min(ratios):+.1f}% … {100 * max(ratios):+.1f}%) | "
                f"{f'{statistics.median(cpus):.2f} s' if cpus else '–'} | "
                f"{f'{100 * statistics.median(cpu_ratios):+.1f}%' if cpu_ratios else '–'} |"
            )
        lines.append("")
        if "profile" in over and sides.get("profile --no-follow"):
            own = [_first(a) / _first(b) - 1 for a, b in zip(sides["profile"], sides["profile --no-follow"])]
            text = (
                f"Following itself (`profile` against `profile --no-follow`, round by round): median "
                f"{100 * statistics.median(own):+.1f}%, range {100 * min(own):+.1f}% … {100 * max(own):+.1f}%"
            )
            if min(own) < 0 < max(own):
                text += (
                    ": the range spans zero, so on this machine, in this run, the noise between runs is as large as "
                    "what following costs"
                )
            lines += [text + ".", ""]
        if name == "cleanrl_dqn" and "profile" in over:
            wall = over["profile"]
            lines += [
                f"Target: the whole command within 3% of the plain script: {100 * wall:+.1f}% wall at the median of "
                f"{len(sides['plain'])} rounds"
                + (" (met" if wall <= 0.03 else " (not met")
                + "; the rounds' own range is in the table).",
                "",
            ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.follow_cost", description=__doc__.split("\n")[0])
    p.add_argument(
        "--pairs", type=int, default=20, help="pairs per start-up measurement; whole runs take a third (default 20)"
    )
    p.add_argument("--run-pairs", type=int, help="rounds per whole run (default: a third of --pairs, at least 4)")
    p.add_argument("--report", default="profile-follow-cost.md", help="markdown report (raw numbers beside it, .json)")
    p.add_argument("--restart", action="store_true", help="discard a partial run's numbers and start again")
    p.add_argument("--render", metavar="JSON", help="measure nothing: write the report from an earlier run's raw numbers")
    args = p.parse_args(argv)
    report = Path(args.report)
    if args.render:
        report.write_text(render(json.loads(Path(args.render).read_text(encoding="utf-8"))), encoding="utf-8")
        print(f"report: {report}")
        return 0
    cp = start(report, {"pairs": args.pairs, "run_pairs": args.run_pairs}, args.restart)
    if cp is None:
        return 2
    t0 = time.perf_counter()
    results = cp.data
    try:
        with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="rlbench-follow-cost-") as tmp:
            tmp_path = Path(tmp)
            runs = args.run_pairs or max(4, args.pairs // 3)
            steps = [
                ("child_startup", lambda: child_startup(tmp_path, args.pairs)),
                ("child_startup_bare", lambda: child_startup(tmp_path, args.pairs, "pass")),
                ("fixed_cost", lambda: fixed_cost(tmp_path, max(4, args.pairs // 2))),
                *((name, lambda name=name: whole_run(name, tmp_path, runs)) for name in RUNS),
            ]
            for key, fn in steps:
                if key in results:
                    continue
                results[key] = fn()
                cp.save(time.perf_counter() - t0)
                print(f"{key}: done", file=sys.stderr)
    except KeyboardInterrupt:
        return interrupted(cp, "python -m rlbench.suites.scripts.follow_cost " + " ".join(argv or sys.argv[1:]))
    results["_meta"] = {
        "pairs": args.pairs,
        "run_pairs": args.run_pairs,
        "environment": environment(),
        **cp.meta(time.perf_counter() - t0),
    }
    report.write_text(render(results), encoding="utf-8")
    report.with_suffix(".json").write_text(json.dumps(results, separators=(",", ":")), encoding="utf-8")
    cp.finish()
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())

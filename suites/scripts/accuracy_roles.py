"""How right ``rlbench profile`` is on jobs of many processes and threads: every role's shares against hand timers.

``python -m rlbench.suites.scripts.accuracy_roles --report reports/profile-accuracy-roles-cpu.md`` runs, for each shape
below, the hand-instrumented copy (``hand/``) under the whole ``rlbench profile --json`` command, in rounds alternating
the shapes' order. The copy's own ``perf_counter`` timers (hand/timers.py: one set per role, thread and process) and
the automatic attribution measure the same run, so their shares compare without run-to-run noise:

* **shares per role**: for each role the copy times (the main process's main thread ``main``, an ``actor`` thread or
  process, each ``rank-N``, Ray's ``Actor``), each part's seconds over the role's own loop, by hand and automatically
  (the role's phases over its run, ``--json``'s ``roles``), the loop summed over the role's processes; the difference
  in percentage points;
* **the workers' own env time** (a vector env's workers: ``env-worker``): the automatic seconds against the hand ones,
  summed over the workers, as a ratio;
* **the main loop's waits** are parts of the roles above (``wait``).

Targets (issue: "Every process and thread of the job"): every role's shares within ±3 pp of its hand timers, the
workers' own env time within 10%, the main loop's waits within ±3 pp. Nothing here is hard-coded: the report is
generated from what this run measured, on the machine it names.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlbench.suites.scripts.accuracy import environment, sb3_logs_in_scratch, script_env
from rlbench.suites.scripts.checkpoint import interrupted, sigterm_as_interrupt, start

from rlbench.results.fingerprint import cpu_label

HERE = Path(__file__).resolve().parent
_ACTOR_LEARNER = {
    "actor": {"env": ["env"], "acting": ["inference", "transfer"], "wait": ["wait"]},
    "main": {
        "wait": ["wait"],
        "replay": ["replay"],
        "target": ["train/target"],
        "forward": ["train/forward"],
        "backward": ["train/backward"],
        "optimizer": ["train/optimizer"],
        "target_update": ["train/target_update"],
    },
}
_RANK = {
    "env": ["env"],
    "acting": ["inference", "transfer"],
    "forward": ["train/forward"],
    "backward": ["train/backward"],
    "optimizer": ["train/optimizer"],
    "collective": ["wait/collective"],
}
SHAPES: dict[str, dict[str, Any]] = {
    "cleanrl_ppo_async": {
        "title": "CleanRL-style PPO with gymnasium's AsyncVectorEnv (4 env workers)",
        "command": ["python", "cleanrl_ppo.py", "--async-envs", "--total-timesteps", "20000", "--seed", "1"],
        "roles": {
            "main": {
                "env": ["env"],
                "inference": ["inference"],
                "forward": ["train/forward"],
                "backward": ["train/backward"],
                "optimizer": ["train/optimizer"],
                "transfer": ["transfer"],
            }
        },
        "workers": "env-worker",
    },
    "sb3_ppo_subproc": {
        "title": "Stable-Baselines3 PPO with SubprocVecEnv (8 env workers, forkserver)",
        "command": ["python", "sb3_ppo.py", "--subproc", "--n-envs", "8", "--total-timesteps", "16384", "--seed", "1"],
        "roles": {
            "main": {
                "collect": ["collect"],
                "env": ["collect/env"],
                "inference": ["collect/inference"],
                "advantage": ["collect/advantage"],
                "train": ["train"],
                "forward": ["train/forward"],
                "backward": ["train/backward"],
                "optimizer": ["train/optimizer"],
            }
        },
        "workers": "env-worker",
    },
    "actor_learner_threads": {
        "title": "DQN-style actor-learner: an actor thread and the learner, a bounded queue.Queue",
        "command": ["python", "actor_learner_threads.py", "--total-timesteps", "6000", "--seed", "1"],
        "roles": _ACTOR_LEARNER,
    },
    "actor_learner_procs": {
        "title": "DQN-style actor-learner: two spawned actor processes and the learner, a multiprocessing queue",
        "command": ["python", "actor_learner_procs.py", "--total-timesteps", "4000", "--seed", "1"],
        "roles": {**_ACTOR_LEARNER, "actor": {**_ACTOR_LEARNER["actor"], "weights": ["weights"]}},
    },
    "ddp_torchrun": {
        "title": "A 2-rank DDP PPO-style update on CPU (gloo) under torchrun",
        "command": ["torchrun", "--nproc-per-node", "2", "ddp_update.py", "--iterations", "30", "--seed", "1"],
        "roles": {"rank-0": _RANK, "rank-1": _RANK},
    },
    "ray_actor_learner": {
        "title": "A Ray actor-learner: two Actor actors, the driver learning (ray.get, the object store)",
        "command": ["python", "ray_actor_learner.py", "--iterations", "30", "--seed", "1"],
        "roles": {
            "Actor": {"env": ["env"], "acting": ["inference", "transfer"], "weights": ["weights"]},
            "main": {
                "wait": ["wait/ray"],
                "forward": ["train/forward", "transfer"],
                "backward": ["train/backward"],
                "optimizer": ["train/optimizer"],
            },
        },
    },
}
SHARE_PP, WORKERS_RATIO = 3.0, 0.10


def _hand(base: Path) -> dict[str, dict[str, Any]]:
    """Per role, the copy's loops and parts summed over its processes and threads (the main script's single file, the
    older format, is role ``main``)."""
    out: dict[str, dict[str, Any]] = {}
    files = sorted(base.parent.glob(base.name + ".*.json"))
    if base.is_file():
        files.append(base)
    for f in files:
        data = json.loads(f.read_text(encoding="utf-8"))
        role = data.get("role", "main")
        r = out.setdefault(role, {"loop_s": 0.0, "phases": {}, "count": 0})
        r["loop_s"] += float(data["loop_s"])
        r["count"] += 1
        for k, v in data["phases"].items():
            r["phases"][k] = r["phases"].get(k, 0.0) + float(v)
    return out


def run_shape(name: str, tmp: Path) -> dict[str, Any]:
    """One round of one shape: the copy under ``rlbench profile --json``; each role's parts, hand and automatic."""
    cfg = SHAPES[name]
    env = script_env()
    env["RLBENCH_HAND_OUT"] = str(tmp / "hand")
    command = list(cfg["command"])
    script = next(i for i, c in enumerate(command) if c.endswith(".py"))
    command[script] = str(HERE / "hand" / command[script])  # the hand-instrumented copy
    cmd = [sys.executable, "-m", "rlbench", "profile", "--json", "--quiet", "--store", str(tmp / "st"), "--", *command]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{name}: rlbench profile exited {done.returncode}: {done.stderr[-1500:]}")
    auto = json.loads(done.stdout)["roles"]
    hand = _hand(tmp / "hand")
    roles = {}
    for role, parts in cfg["roles"].items():
        h, a = hand[role], auto[role]
        loop = h["loop_s"]
        roles[role] = {
            "loop_s": loop,
            "processes": h["count"],
            "hand": {k: h["phases"].get(k, 0.0) / loop for k in parts},
            "auto": {k: sum(a["phases"].get(p, 0.0) for p in paths) / loop for k, paths in parts.items()},
            "pids": len(a["pids"]),
        }
    out: dict[str, Any] = {"roles": roles, "seconds": time.perf_counter() - t0}
    if cfg.get("workers"):
        w = cfg["workers"]
        out["workers"] = {
            "hand_s": hand[w]["phases"].get("env", 0.0),
            "auto_s": auto[w]["phases"].get("env", 0.0),
            "hand_n": hand[w]["count"],
            "auto_n": len(auto[w]["pids"]),
        }
    return out


def measure(names: list[str], rounds: int, cp: Any) -> dict[str, Any]:
    results: dict[str, Any] = cp.data
    for n in names:
        results.setdefault(n, [])
    t0 = time.perf_counter()
    for k in range(rounds):
        for name in names if k % 2 == 0 else list(reversed(names)):
            if len(results[name]) > k:
                continue
            with tempfile.TemporaryDirectory(prefix="rlbench-accuracy-roles-") as tmp:
                results[name].append(run_shape(name, Path(tmp)))
            cp.save(time.perf_counter() - t0)
            print(f"round {k + 1}/{rounds} {name}: ok", file=sys.stderr)
    return results


def _pp(v: float) -> str:
    return f"{v:+.2f}"


def render(results: dict[str, Any], rounds: int) -> str:
    env = results.get("_meta", {}).get("environment", {})
    machine = env.get("machine", {})
    soft = env.get("software", {})
    meta = results.get("_meta", {})
    worst = 0.0
    worst_ratio = 0.0
    body: list[str] = []
    for name, cfg in SHAPES.items():
        runs = results.get(name) or []
        if not runs:
            continue
        command = " ".join(cfg["command"])
        body += [
            f"## {cfg['title']}",
            "",
            f"`rlbench profile -- {command}` (the copy in `suites/scripts/hand/`), {len(runs)} rounds.",
            "",
        ]
        rows = []
        for role, parts in cfg["roles"].items():
            for part in parts:
                hand = [r["roles"][role]["hand"][part] * 100 for r in runs]
                auto = [r["roles"][role]["auto"][part] * 100 for r in runs]
                diff = [a - h for a, h in zip(auto, hand)]
                worst = max(worst, max(abs(d) for d in diff))
                rows.append(
                    [
                        f"`{role}`",
                        f"`{part}`",
                        ", ".join(f"`{p}`" for p in parts[part]),
                        f"{statistics.median(hand):.2f}",
                        f"{statistics.median(auto):.2f}",
                        _pp(statistics.median(diff)),
                        f"{max(abs(d) for d in diff):.2f}",
                    ]
                )
        body.append("| Role | Hand part | rlbench's phases | Hand % | rlbench % | Median diff (pp) | Largest (pp) |")
        body.append("|---|---|---|---|---|---|---|")
        body += ["| " + " | ".join(r) + " |" for r in rows]
        loops = {role: statistics.median(r["roles"][role]["loop_s"] for r in runs) for role in cfg["roles"]}
        counts = {role: runs[0]["roles"][role]["processes"] for role in cfg["roles"]}
        body += [
            "",
            "Each role's loop (median, summed over its processes): "
            + "; ".join(f"`{role}` {loops[role]:.2f} s over {counts[role]}" for role in cfg["roles"])
            + ".",
        ]
        if cfg.get("workers"):
            ratios = [r["workers"]["auto_s"] / r["workers"]["hand_s"] for r in runs if r["workers"]["hand_s"] > 0]
            worst_ratio = max(worst_ratio, max(abs(x - 1) for x in ratios))
            w = runs[0]["workers"]
            body += [
                "",
                f"**The workers' own env time** (`{cfg['workers']}`, {w['auto_n']} processes; the hand timer goes "
                f"around each worker's env): rlbench over hand {statistics.median(ratios):.3f} (median; range "
                f"{min(ratios):.3f}–{max(ratios):.3f}), target within 10%.",
            ]
        body.append("")
    head = [
        "# Profile accuracy on many processes and threads",
        "",
        f"Machine: {cpu_label(machine)}, {machine.get('cores', '?')} cores; Python {soft.get('python', '?')}, "
        f"torch {soft.get('packages', {}).get('torch', '?')}, ray {env.get('packages', {}).get('ray', '?')}, "
        f"stable-baselines3 {env.get('packages', {}).get('stable-baselines3', '?')}.",
        "",
        f"Command: `python -m rlbench.suites.scripts.accuracy_roles --rounds {rounds}` "
        f"({meta.get('seconds', math.nan) / 60:.0f} min{_at(meta)}). Each round runs every shape's "
        "hand-instrumented copy under the whole `rlbench profile` command, the shapes in alternating order; the copy's "
        "hand timers (one set per role and process) and rlbench's attribution time the same run. A part's share is its "
        "seconds over the role's own loop as the copy times it (summed over the role's processes), rlbench's the seconds "
        "of the phases listed over that same loop.",
        "",
        f"**Largest difference of any role's share from its hand timers, over every round: {worst:.2f} pp** (target "
        f"±{SHARE_PP:g} pp)."
        + (
            f" **The workers' own env time: within {100 * worst_ratio:.1f}%** of the hand timers' in every round "
            f"(target {100 * WORKERS_RATIO:g}%)."
            if any(SHAPES[n].get("workers") for n in SHAPES if results.get(n))
            else ""
        ),
        "",
    ]
    return "\n".join(head + body)


def _at(meta: dict[str, Any]) -> str:
    commits = meta.get("commits") or []
    return f", at {', '.join(str(c)[:7] for c in commits)}" if commits else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.accuracy_roles", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds per shape (default: 5)")
    p.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, from: {', '.join(SHAPES)} (default: all)")
    p.add_argument("--report", default="profile-accuracy-roles.md", help="markdown report (the raw numbers beside it, .json)")
    p.add_argument("--restart", action="store_true", help="discard a partial run's numbers and start again")
    p.add_argument("--render", metavar="JSON", help="measure nothing: write the report from an earlier run's raw numbers")
    args = p.parse_args(argv)
    names = [n for n in args.shapes.split(",") if n]
    unknown = [n for n in names if n not in SHAPES]
    if unknown or args.rounds < 1:
        p.error(f"unknown shapes {unknown} (choose from {list(SHAPES)}) or --rounds < 1")
    report = Path(args.report)
    if args.render:
        results = json.loads(Path(args.render).read_text(encoding="utf-8"))
        report.write_text(render(results, results.get("_meta", {}).get("rounds", args.rounds)), encoding="utf-8")
        print(f"report: {report}")
        return 0
    cp = start(report, {"shapes": names, "rounds": args.rounds}, args.restart)
    if cp is None:
        return 2
    t0 = time.perf_counter()
    try:
        with sigterm_as_interrupt(), sb3_logs_in_scratch():
            results = measure(names, args.rounds, cp)
    except KeyboardInterrupt:
        return interrupted(cp, "python -m rlbench.suites.scripts.accuracy_roles " + " ".join(argv or sys.argv[1:]))
    results["_meta"] = {"rounds": args.rounds, "environment": environment(), **cp.meta(time.perf_counter() - t0)}
    report.write_text(render(results, args.rounds), encoding="utf-8")
    report.with_suffix(".json").write_text(json.dumps(results, separators=(",", ":")), encoding="utf-8")
    cp.finish()
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())

"""What ``rlbench profile`` costs the person who runs it: the whole command against the plain script, in wall time.

``python -m rlbench.suites.scripts.command_cost --report reports/profile-cost-cpu.md`` runs, for each state of the
machine (``--loads 0 1``: quiet, then beside one CPU-busy process), and in alternating pairs:

* **each training script of the accuracy suite at about 20 s** (:data:`BUDGETS`, sized on this machine kind): ``python
  SCRIPT`` against ``rlbench profile --quiet -- python SCRIPT``, each a fresh process, spawn to exit;
* **a trivial script** that only imports torch and gymnasium, the same two ways: the command's fixed cost (starting
  the CLI and the profiled child, installing the hooks, fingerprints, writing records and the report).

``--side-by-side`` adds a state in which each pair's two runs start at the same moment (on a 2-core machine, one per
core as the scheduler places them; nothing is pinned): a slow spell of the whole host then slows both alike (the two
runs of a pair still differ: on this project's 2-vCPU machines the pairs spread about as widely that way, and pinned
runs of one script on the two cores differed by up to 11% with neither core persistently faster, ``docs/profiling.md``).

The report gives every pair's added seconds and added share (paired medians, min–max) against the issue's targets
(at most +3% on a 20 s script, at most +0.3 s on a trivial one), says where the pairs fall on both sides of 3% (the
verdict is then the median's) and at what confidence pairs all on one side decide it, and names the worst. Nothing
is hard-coded: every figure comes from the run that wrote it, on the machine it names. ``--render JSON`` re-renders
saved numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlbench.suites.scripts.accuracy import (
    HERE,
    SCRIPTS,
    SEED,
    _alternating,
    busy_load,
    command_argv,
    environment,
    plain_argv,
    run_command,
    run_plain,
    sb3_logs_in_scratch,
    script_env,
)
from rlbench.suites.scripts.checkpoint import interrupted, invocations, sigterm_as_interrupt, start

from rlbench.profiling.attribution import SAMPLE_EVERY, SAMPLE_FROM
from rlbench.results.fingerprint import cpu_label

# about 20 s of plain wall time per script on this machine kind (2 vCPU, one torch thread), imports included
BUDGETS: dict[str, list[str]] = {
    "cleanrl": ["--total-timesteps", "150000"],
    "sb3": ["--total-timesteps", "118000"],
    "torchrl": ["--total-frames", "18432"],
    "cleanrl_dqn": ["--total-timesteps", "22000"],
    "cleanrl_sac": ["--total-timesteps", "7600"],
    "cleanrl_td3": ["--total-timesteps", "12700"],
    "cleanrl_ppo_continuous": ["--total-timesteps", "112640"],
    "sb3_dqn": ["--total-timesteps", "16700"],
    "sb3_sac": ["--total-timesteps", "6300"],
    "torchrl_dqn": ["--total-frames", "6500"],
}
TARGET_SHARE = 0.03  # the whole command adds at most 3% to a 20 s script
TARGET_FIXED_S = 0.3  # and at most 0.3 s to a trivial one


TOGETHER = "together"
"""The machine state in which each pair's two runs start at the same moment, one per core (``--side-by-side``)."""


def run_together(cmds: dict[str, list[str]], tmp: Path) -> dict[str, dict[str, float]]:
    """Every command of ``cmds`` started at once (in its order, microseconds apart), each timed from its own spawn to
    its own exit, with its own CPU seconds (``os.wait4``: that child's usage and its waited-for children's alone).
    Their output goes to files in ``tmp``. A command that fails raises ``CalledProcessError``; an interruption ends
    them all (SIGTERM first: ``rlbench profile`` then ends its own child) before it propagates."""
    env = script_env()
    out: dict[str, dict[str, float]] = {}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    waiters: list[threading.Thread] = []

    def wait(side: str, proc: subprocess.Popen[bytes], t0: float) -> None:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except ChildProcessError:  # reaped by Popen itself (its terminate() polls first) while interrupted
            return
        end = time.perf_counter()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out[side] = {"wall": end - t0, "cpu": usage.ru_utime + usage.ru_stime}

    try:
        for side, cmd in cmds.items():
            with open(tmp / f"{side}.log", "wb") as log:
                t0 = time.perf_counter()
                procs[side] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
            waiters.append(threading.Thread(target=wait, args=(side, procs[side], t0), daemon=True))
            waiters[-1].start()
        for waiter in waiters:
            while waiter.is_alive():  # (a join with a timeout, so Ctrl-C reaches this thread)
                waiter.join(0.5)
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.terminate()
        for waiter in waiters:
            waiter.join(30)
        for proc in procs.values():
            if proc.returncode is None:  # still running 30 s after SIGTERM
                proc.kill()
        for waiter in waiters:
            waiter.join(5)
    for side, proc in procs.items():
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode or 1, cmds[side])
    return out


def _together(cmds: dict[str, list[str]], rounds: int, tmp: Path) -> dict[str, list[dict[str, float]]]:
    """:func:`run_together` ``rounds`` times, the start order reversed every round (as :func:`_alternating`)."""
    sides = list(cmds)
    out: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for k in range(rounds):
        order = sides if k % 2 == 0 else sides[::-1]
        times = run_together({side: cmds[side] for side in order}, tmp)
        for side in sides:
            out[side].append(times[side])
    return out


def _pair_runs(script: Path, args: list[str], rounds: int, tmp: Path, together: bool) -> dict[str, list[dict[str, float]]]:
    """``rounds`` pairs of the plain script and the whole command: alternating, or side by side."""
    if together:
        cmds = {"plain": plain_argv(script, args), "command": command_argv(script, args, tmp)}
        return _together(cmds, rounds, tmp)
    runs = {"plain": lambda: run_plain(script, args), "command": lambda: run_command(script, args, tmp)}
    return _alternating(runs, rounds)


def measure_state(
    names: list[str],
    rounds: int,
    trivial_rounds: int,
    load: int | str,
    out: dict[str, Any] | None = None,
    save: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Every script's pairs and the trivial script's, beside ``load`` CPU-busy processes, or (``load``
    :data:`TOGETHER`) each pair's two runs at once. ``out`` holds what an earlier invocation measured (not measured
    again); ``save`` is called after each script."""
    out = {} if out is None else out
    save = save or (lambda: None)
    together = load == TOGETHER
    label = "side by side" if together else f"load {load}"
    with busy_load(0 if together else int(load)), tempfile.TemporaryDirectory(prefix="rlbench-cost-") as tmp:
        if "_trivial" not in out:
            trivial = Path(tmp) / "imports_only.py"
            trivial.write_text("import torch\nimport gymnasium\n", encoding="utf-8")
            out["_trivial"] = _pair_runs(trivial, [], trivial_rounds, Path(tmp), together)
            save()
            print(f"{label} trivial: done", file=sys.stderr)
        for name in [n for n in names if n not in out]:
            script, args = HERE / SCRIPTS[name]["file"], [*BUDGETS[name], "--seed", str(SEED)]
            out[name] = _pair_runs(script, args, rounds, Path(tmp), together)
            save()
            walls = [round(x["wall"], 2) for side in ("plain", "command") for x in out[name][side]]
            print(f"{label} {name}: {walls}", file=sys.stderr)
    return out


def _spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def _pairs(
    result: dict[str, list[dict[str, float]]], key: str = "wall"
) -> tuple[list[float], list[float], list[float], list[float]]:
    plain = [x[key] for x in result["plain"]]
    command = [x[key] for x in result["command"]]
    added = [c - p for p, c in zip(plain, command)]
    share = [c / p - 1 for p, c in zip(plain, command)]
    return plain, command, added, share


def _straddles(share: list[float]) -> bool:
    """Whether the pairs disagree about the target: some within 3%, some over it."""
    return min(share) <= TARGET_SHARE < max(share)


def _verdict(share: list[float]) -> str:
    """The "Within 3%?" cell: the median pair's verdict, marked where the pairs fall on both sides of 3% (then the
    interval :func:`_confidence` gives for the median holds 3%, and the verdict is the median's alone)."""
    word = "yes" if statistics.median(share) <= TARGET_SHARE else "**no**"
    return f"{word} (median; pairs on both sides)" if _straddles(share) else word


def _confidence(pairs: int) -> float:
    """How often the smallest and the largest of ``pairs`` paired differences enclose the median of the differences
    such pairs make (a sign test: each pair falls above that median with probability 1/2, independently), so that
    every pair within 3% puts the median within it at this confidence: 1 - 2 * (1/2) ** pairs."""
    return 1.0 - 2.0 * 0.5**pairs


def _sampling_note(meta: dict[str, Any]) -> str:
    """How the profiled runs attributed iterations: saved since ``rlbench profile`` samples them (its default)."""
    every = meta.get("sample_every")
    if every is None:
        return ""
    if every == 1:
        return ", attributing every iteration"
    return (
        f", with the command's default sampling: from the {SAMPLE_FROM}th iteration on one in {every} is attributed "
        "and the others pass through the hooks (`docs/profiling.md`)"
    )


def _noise_line(rows: list[tuple[float, bool]], pairs: int) -> str:
    """What the machine's own noise lets these pairs decide (``pairs``: the fewest any script had)."""
    spread = statistics.median(r[0] for r in rows)
    split = sum(r[1] for r in rows)
    sure = (
        f"A script whose {pairs} pairs all fall on one side of 3% has its median pair on that side at "
        f"{100 * _confidence(pairs):.0f}% confidence (a sign test: the smallest and the largest pair enclose it)."
    )
    return (
        f"The plain runs alone spread by {100 * spread:.1f}% (max over min, median over the scripts), and "
        + (
            f"the pairs of {split} of {len(rows)} scripts fall on both sides of 3%: those verdicts are the median's, "
            "not a certainty. "
            if split
            else "every script's pairs agree on its verdict. "
        )
        + sure
    )


def _title(state: str) -> str:
    if state == TOGETHER:
        return "Side by side: each pair's two runs at once"
    load = int(state.removeprefix("load"))
    return "Quiet machine" if load == 0 else f"Loaded machine: {load} CPU-busy process{'es' if load > 1 else ''}"


def _where(state: str) -> str:
    if state == TOGETHER:
        return "side by side"
    return "on the quiet machine" if state == "load0" else f"with load {state.removeprefix('load')}"


def render(results: dict[str, Any]) -> str:
    meta = results["_meta"]
    env = meta["environment"]
    mach, soft, pkgs = env["machine"], env["software"], env["packages"]
    states = [k for k in results if not k.startswith("_")]
    lines = [
        "# What `rlbench profile` costs a user: the whole command against the plain script",
        "",
        "Generated by `python -m rlbench.suites.scripts.command_cost` from the runs it made; every figure below was "
        f"measured {invocations({'commits': [meta['commit']] if meta.get('commit') else [], **meta}, meta['seconds'])}.",
        "",
        f"- Machine: {cpu_label(mach)}, {mach.get('cores')} cores, {mach.get('memory_gib')} GiB, id `{mach.get('id')}`",
        f"- Software: Python {soft.get('python')}, torch {pkgs.get('torch')}, gymnasium {pkgs.get('gymnasium')}, "
        f"stable-baselines3 {pkgs.get('stable-baselines3')}, torchrl {pkgs.get('torchrl')}",
        f"- rlbench imported from {env['install']}; the profiled hooks were the "
        f"{'compiled ones (`rlbench/profiling/_fastevent.c`)' if meta.get('compiled') else 'Python wrappers'}"
        + _sampling_note(meta),
        "- Each side is a fresh process, timed from spawn to exit: `python SCRIPT ARGS` and "
        "`rlbench profile --quiet -- python SCRIPT ARGS` (starting the CLI, the profiled child, installing the hooks, "
        "fingerprints, records and the markdown report), alternating (side by side: at once), the order reversed every "
        "round. Added: each "
        "pair's difference; medians and (min–max) over the pairs.",
        "- The scripts are the accuracy suite's (`suites/scripts/`, unmodified for rlbench), at budgets sized for about "
        "20 s on this machine kind (the plain column says what each took). A loaded machine runs them beside CPU-busy "
        "processes (`while True: pass`), one per unit of load.",
        "",
    ]
    verdicts: list[tuple[str, float, str]] = []
    # per script: the plain runs' own spread, whether the pairs straddle 3%, how many pairs
    noise: list[tuple[str, float, bool, int]] = []
    for state in states:
        data = results[state]
        rounds = len(next(v for k, v in data.items() if not k.startswith("_"))["plain"])
        lines += [f"## {_title(state)}", "", f"{rounds} pairs per script.", ""]
        if state == TOGETHER:
            lines += [
                "Each pair's two runs start at the same moment and run at once, one per core, the start order reversed "
                "every round: a slow spell of the whole host hits both runs of a pair alike (a core slower than the other "
                "slows only the run on it), and each run is the other's load (a training script, where the loaded "
                "state has `while True: pass`). "
                "Each side's CPU seconds are its own process tree's (`os.wait4`). The side that ends first leaves the "
                "other the machine to itself for the rest of its run, which narrows the difference by a little.",
                "",
            ]
        lines += [
            "| Script (budget) | Plain s | `rlbench profile` s | **Added s** | **Added %** | Within 3%? | CPU s added % |",
            "|---|---|---|---|---|---|---|",
        ]
        for name in [n for n in data if not n.startswith("_")]:
            plain, command, added, share = _pairs(data[name])
            cpu = _pairs(data[name], "cpu")[3]
            med = statistics.median(share)
            verdicts.append((state, med, name))
            noise.append((state, max(plain) / min(plain) - 1, _straddles(share), len(share)))
            lines.append(
                f"| {name} (`{' '.join(BUDGETS[name])}`) | {_spread(plain)} | {_spread(command)} | "
                f"**{statistics.median(added):+.2f}** ({min(added):+.2f}…{max(added):+.2f}) | "
                f"**{100 * med:+.1f}%** ({100 * min(share):+.1f}…{100 * max(share):+.1f}%) | "
                f"{_verdict(share)} | "
                f"{100 * statistics.median(cpu):+.1f}% ({100 * min(cpu):+.1f}…{100 * max(cpu):+.1f}%) |"
            )
        plain, command, added, _ = _pairs(data["_trivial"])
        fixed = statistics.median(added)
        verdicts.append((state, fixed, "_trivial"))
        lines += [
            "",
            f"A trivial script (`import torch; import gymnasium`), {len(plain)} pairs: plain {_spread(plain)} s, the "
            f"whole command {_spread(command)} s, added **{fixed:+.2f} s** ({min(added):+.2f}…{max(added):+.2f}): "
            f"{'within' if fixed <= TARGET_FIXED_S else '**over**'} the 0.3 s target.",
            "",
        ]
    lines += ["## What this means", ""]
    for state in states:
        rows = [(share, name) for s, share, name in verdicts if s == state and name != "_trivial"]
        fixed = next(v for s, v, name in verdicts if s == state and name == "_trivial")
        over = [f"{name} ({100 * share:+.1f}%)" for share, name in sorted(rows, reverse=True) if share > TARGET_SHARE]
        worst_share, worst = max(rows)
        where = _where(state)
        lines.append(
            f"- {where.capitalize()}: the worst script is **{worst}, {100 * worst_share:+.1f}%**; "
            + (f"{len(over)} of {len(rows)} scripts are over 3%: {', '.join(over)}. " if over else "all are within 3%. ")
            + f"The trivial script's fixed cost is {fixed:+.2f} s. "
            + _noise_line(
                [(spread, split) for s, spread, split, _ in noise if s == state],
                min(n for s, _, _, n in noise if s == state),
            )
        )
    lines += [
        "",
        "Where the cost comes from: the fixed part (the trivial row) is paid once per run; the rest grows with the "
        "number of hooked calls per second of training, so scripts with many small steps (DQN, TD3: a replay sample, "
        "a target, a forward, a backward and an optimizer step per environment step) pay the most. "
        "`python -m rlbench.suites.scripts.overhead` measures the steady-state part alone (`--script`: the "
        "CleanRL-style PPO, DQN, SAC and TD3 scripts, hooks on and off in blocks of one run). The last column is the "
        "same pairs' CPU seconds (user + system of every process of each side): it leaves out time a virtual "
        "machine's host gave to others (steal), but not neighbours that slow the caches, and it counts the command's "
        "own processes working beside the script, which wall time hides when a core is free.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.command_cost", description=__doc__.splitlines()[0])
    p.add_argument("--scripts", default=",".join(BUDGETS), help=f"comma-separated, from: {', '.join(BUDGETS)}")
    p.add_argument("--rounds", type=int, default=3, help="alternating pairs per script and machine state (default: 3)")
    p.add_argument("--trivial-rounds", type=int, default=15, help="pairs for the trivial script (default: 15)")
    p.add_argument(
        "--loads",
        type=int,
        nargs="*",
        default=[0, 1],
        metavar="N",
        help="machine states: N CPU-busy processes beside each run (default: 0 1; none: only --side-by-side)",
    )
    p.add_argument(
        "--side-by-side",
        action="store_true",
        help="one more machine state, after the loads: each pair's two runs started at the same moment, one per core, "
        "so whatever the machine does meanwhile hits both (each is the other's load)",
    )
    p.add_argument("--report", default="profile-cost.md", help="markdown report to write (the raw numbers go beside it)")
    p.add_argument("--render", metavar="JSON", help="measure nothing: write the report from saved raw numbers")
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard a partial run's numbers (REPORT.partial.json, kept after each script while measuring: the same "
        "command run again goes on from there) and start again",
    )
    args = p.parse_args(argv)
    names = [n for n in args.scripts.split(",") if n]
    unknown = [n for n in names if n not in BUDGETS]
    if unknown or args.rounds < 1 or args.trivial_rounds < 1 or any(n < 0 for n in args.loads):
        p.error(f"unknown scripts {unknown} (choose from {list(BUDGETS)}), or a count below 1, or a negative load")
    if not args.loads and not args.side_by_side and not args.render:
        p.error("no machine state to measure: give --loads N (e.g. 0 1), --side-by-side, or both")
    report = Path(args.report)
    if args.render:
        results = json.loads(Path(args.render).read_text(encoding="utf-8"))
    else:
        from rlbench.profiling.autohooks import native_available

        settings = {"scripts": names, "rounds": args.rounds, "trivial_rounds": args.trivial_rounds, "loads": args.loads}
        if args.side_by_side:  # (only when asked: a checkpoint saved before the option existed stays continuable)
            settings["side_by_side"] = True
        cp = start(report, settings, args.restart)
        if cp is None:
            return 2
        t0 = time.perf_counter()
        try:
            with sigterm_as_interrupt(), sb3_logs_in_scratch():
                states: list[int | str] = [*args.loads, *([TOGETHER] if args.side_by_side else [])]
                for n in states:
                    state = cp.data.setdefault(TOGETHER if n == TOGETHER else f"load{n}", {})
                    measure_state(names, args.rounds, args.trivial_rounds, n, state, lambda: cp.save(time.perf_counter() - t0))
        except KeyboardInterrupt:
            return interrupted(cp, "python -m rlbench.suites.scripts.command_cost " + " ".join(argv or sys.argv[1:]))
        results = dict(cp.data)
        results["_meta"] = {
            "environment": environment(),
            "compiled": native_available(),
            "sample_every": SAMPLE_EVERY,  # Settings.sample_every's default, what every profiled run here used
            **cp.meta(time.perf_counter() - t0),
        }
        # compact: the raw numbers of one invocation are ~10 kB so, ~26 kB indented (reports/ is held under 5 MB)
        report.with_suffix(".json").write_text(json.dumps(results, separators=(",", ":")), encoding="utf-8")
        cp.finish()
    report.write_text(render(results), encoding="utf-8")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

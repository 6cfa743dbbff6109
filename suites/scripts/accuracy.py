"""How right and how costly ``rlbench profile`` is, on real training scripts: accuracy, overhead and invariance.

``python -m rlbench.suites.scripts.accuracy --report reports/profile-accuracy-cpu.md`` measures, for each script here
(CleanRL-style PPO, DQN, SAC, TD3 and continuous PPO; Stable-Baselines3 PPO, DQN and SAC; TorchRL PPO and DQN):

* **accuracy**, in rounds alternating the scripts' order: ``rlbench profile --count-ops -- python hand/SCRIPT``, the
  hand-instrumented copy under the profiler. The copy's own ``perf_counter`` timers and the automatic attribution
  measure the same run, so their shares compare without run-to-run noise. Every round uses the same seed, so op and
  sync counts per iteration must come out identical;
* **what a user waits for**: the unmodified script at the accuracy budget, plain (``python SCRIPT``) and as the whole
  ``rlbench profile --quiet -- python SCRIPT`` command, alternating, in wall time; ``--load N`` runs these overhead
  measurements beside N CPU-busy processes, to see the cost on a loaded machine;
* **the overhead of a whole run**: the unmodified script at the accuracy budget, plain and under the profiler's child
  process (``python -m rlbench.profiling.bootstrap``, exactly what ``rlbench profile`` spawns), alternating, in wall
  time: what profiling adds to the training run's own time;
* **the hooks' overhead**: the unmodified script run in this process with and without a profiling session,
  alternating, in CPU time;
* **the fixed cost per run**: a script that only imports torch and gymnasium, plain and under the profiler's child
  process, alternating; and the whole ``rlbench profile`` command on it, whose own work before and after the script
  (starting, writing records and the report) adds to the command's time but not to the script's;
* **the hooks' cost in instructions**, where valgrind is installed: the script run plain and with a session under
  cachegrind at two budgets; the difference of the two budgets' instruction counts, per agent step, leaves out
  imports, start-up and the session's fixed work. Instruction counts repeat run to run (one thread, one hash seed),
  so this figure does not depend on a shared machine's noise (CPU time on one varied by ±5% between identical runs).
  The merge gap is scaled to cachegrind's slowdown (:data:`GAP_SCALE`), and the merges are checked against a native
  run.

Nothing here is hard-coded: the report is generated from what this run measured, on the machine it names.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlbench.suites.scripts.checkpoint import (
    PEER_PACKAGES,
    Checkpoint,
    interrupted,
    invocations,
    package_version,
    sigterm_as_interrupt,
    start,
)

from rlbench.core.children import child_pythonpath
from rlbench.profiling.attribution import SAMPLE_EVERY, SAMPLE_FROM
from rlbench.profiling.launcher import Target, child_env, write_child_spec
from rlbench.profiling.session import Settings
from rlbench.results.fingerprint import cpu_label, machine_fingerprint, software_fingerprint
from rlbench.results.metrics import PROFILE_ATTRIBUTED
from rlbench.results.store import read_records

HERE = Path(__file__).resolve().parent

# hand phase -> the automatic phases (inclusive) that should hold the same time
SCRIPTS: dict[str, dict[str, Any]] = {
    "cleanrl": {
        "file": "cleanrl_ppo.py",
        "args": ["--total-timesteps", "50000"],
        "map": {
            "env": ["env"],
            "inference": ["inference"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
            "transfer": ["transfer"],
        },
        "top": ["env", "inference", "forward", "backward", "optimizer", "transfer"],
    },
    "sb3": {
        "file": "sb3_ppo.py",
        "args": ["--total-timesteps", "20000"],
        "map": {
            "collect": ["collect"],
            "env": ["collect/env"],
            "inference": ["collect/inference"],
            "advantage": ["collect/advantage"],
            "train": ["train"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
        },
        "top": ["collect", "train"],
    },
    "torchrl": {
        "file": "torchrl_ppo.py",
        "args": ["--total-frames", "10240"],
        "map": {
            "collect": ["collect"],
            "env": ["collect/env"],
            "inference": ["collect/inference"],
            "advantage": ["advantage"],
            "replay": ["replay"],
            "forward": ["train/loss"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
        },
        "top": ["collect", "advantage", "replay", "forward", "backward", "optimizer"],
    },
    "cleanrl_dqn": {
        "file": "cleanrl_dqn.py",
        "args": ["--total-timesteps", "4000"],
        "map": {
            "env": ["env"],
            "acting": ["inference"],
            "replay": ["replay"],
            "target": ["train/target"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
            "target_update": ["train/target_update"],
        },
        "top": ["env", "acting", "replay", "target", "forward", "backward", "optimizer", "target_update"],
    },
    "cleanrl_sac": {
        "file": "cleanrl_sac.py",
        "args": ["--total-timesteps", "2000"],
        "map": {
            "env": ["env"],
            "acting": ["inference"],
            "replay": ["replay"],
            "target": ["train/target"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
            "target_update": ["train/target_update"],
        },
        "top": ["env", "acting", "replay", "target", "forward", "backward", "optimizer", "target_update"],
    },
    "cleanrl_td3": {
        "file": "cleanrl_td3.py",
        "args": ["--total-timesteps", "2000"],
        "map": {
            "env": ["env"],
            "acting": ["inference"],
            "replay": ["replay"],
            "target": ["train/target"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
            "target_update": ["train/target_update"],
        },
        "top": ["env", "acting", "replay", "target", "forward", "backward", "optimizer", "target_update"],
    },
    "cleanrl_ppo_continuous": {
        "file": "cleanrl_ppo_continuous.py",
        "args": ["--total-timesteps", "16384"],
        "map": {
            "env": ["env"],
            "acting": ["inference"],
            "advantage": ["advantage"],
            # the hand copy's forward holds the no_grad approx_kl/clipfrac statistics between the forward and the losses
            "forward": ["train/forward", "train/target"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
        },
        "top": ["env", "acting", "advantage", "forward", "backward", "optimizer"],
    },
    "sb3_dqn": {
        "file": "sb3_dqn.py",
        "args": ["--total-timesteps", "3000"],
        "map": {
            "collect": ["collect"],
            "env": ["collect/env"],
            "acting": ["collect/inference"],
            "replay": ["collect/replay", "train/replay"],  # add in collect_rollouts, sample in train
            "target_update": ["collect/target_update", "train/target_update"],  # DQN's _on_step, in collect_rollouts
            "train": ["train"],
            "target": ["train/target"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
        },
        "top": ["collect", "train"],
    },
    "sb3_sac": {
        "file": "sb3_sac.py",
        "args": ["--total-timesteps", "1500"],
        "map": {
            "collect": ["collect"],
            "env": ["collect/env"],
            "acting": ["collect/inference"],
            "replay": ["collect/replay", "train/replay"],  # add in collect_rollouts, sample in train
            "train": ["train"],
            "target": ["train/target"],
            "forward": ["train/forward"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
            "target_update": ["train/target_update"],
        },
        "top": ["collect", "train"],
    },
    "torchrl_dqn": {
        "file": "torchrl_dqn.py",
        "args": ["--total-frames", "2000"],
        "map": {
            "collect": ["collect"],
            "env": ["collect/env"],
            "acting": ["collect/inference"],
            "replay": ["replay"],
            "forward": ["train/loss"],
            "backward": ["train/backward"],
            "optimizer": ["train/optimizer"],
            "target_update": ["train/target_update"],
        },
        "top": ["collect", "replay", "forward", "backward", "optimizer", "target_update"],
    },
}
SEED = 1


def script_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath()
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall seconds of ``cmd``, spawn to exit, and the CPU seconds (user + system) it used.

    CPU time is what a shared virtual machine's steal and neighbours disturb least: the hooks' cost shows there
    first, while wall time also carries whatever the host did meanwhile.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def plain_argv(script: Path, args: list[str]) -> list[str]:
    """``python script args``, as a user runs it."""
    return [sys.executable, str(script), *args]


def run_plain(script: Path, args: list[str]) -> dict[str, float]:
    """``python script args`` as a user runs it."""
    return _timed(plain_argv(script, args), script_env())


def run_profiled(script: Path, args: list[str], tmp: Path) -> dict[str, float]:
    """The script under the profiler's child process (what ``rlbench profile`` spawns)."""
    target = Target(sys.executable, False, str(script), args)
    spec = write_child_spec(tmp / "spec.json", target, args, tmp / "profiled.json", Settings())
    return _timed([sys.executable, "-m", "rlbench.profiling.bootstrap", str(spec)], child_env())


def hooks_overhead(script: Path, args: list[str], rounds: int) -> dict[str, list[float]]:
    """CPU seconds of the script run in this process without a profiling session, with one (the compiled hooks) and
    with one whose hooks are the Python wrappers (``RLBENCH_PURE_PYTHON_HOOKS``, as where the extension is not
    built), in rotating order.

    In one process the sides share imports, caches and the interpreter, so the difference is what the hooks
    cost; many short alternating runs beat a few long ones on a machine whose speed drifts.
    """
    import contextlib
    import io
    import runpy

    from rlbench.profiling.autohooks import PURE_PYTHON_ENV
    from rlbench.profiling.session import Session

    def once() -> float:
        sys.argv = [str(script), *args]
        t0 = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(str(script), run_name="__main__")
        return time.process_time() - t0

    saved = list(sys.argv)
    try:
        once()  # imports and first-use costs, on no side
        sides = ("plain", "hooked", "python")
        out: dict[str, list[float]] = {side: [] for side in sides}
        for k in range(rounds):
            for side in sides if k % 2 == 0 else sides[::-1]:
                if side == "plain":
                    out[side].append(once())
                    continue
                if side == "python":
                    os.environ[PURE_PYTHON_ENV] = "1"
                try:
                    with Session(Settings()):
                        out[side].append(once())
                finally:
                    os.environ.pop(PURE_PYTHON_ENV, None)
        return out
    finally:
        sys.argv = saved


# two budgets per script for the instruction counts: their difference is whole training iterations
INSTRUCTION_BUDGETS = {
    "cleanrl": ("--total-timesteps", 1536, 7680),  # 12 iterations apart: timing-dependent merges average out
    "sb3": ("--total-timesteps", 1024, 3072),
    "torchrl": ("--total-frames", 1024, 2048),
    "cleanrl_dqn": ("--total-timesteps", 1000, 2000),  # both past learning_starts (500): training steps apart
    "cleanrl_sac": ("--total-timesteps", 700, 1200),
    "cleanrl_td3": ("--total-timesteps", 700, 1200),
    "cleanrl_ppo_continuous": ("--total-timesteps", 2048, 4096),
    "sb3_dqn": ("--total-timesteps", 1000, 2000),
    "sb3_sac": ("--total-timesteps", 700, 1200),
    "torchrl_dqn": ("--total-frames", 1000, 1500),
}


GAP_SCALE = 40
"""Under cachegrind a script runs tens of times slower, so fewer hooked calls fall within the merge gap
(:data:`~rlbench.profiling.attribution.MERGE_GAP_S`) of the last one, and opening phases costs more than merging
into one: counted at the real gap, CleanRL-style PPO made 0.69 merges and 4.44 transitions per agent step under
cachegrind against 1.77 and 2.28 natively. The counting runs scale the gap by this factor; the report sets the merge
counts under cachegrind beside the native ones, so a mismatch shows."""
_STATS = "rlbench-accuracy-child:"


def _in_process(script: Path, args: list[str], hooked: bool, gap_scale: float = 1.0) -> None:
    """Run ``script`` in this process, under a profiling session when ``hooked`` (the child of :func:`instructions`).

    Hooked, it prints the session's merges, transitions and agent steps as one JSON line on stderr.
    """
    import contextlib
    import io
    import runpy

    from rlbench.profiling import attribution, autohooks
    from rlbench.profiling.session import Session

    attribution.MERGE_GAP_S *= gap_scale  # read by the hooks when they are made, at the session's start
    autohooks.MERGE_GAP_S = attribution.MERGE_GAP_S
    sys.argv = [str(script), *args]
    session = Session(Settings()) if hooked else None
    with contextlib.redirect_stdout(io.StringIO()), contextlib.ExitStack() as stack:
        if session is not None:
            stack.enter_context(session)
        runpy.run_path(str(script), run_name="__main__")
    if session is not None and session.outcome is not None:
        r = session.outcome.attribution
        print(_STATS + json.dumps({"merges": r.merges, "transitions": r.transitions, "steps": r.steps}), file=sys.stderr)


def _child(script: Path, args: list[str], hooked: bool, valgrind: bool) -> tuple[int | None, dict[str, Any]]:
    """Instructions the child ran (``None`` natively) and, when hooked, its session's merge counts."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"] if valgrind else []
    cmd += [sys.executable, "-m", "rlbench.suites.scripts.accuracy", "--child", "hooked" if hooked else "plain"]
    cmd += [str(GAP_SCALE if valgrind else 1.0), str(script), *args]
    env = script_env()
    # one thread everywhere: cachegrind counts every thread's instructions, and idle BLAS/OpenMP workers spinning
    # would add counts that depend on timing, not on the work. One hash seed: with a random one, string-keyed dict
    # lookups probe differently each run, and 1,000 DQN steps' counts varied by tens of millions of instructions (so
    # per step by tens of thousands, more than the hooks add); with it fixed, two runs differed by 2,765 in 11.5 billion
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    count, stats = None, {}
    for line in done.stderr.splitlines():
        if line.startswith(_STATS):
            stats = json.loads(line[len(_STATS) :])
        elif "I" in line and "refs:" in line:
            count = int(line.split("refs:")[1].strip().replace(",", ""))
    if done.returncode != 0 or (valgrind and count is None) or (hooked and not stats):
        raise RuntimeError(f"the counting child failed (exit {done.returncode}): {done.stderr[-400:]}")
    return count, stats


def instructions(name: str) -> dict[str, Any]:
    """Instructions per agent step, plain and hooked, from two budgets' difference (two cachegrind runs at a time).

    Also the hooked session's merges and transitions per agent step, under cachegrind and in a native run.
    """
    from concurrent.futures import ThreadPoolExecutor

    flag, low, high = INSTRUCTION_BUDGETS[name]
    script = HERE / SCRIPTS[name]["file"]

    def argv(n: int) -> list[str]:
        return [flag, str(n), "--seed", str(SEED)]

    jobs = [(hooked, n) for hooked in (False, True) for n in (low, high)]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda j: _child(script, argv(j[1]), j[0], True), jobs))
    counts = [int(c or 0) for c, _ in done]
    _, native = _child(script, argv(high), True, False)

    def per_step(stats: dict[str, Any]) -> dict[str, float]:
        return {k: stats[k] / stats["steps"] for k in ("merges", "transitions")}

    per = {"plain": (counts[1] - counts[0]) / (high - low), "hooked": (counts[3] - counts[2]) / (high - low)}
    return {"budgets": [low, high], "counts": counts, **per, "counted": per_step(done[3][1]), "native": per_step(native)}


def command_argv(script: Path, args: list[str], tmp: Path, *options: str) -> list[str]:
    """``rlbench profile --quiet [options] -- python script args``, its records in ``tmp``'s store."""
    cmd = [sys.executable, "-m", "rlbench", "profile", "--quiet", *options, "--store", str(tmp / "store"), "--", "python"]
    return [*cmd, str(script), *args]


def run_command(script: Path, args: list[str], tmp: Path) -> dict[str, float]:
    """The whole ``rlbench profile --quiet -- python script args`` command, as a user runs it."""
    return _timed(command_argv(script, args, tmp), script_env())


def fixed_cost(tmp: Path, rounds: int) -> dict[str, list[float]]:
    """Wall seconds of a script that only imports torch and gymnasium: plain, under the profiler's child process,
    and under the whole ``rlbench profile`` command, in rotating order.

    Profiled minus plain is what the profiler adds to a run once: importing rlbench, installing the hooks, measuring
    their costs at the end and writing the results. The command minus the child is the command's own work before the
    script starts and after it ends (starting the CLI, fingerprints, writing records and the report).
    """
    trivial = tmp / "imports_only.py"
    trivial.write_text("import torch\nimport gymnasium\n", encoding="utf-8")
    runs = {
        "plain": lambda: run_plain(trivial, []),
        "profiled": lambda: run_profiled(trivial, [], tmp),
        "command": lambda: run_command(trivial, [], tmp),
    }
    return {side: [t["wall"] for t in times] for side, times in _alternating(runs, rounds).items()}


def whole_run(script: Path, args: list[str], tmp: Path, rounds: int) -> dict[str, list[dict[str, float]]]:
    """Wall and CPU seconds of ``script`` plain and under the profiler's child process, alternating: the overhead of a
    whole profiled run, hooks and fixed cost together, as the training run itself feels it."""
    runs = {"plain": lambda: run_plain(script, args), "profiled": lambda: run_profiled(script, args, tmp)}
    return _alternating(runs, rounds)


def user_wait(script: Path, args: list[str], tmp: Path, rounds: int) -> dict[str, list[dict[str, float]]]:
    """Wall and CPU seconds of ``python script`` and of the whole ``rlbench profile --quiet -- python script`` command,
    alternating: what a user waits for, the command's own work before and after the script included."""
    runs = {"plain": lambda: run_plain(script, args), "command": lambda: run_command(script, args, tmp)}
    return _alternating(runs, rounds)


BUSY = "while True: pass"


@contextlib.contextmanager
def busy_load(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` CPU-busy processes for the duration of the block (none for 0), killed however the block ends."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _alternating(runs: dict[str, Callable[[], dict[str, float]]], rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each run once per round, in the given order on even rounds and reversed on odd ones (drift hits all alike)."""
    sides = list(runs)
    out: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for k in range(rounds):
        for side in sides if k % 2 == 0 else sides[::-1]:
            out[side].append(runs[side]())
    return out


def run_accuracy(hand: Path, args: list[str], tmp: Path, mapping: dict[str, list[str]], top: list[str]) -> dict[str, Any]:
    """Hand copy under ``rlbench profile``: hand shares, automatic shares, and op counts, from the same run."""
    out, store = tmp / "hand.json", tmp / "store"
    env = script_env()
    env["RLBENCH_HAND_OUT"] = str(out)
    cmd = command_argv(hand, args, tmp, "--count-ops")
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    handed = json.loads(out.read_text(encoding="utf-8"))
    records = read_records(store)
    run_id = records[-1].run_id
    records = [r for r in records if r.run_id == run_id]
    wall = next(r for r in records if r.metric == "wall_s").meta["run_s"]
    run_s = {r.metric[len("time/") :]: r.meta.get("run_s", 0.0) for r in records if r.metric.startswith("time/")}
    loop = handed["loop_s"]  # one denominator for both: the hand copy's training loop, timed in this same run
    auto = {k: sum(run_s.get(p, 0.0) for p in paths) / loop for k, paths in mapping.items()}
    hand_share = {k: handed["phases"].get(k, 0.0) / loop for k in mapping}
    counts = {r.metric: r.samples[0] for r in records if r.metric.split("/")[0] in ("ops", "syncs", "copies")}
    overhead = next((r.meta.get("share") for r in records if r.metric == "profile/overhead_s"), None)
    # the profile's defaults sample iterations from SAMPLE_FROM on: how many steady ones it attributed (None: all)
    sampled = next(
        (
            {"attributed": int(r.samples[0]), "steady": r.meta["steady"], "every": r.meta["every"]}
            for r in records
            if r.metric == PROFILE_ATTRIBUTED
        ),
        None,
    )
    return {
        "auto": auto,
        "hand": hand_share,
        "auto_other": 1 - sum(auto[k] for k in top),
        "hand_other": 1 - sum(hand_share[k] for k in top),
        "counts": counts,
        "estimated_overhead": overhead,
        "sampled": sampled,
        "loop_s": handed["loop_s"],
        "wall_s": wall,
    }


OVERHEAD_ARGS = {
    "cleanrl": ["--total-timesteps", "8192"],
    "sb3": ["--total-timesteps", "4096"],
    "torchrl": ["--total-frames", "4096"],
    "cleanrl_dqn": ["--total-timesteps", "1500"],
    "cleanrl_sac": ["--total-timesteps", "1000"],
    "cleanrl_td3": ["--total-timesteps", "1000"],
    "cleanrl_ppo_continuous": ["--total-timesteps", "4096"],
    "sb3_dqn": ["--total-timesteps", "1500"],
    "sb3_sac": ["--total-timesteps", "1000"],
    "torchrl_dqn": ["--total-frames", "1000"],
}


def measure(
    names: list[str], rounds: int, overhead_rounds: int, load: int = 0, cp: Checkpoint | None = None
) -> dict[str, Any]:
    """Accuracy rounds for every script, then the overhead measurements (beside ``load`` CPU-busy processes); raw
    numbers. With a checkpoint, each measurement is saved as it finishes and what it already holds is not measured
    again."""
    from rlbench.profiling.autohooks import native_available

    t0 = time.perf_counter()
    results: dict[str, Any] = cp.data if cp is not None else {}
    for n in names:
        results.setdefault(n, {"accuracy": []})
    results["_hooks"] = {"compiled": native_available()}

    def save(message: str) -> None:
        if cp is not None:
            cp.save(time.perf_counter() - t0)
        print(message, file=sys.stderr)

    for k in range(rounds):
        for name in names if k % 2 == 0 else list(reversed(names)):
            if len(results[name]["accuracy"]) > k:
                continue
            cfg = SCRIPTS[name]
            args = [*cfg["args"], "--seed", str(SEED)]
            with tempfile.TemporaryDirectory(prefix="rlbench-accuracy-") as tmp:
                value = run_accuracy(HERE / "hand" / cfg["file"], args, Path(tmp), cfg["map"], cfg["top"])
            results[name]["accuracy"].append(value)
            save(f"round {k + 1}/{rounds} {name} accuracy: ok")
    with busy_load(load):
        for name in [n for n in names if "command" not in results[n]]:
            args = [*SCRIPTS[name]["args"], "--seed", str(SEED)]
            with tempfile.TemporaryDirectory(prefix="rlbench-accuracy-") as tmp:
                results[name]["command"] = user_wait(HERE / SCRIPTS[name]["file"], args, Path(tmp), overhead_rounds)
            save(f"{name} command: {results[name]['command']}")
        for name in [n for n in names if "whole" not in results[n]]:
            args = [*SCRIPTS[name]["args"], "--seed", str(SEED)]
            with tempfile.TemporaryDirectory(prefix="rlbench-accuracy-") as tmp:
                results[name]["whole"] = whole_run(HERE / SCRIPTS[name]["file"], args, Path(tmp), overhead_rounds)
            save(f"{name} whole run: {results[name]['whole']}")
        for name in [n for n in names if "hooks" not in results[n]]:
            args = [*OVERHEAD_ARGS[name], "--seed", str(SEED)]
            results[name]["hooks"] = hooks_overhead(HERE / SCRIPTS[name]["file"], args, overhead_rounds)
            save(f"{name} hooks: {results[name]['hooks']}")
        if "_fixed" not in results:
            with tempfile.TemporaryDirectory(prefix="rlbench-accuracy-") as tmp:
                results["_fixed"] = fixed_cost(Path(tmp), overhead_rounds)
            save(f"fixed: {results['_fixed']}")
    if shutil.which("valgrind"):
        for name in [n for n in names if "instructions" not in results[n]]:
            results[name]["instructions"] = instructions(name)
            save(f"{name} instructions: {results[name]['instructions']}")
    return results


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def _install() -> str:
    """How rlbench is installed here: a profiled run's fixed cost includes importing it, which compiles every module
    from source where no bytecode is cached (a checkout run with ``PYTHONDONTWRITEBYTECODE=1``)."""
    import importlib.util
    from importlib.metadata import distributions

    import rlbench

    root = Path(rlbench.__file__).resolve().parent
    modules = [m for m in root.rglob("*.py") if "__pycache__" not in m.parts]
    cached = sum(Path(importlib.util.cache_from_source(str(m))).is_file() for m in modules)
    # pip writes direct_url.json into the environment's dist-info; the checkout's own egg-info (first on the path when
    # the harness runs from the checkout) has none, so every distribution of the name is asked
    found = list(distributions(name="rlbench"))
    if not found:
        how = "not installed"
    else:
        raw = next((text for d in found if (text := d.read_text("direct_url.json"))), None)
        editable = bool(json.loads(raw).get("dir_info", {}).get("editable")) if raw else None
        how = {True: "an editable install", False: "installed by pip, not editable"}.get(editable, "install unknown")
    return f"`{root}` ({how}; {cached} of {len(modules)} modules with cached bytecode)"


@contextlib.contextmanager
def sb3_logs_in_scratch() -> Iterator[None]:
    """Stable-Baselines3 makes an empty ``tempdir/SB3-<time>`` at every ``learn()`` unless ``SB3_LOGDIR`` names a
    folder: the SB3 scripts' runs (plain, hand-timed and profiled alike) log into one scratch folder, removed after."""
    with tempfile.TemporaryDirectory(prefix="rlbench-sb3-logs-") as scratch:
        before = os.environ.get("SB3_LOGDIR")
        os.environ["SB3_LOGDIR"] = scratch
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("SB3_LOGDIR", None)
            else:
                os.environ["SB3_LOGDIR"] = before


def environment() -> dict[str, Any]:
    """Where the numbers are measured: machine, software, how rlbench is installed, valgrind. Saved with them, so a
    report rendered again later (``--render``) still names the run's own."""
    soft = software_fingerprint()
    pkgs = {**soft.get("packages", {}), **{n: package_version(n) for n in PEER_PACKAGES}}
    return {
        "machine": machine_fingerprint(),
        "software": soft,
        "packages": pkgs,
        "install": _install(),
        "valgrind": _valgrind_version(),
    }


def _valgrind_version() -> str | None:
    if shutil.which("valgrind") is None:
        return None
    done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True)
    return done.stdout.strip().removeprefix("valgrind-")


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def render(results: dict[str, Any], rounds: int, seconds: float) -> str:
    """The markdown report."""
    env = results.get("_meta", {}).get("environment") or environment()
    mach, soft, pkgs = env["machine"], env["software"], env["packages"]
    files = ", ".join(f"`{SCRIPTS[n]['file']}`" for n in _scripts(results))
    lines = [
        "# `rlbench profile` on real training scripts: accuracy, overhead, invariance",
        "",
        "Generated by `python -m rlbench.suites.scripts.accuracy` from the runs it made; every figure below was measured "
        f"{invocations(results.get('_meta', {}), seconds)}, with {rounds} accuracy rounds per script and seed {SEED}.",
        "",
        f"- Machine: {cpu_label(mach)}, {mach.get('cores')} cores, {mach.get('memory_gib')} GiB, id `{mach.get('id')}`",
        f"- Software: Python {soft.get('python')}, torch {pkgs.get('torch')}, gymnasium {pkgs.get('gymnasium')}, "
        f"stable-baselines3 {pkgs.get('stable-baselines3')}, torchrl {pkgs.get('torchrl')}, tensordict "
        f"{pkgs.get('tensordict')}",
        f"- rlbench imported from {env['install']}",
        f"- Scripts: `suites/scripts/` ({files}: "
        "CleanRL-style, Stable-Baselines3 and TorchRL training on CartPole-v1 and Pendulum-v1, all unmodified for "
        "rlbench) and their hand-instrumented copies in `suites/scripts/hand/` (`time.perf_counter` around the calls a "
        "person would time; each copy's docstring says where).",
        "",
        "## Accuracy: automatic shares against the hand-instrumented copy",
        "",
        "The hand copy runs under `rlbench profile`, so both measurements come from the same run. Both shares are of "
        "the same denominator, the hand copy's training-loop wall time (`loop_s`); Python/other is what the top-level "
        "phases leave of it. "
        "Parent phases (SB3's and TorchRL's `collect`, `train`) contain the rows below them.",
        "",
    ]
    worst_all, worst_row = 0.0, "–"
    for name in _scripts(results):
        acc = results[name].get("accuracy")
        if not acc:
            continue
        lines += [f"### {name}", "", "| Phase | Hand share (median) | Automatic share (median) | Largest abs. difference |"]
        lines.append("|---|---|---|---|")
        for phase in SCRIPTS[name]["map"]:
            hand = [a["hand"][phase] for a in acc]
            auto = [a["auto"][phase] for a in acc]
            worst = max(abs(h - a) for h, a in zip(hand, auto))
            if worst > worst_all:
                worst_all, worst_row = worst, f"{name} `{phase}`"
            lines.append(
                f"| `{phase}` | {_pct(statistics.median(hand))} | {_pct(statistics.median(auto))} | {100 * worst:.2f} pp |"
            )
        other_h = [a["hand_other"] for a in acc]
        other_a = [a["auto_other"] for a in acc]
        worst = max(abs(h - a) for h, a in zip(other_h, other_a))
        if worst > worst_all:
            worst_all, worst_row = worst, f"{name} Python/other"
        lines.append(
            f"| Python/other (rest) | {_pct(statistics.median(other_h))} | {_pct(statistics.median(other_a))} | "
            f"{100 * worst:.2f} pp |"
        )
        lines += ["", _sampled_line(acc), ""]
    lines += [
        f"Largest difference over every row (Python/other included), script and round: **{100 * worst_all:.2f} pp**, "
        f"in {worst_row} (target: ±3 pp).",
        "",
    ]
    fixed = results.get("_fixed", {"plain": [], "profiled": [], "command": []})
    compiled = results.get("_hooks", {}).get("compiled", False)
    compiled_note = "" if compiled else ", **not built where this ran: both hooked columns are the Python wrappers**"
    fixed_s = statistics.median(fixed["profiled"]) - statistics.median(fixed["plain"]) if fixed["plain"] else math.nan
    command = fixed.get("command", [])
    command_s = statistics.median(command) - statistics.median(fixed["profiled"]) if command else math.nan
    whole_rounds = next((len(r["whole"]["plain"]) for r in results.values() if isinstance(r, dict) and "whole" in r), 0)
    load = results.get("_meta", {}).get("load", 0)
    lines += ["## Overhead", ""]
    lines += _user_wait(results, fixed, load)
    lines += [
        "### A whole profiled run, the child process alone",
        "",
        "Each script, unmodified, at the accuracy budget: run plain (`python SCRIPT`) and under the profiler's child "
        "process (`python -m rlbench.profiling.bootstrap`, what `rlbench profile` spawns: rlbench's imports, the "
        f"hooks, measuring their costs and writing the results), alternating over {whole_rounds} rounds, each run a "
        "fresh process. Wall time from "
        "spawn to exit, paired by round; the median of the paired ratios. The CPU column (user + system) is the same "
        "runs' CPU time.",
        "",
        "| Script (budget) | Plain wall s, median (min–max) | Profiled wall s | **Overhead, paired median (min–max)** | "
        "CPU overhead, paired median (min–max) |",
        "|---|---|---|---|---|",
    ]
    worst_whole = -math.inf
    for name, r in results.items():
        if name.startswith("_") or "whole" not in r:
            continue
        plain, prof = r["whole"]["plain"], r["whole"]["profiled"]
        wall = [b["wall"] / a["wall"] - 1 for a, b in zip(plain, prof)]
        cpu = [b["cpu"] / a["cpu"] - 1 for a, b in zip(plain, prof)]
        worst_whole = max(worst_whole, statistics.median(wall))
        lines.append(
            f"| {name} (`{' '.join(SCRIPTS[name]['args'])}`) | {_spread([x['wall'] for x in plain])} | "
            f"{_spread([x['wall'] for x in prof])} | **{100 * statistics.median(wall):+.1f}%** "
            f"({100 * min(wall):+.1f}…{100 * max(wall):+.1f}%) | {100 * statistics.median(cpu):+.1f}% "
            f"({100 * min(cpu):+.1f}…{100 * max(cpu):+.1f}%) |"
        )
    if math.isfinite(worst_whole):
        lines += ["", f"Largest median overhead of a whole run: **{100 * worst_whole:+.1f}%** (target: ≤ 3%).", ""]
    lines += [
        "### Its parts",
        "",
        "- **The hooks**, paid per event: the script run in one process, with and without a profiling session, "
        "alternating (CPU time, so a shared VM's steal does not count; in one process the sides share imports and "
        "caches). Paired by round; the median of the paired ratios.",
        "- **The fixed cost**, paid once per run: a script that only imports torch and gymnasium, plain and under "
        "the profiler's child process (importing rlbench, installing hooks, measuring their costs, writing results): "
        f"median **{fixed_s * 1e3:+.0f} ms** per run over {len(fixed['plain'])} rounds "
        f"(plain {_spread(fixed['plain'])}, profiled {_spread(fixed['profiled'])}).",
        "- **The command's own work**, before the script starts and after it ends (starting the CLI, fingerprints, "
        "writing records, the report and its charts): the whole `rlbench profile --quiet` command on the same script "
        f"took a median **{command_s:+.2f} s** more than its child process alone"
        + (f" ({_spread(command)})" if command else "")
        + ". It lengthens the command, not the training run.",
        "",
        f"The hooks are the compiled ones (`rlbench/profiling/_fastevent.c`){compiled_note}; the last column runs "
        "the same sessions with the Python wrappers they stand for (`RLBENCH_PURE_PYTHON_HOOKS=1`, what an install "
        "without a C compiler gets), in the same rounds. The sum of the parts estimates a whole run from the hooks' "
        "ratio, measured on shorter runs in CPU time, and the fixed cost; the whole-run table above measures the same "
        "thing directly, and where the two differ, the direct measurement is the one the target applies to."
        + _sampling_parts(results),
        "",
        "| Script (budget) | Plain CPU s, median (min–max) | Profiled CPU s | Hooks' overhead, paired median (min–max) | "
        "Estimated by the profiler itself | Sum of the parts at the accuracy budget (hooks + fixed cost) | "
        "Python hooks' overhead, paired median (min–max) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if name.startswith("_") or "hooks" not in r:
            continue
        plain, hooked, python = r["hooks"]["plain"], r["hooks"]["hooked"], r["hooks"].get("python", [])
        ratios = [b / a - 1 for a, b in zip(plain, hooked)]
        py = [b / a - 1 for a, b in zip(plain, python)]
        py_cell = f"{100 * statistics.median(py):+.1f}% ({100 * min(py):+.1f}…{100 * max(py):+.1f}%)" if py else "–"
        est = [a["estimated_overhead"] for a in r["accuracy"] if a.get("estimated_overhead") is not None]
        loop = statistics.median([a["wall_s"] for a in r["accuracy"]]) if r["accuracy"] else math.nan
        parts = statistics.median(ratios) + (fixed_s / loop if loop and math.isfinite(fixed_s) else math.nan)
        lines.append(
            f"| {name} (`{' '.join(OVERHEAD_ARGS[name])}`) | {_spread(plain)} | {_spread(hooked)} | "
            f"{100 * statistics.median(ratios):+.1f}% ({100 * min(ratios):+.1f}…{100 * max(ratios):+.1f}%) | "
            f"{_pct(statistics.median(est)) if est else '–'} | {100 * parts:+.1f}% of a {loop:.1f} s run | {py_cell} |"
        )
    counted = {n: r["instructions"] for n, r in results.items() if not n.startswith("_") and "instructions" in r}
    if counted:
        lines += [
            "",
            "The hooks' cost in instructions (cachegrind, valgrind "
            f"{env['valgrind']}): each script plain and under a session at two budgets; the budgets' difference "
            "divided by the agent steps between them leaves out imports, start-up and the session's fixed work. "
            "Every thread pool is set to one thread (`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`), so "
            "no idle worker's spinning is counted, and since `fd742d8` Python's hash seed is fixed (`PYTHONHASHSEED=0`; "
            "with a random one, dict lookups probe differently in every run and the counts of one build varied by tens "
            "of thousands of instructions a step). Instruction counts then repeat from run to run, unlike CPU time on "
            "this machine. They are not time: a step of these scripts spends much of its time on cache misses and "
            "mispredicted branches, which the hooks add more of, in share, than instructions (`docs/profiling.md` "
            "gives the CleanRL-style DQN's counts under cachegrind's cache and branch simulation).",
            "",
            f"Under cachegrind the merge gap is scaled by {GAP_SCALE}, since the script runs that much slower there and "
            "fewer calls would otherwise merge; the last columns show the merge and transition counts per agent step "
            "there and in a native run of the same budget.",
            "",
            "| Script (budgets) | Instructions per agent step, plain | Hooked | Hooks' overhead | "
            "Merges / transitions per step, counted | Native |",
            "|---|---|---|---|---|---|",
        ]
        for name, c in counted.items():
            flag = INSTRUCTION_BUDGETS[name][0]
            k, n = c["counted"], c["native"]
            lines.append(
                f"| {name} (`{flag}` {c['budgets'][0]} and {c['budgets'][1]}) | {c['plain']:,.0f} | {c['hooked']:,.0f} | "
                f"**{100 * (c['hooked'] / c['plain'] - 1):+.1f}%** | {k['merges']:.2f} / {k['transitions']:.2f} | "
                f"{n['merges']:.2f} / {n['transitions']:.2f} |"
            )
    lines += [
        "",
        "## Invariance: op and sync counts per iteration, run to run",
        "",
        "| Script | Counters compared | Identical in every round |",
        "|---|---|---|",
    ]
    for name, r in results.items():
        if name.startswith("_"):
            continue
        counts = [a["counts"] for a in r["accuracy"]]
        if not counts:
            continue
        same = all(c == counts[0] for c in counts)
        ops = counts[0].get("ops/iteration")
        syncs = counts[0].get("syncs/iteration")
        lines.append(
            f"| {name} | {len(counts[0])} (ops/iteration {ops:,.0f}, syncs/iteration {syncs:,.0f}) | "
            f"{'yes' if same else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def _sampled_line(acc: list[dict[str, Any]]) -> str:
    """What the profile attributed in these rounds: with its defaults, one steady iteration in ``every`` from the
    ``SAMPLE_FROM``-th on, the rest scaled from them (``docs/profiling.md``); runs saved before the harness recorded it
    were profiled before sampling existed, every iteration attributed."""
    if any("sampled" not in a for a in acc):
        return "Profiled before `rlbench profile` sampled iterations: every iteration attributed."
    sampled = [a["sampled"] for a in acc if a["sampled"]]
    if not sampled:
        return (
            f"Every iteration attributed in every round: sampling starts at the {SAMPLE_FROM}th iteration, and leaves "
            "out only iterations an env step or a collector's labelled rollout starts (`docs/profiling.md`)."
        )
    shares = [s["attributed"] / s["steady"] for s in sampled]
    first = sampled[0]
    return (
        f"Sampled iterations in {len(sampled)} of {len(acc)} rounds: one in {first['every']} attributed from the "
        f"{SAMPLE_FROM}th on, {first['attributed']:,} of {first['steady']:,} steady iterations in the first "
        f"({100 * min(shares):.1f}–{100 * max(shares):.1f}% of them over the rounds); the automatic shares scale them "
        "to the rest."
    )


def _sampling_parts(results: dict[str, Any]) -> str:
    """Whether the sessions measured here sampled iterations (saved since the harness records it)."""
    rounds = [a for n, r in results.items() if not n.startswith("_") for a in r.get("accuracy", [])]
    if not rounds or any("sampled" not in a for a in rounds):
        return ""
    return (
        f" Every session here runs with `rlbench profile`'s defaults: from the {SAMPLE_FROM}th iteration on, one in "
        f"{SAMPLE_EVERY} is attributed and the others pass through the hooks, so a budget with fewer iterations (the "
        "hooks' and instructions' shorter ones) samples a smaller part of its run than the accuracy budget does."
    )


def _scripts(results: dict[str, Any]) -> list[str]:
    """The scripts a results dict holds, in its order (not the bookkeeping entries, nor scripts this file dropped)."""
    return [n for n in results if not n.startswith("_") and n in SCRIPTS]


def _user_wait(results: dict[str, Any], fixed: dict[str, list[float]], load: int) -> list[str]:
    """The overhead section's headline: each script plain against the whole ``rlbench profile`` command."""
    timed = [n for n in _scripts(results) if "command" in results[n]]
    if not timed:
        return []
    n_rounds = len(results[timed[0]]["command"]["plain"])
    state = f"loaded ({load} busy processes)" if load else "quiet"
    lines = [
        "### What a user waits for",
        "",
        f"Machine state during the overhead measurements: **{state}**. Each script, unmodified, at the accuracy "
        "budget: `python SCRIPT` against the whole `rlbench profile --quiet -- python SCRIPT` command (starting the "
        "CLI, the profiled child process, writing records and the report), alternating over "
        f"{n_rounds} rounds, each run a fresh process; wall time from spawn to exit, median (min–max). Added: the "
        "paired differences' median (min–max), in seconds and relative to the plain run.",
        "",
        "| Script (budget) | Plain s | `rlbench profile` s | **Added s** | **Added %** |",
        "|---|---|---|---|---|",
    ]
    for name in timed:
        plain = [x["wall"] for x in results[name]["command"]["plain"]]
        command = [x["wall"] for x in results[name]["command"]["command"]]
        added = [b - a for a, b in zip(plain, command)]
        rel = [b / a - 1 for a, b in zip(plain, command)]
        lines.append(
            f"| {name} (`{' '.join(SCRIPTS[name]['args'])}`) | {_spread(plain)} | {_spread(command)} | "
            f"**{statistics.median(added):+.2f}** ({min(added):+.2f}…{max(added):+.2f}) | "
            f"**{100 * statistics.median(rel):+.1f}%** ({100 * min(rel):+.1f}…{100 * max(rel):+.1f}%) |"
        )
    command = fixed.get("command", [])
    if command and fixed.get("plain"):
        added = [b - a for a, b in zip(fixed["plain"], command)]
        lines += [
            "",
            "The fixed cost a user waits for once per run: a script that only imports torch and gymnasium, plain "
            f"{_spread(fixed['plain'])} s against the whole command {_spread(command)} s, paired median "
            f"**{statistics.median(added):+.2f} s** ({min(added):+.2f}…{max(added):+.2f}).",
        ]
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    """Measure and write the report (and the raw numbers as JSON beside it)."""
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.accuracy", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="accuracy rounds per script (default: 5)")
    p.add_argument("--overhead-rounds", type=int, default=12, help="alternating pairs per overhead measurement (default: 12)")
    p.add_argument("--scripts", default=",".join(SCRIPTS), help=f"comma-separated, from: {', '.join(SCRIPTS)} (default: all)")
    p.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="run the overhead measurements beside N CPU-busy processes (default: 0, a quiet machine)",
    )
    p.add_argument(
        "--report",
        default="profile-accuracy.md",
        help="markdown report to write; the raw numbers go beside it as .json, and REPORT.partial.json holds them while "
        "measuring: run the same command again after an interruption and it goes on from there",
    )
    p.add_argument(
        "--restart", action="store_true", help="discard a partial run's numbers (REPORT.partial.json) and start again"
    )
    p.add_argument(
        "--render", metavar="JSON", help="measure nothing: write the report from the raw numbers an earlier run saved"
    )
    # plain|hooked GAP_SCALE SCRIPT ARGS: a run of :func:`_in_process` (under cachegrind, or natively)
    p.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _in_process(Path(args.child[2]), args.child[3:], args.child[0] == "hooked", float(args.child[1]))
        return 0
    names = [n for n in args.scripts.split(",") if n]
    unknown = [n for n in names if n not in SCRIPTS]
    if unknown or args.rounds < 1 or args.overhead_rounds < 1 or args.load < 0:
        p.error(f"unknown scripts {unknown} (choose from {list(SCRIPTS)}), --rounds < 1 or --load < 0")
    report = Path(args.report)
    if args.render:  # the same run's numbers, rendered again (the report's text changed, not what it measured)
        results = json.loads(Path(args.render).read_text(encoding="utf-8"))
        meta = results.get("_meta", {})
        report.write_text(render(results, meta.get("rounds", args.rounds), meta.get("seconds", math.nan)), encoding="utf-8")
        print(f"report: {report}")
        return 0
    settings = {"scripts": names, "rounds": args.rounds, "overhead_rounds": args.overhead_rounds, "load": args.load}
    cp = start(report, settings, args.restart)
    if cp is None:
        return 2
    t0 = time.perf_counter()
    try:
        with sigterm_as_interrupt(), sb3_logs_in_scratch():
            results = measure(names, args.rounds, args.overhead_rounds, args.load, cp)
    except KeyboardInterrupt:
        return interrupted(cp, "python -m rlbench.suites.scripts.accuracy " + " ".join(argv or sys.argv[1:]))
    results["_meta"] = {
        "rounds": args.rounds,
        "load": args.load,
        "environment": environment(),
        **cp.meta(time.perf_counter() - t0),
    }
    report.write_text(render(results, args.rounds, results["_meta"]["seconds"]), encoding="utf-8")
    report.with_suffix(".json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    cp.finish()
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where ``rlbench profile``'s overhead comes from, in the steady state of a training script.

``python -m rlbench.suites.scripts.overhead`` runs a copy of ``cleanrl_ppo.py`` (``--script``: or of the DQN, SAC or
TD3 script) in this process with one line added at the top of its main loop, which installs or removes the hooks
before a block of loop passes starts (a PPO iteration of 512 steps; a block of env steps of an off-policy loop, after
its replay prefill), in the pattern on, off, off, on (ABBA) after the warm-up. Stable-Baselines3's DQN and SAC
(``sb3_dqn``, ``sb3_sac``) run their own loop inside ``learn()``: there a callback does the same at its env steps
(both train after every step, so each block starts with the next rollout call, labelled when the hooks are on).
Each block's CPU time (``--clock wall``: wall time) goes to its side; the ratio of the medians is the hooks'
steady-state cost, with the machine's drift cancelled by the interleaving. It leaves out what the whole command adds
once (starting it, the first iterations, the records and the report), which
``python -m rlbench.suites.scripts.command_cost`` measures with the rest. Three configurations, each in its own run:

* ``full``: the hooks as ``rlbench profile`` installs them;
* ``wrappers``: the same wrappers, but every call passes straight through (the attributor always reports an open
  phase): what wrapping every hooked function costs before any booking. With no env phase ever open, inner envs
  are never given their unwrapped methods back (``autohooks.shadow``), so their ~20 nested calls per vector step
  keep passing through: this side overstates what pass-throughs cost in a real profile;
* ``none``: nothing installed on either side (the harness's own floor).

Prints one line per configuration; ``--json`` prints the raw per-iteration times.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import io
import json
import runpy
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.core.intervals import median_interval

HERE = Path(__file__).resolve().parent
CONFIGS = ("full", "wrappers", "none")


@dataclass(frozen=True)
class Loop:
    """A script's main loop: its line, its variable, the passes in a block and the first pass measured.

    ``var`` None: the line is a Stable-Baselines3 ``learn()`` call, given a callback that toggles at its env steps."""

    file: str
    line: str
    var: str | None
    block: int
    start: int


_OFF_POLICY = "    for global_step in range(args.total_timesteps):\n"
_LEARN = "    model.learn(total_timesteps=args.total_timesteps)\n"
LOOPS = {
    "cleanrl": Loop("cleanrl_ppo.py", "    for iteration in range(1, args.num_iterations + 1):\n", "iteration", 1, 4),
    # after the replay prefill (learning starts at step 500) and 500 steps of updates
    "cleanrl_dqn": Loop("cleanrl_dqn.py", _OFF_POLICY, "global_step", 250, 1000),
    "cleanrl_sac": Loop("cleanrl_sac.py", _OFF_POLICY, "global_step", 100, 1000),
    "cleanrl_td3": Loop("cleanrl_td3.py", _OFF_POLICY, "global_step", 150, 1000),
    # learning starts at step 500 in both
    "sb3_dqn": Loop("sb3_dqn.py", _LEARN, None, 250, 1000),
    "sb3_sac": Loop("sb3_sac.py", _LEARN, None, 100, 1000),
}


def toggled_copy(directory: Path, script: str = "cleanrl") -> Path:
    """The script with a call to ``builtins.RLBENCH_TOGGLE(pass)`` at the top of its main loop."""
    loop = LOOPS[script]
    src = (HERE / loop.file).read_text(encoding="utf-8")
    if loop.line not in src:
        raise RuntimeError(f"{loop.file} has no main loop to hook")
    out = directory / f"{script}_toggled.py"
    if loop.var is None:  # SB3: the same call, with a callback
        new = loop.line.replace(")\n", ", callback=__import__('builtins').RLBENCH_CALLBACK)\n")
    else:
        new = loop.line + f"        __import__('builtins').RLBENCH_TOGGLE({loop.var})\n"
    out.write_text(src.replace(loop.line, new, 1), encoding="utf-8")
    return out


def sb3_callback(toggle: Any) -> Any:
    """A Stable-Baselines3 callback that calls ``toggle(num_timesteps)`` after every env step."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Toggle(BaseCallback):
        def _on_step(self) -> bool:
            toggle(self.num_timesteps)
            return True

    return Toggle()


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def measure(
    config: str,
    steps: int,
    script: str = "cleanrl",
    clock: str = "cpu",
    sample_every: int = 1,
    phases: dict[str, float] | None = None,
) -> dict[str, list[float]]:
    """Seconds of each steady block of loop passes, by side (``on``: hooks installed): the main thread's CPU time, or
    wall time (``clock="wall"``: what a user waits for, torch's other threads and the machine's steal included).
    ``sample_every``: the attributor's (one iteration in so many attributed from its 512th on, as ``rlbench
    profile`` does; 1: every one). ``phases``, if given, receives the seconds the on-blocks booked per phase."""
    from rlbench.profiling.attribution import Attributor, activate
    from rlbench.profiling.autohooks import uninstall
    from rlbench.profiling.session import install_hooks

    state: dict[str, Any] = {"hooks": None, "t": None, "side": None}
    times: dict[str, list[float]] = {"on": [], "off": []}
    attributor = Attributor(count_iteration=None, sample_every=sample_every)

    loop = LOOPS[script]
    now = CLOCKS[clock]

    def toggle(n: int) -> None:
        if n < loop.start or (n - loop.start) % loop.block:
            return
        t = now()
        if state["t"] is not None:
            times[state["side"]].append(t - state["t"])
        if state["hooks"] is not None:
            uninstall(state["hooks"])
            state["hooks"] = None
            activate(None)
        side = "on" if ((n - loop.start) // loop.block) % 4 in (0, 3) else "off"
        if side == "on" and config != "none":
            state["hooks"] = install_hooks(attributor)
            activate(attributor)
            if config == "wrappers":
                attributor.depth = 1  # an open phase, forever: every hooked call passes through
        state["side"] = side
        state["t"] = now()

    with tempfile.TemporaryDirectory() as tmp:
        path = toggled_copy(Path(tmp), script)
        builtins.RLBENCH_TOGGLE = toggle  # type: ignore[attr-defined]
        if loop.var is None:
            builtins.RLBENCH_CALLBACK = sb3_callback(toggle)  # type: ignore[attr-defined]
        saved = list(sys.argv)
        sys.argv = [str(path), "--total-timesteps", str(steps)]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(str(path), run_name="__main__")
        finally:
            sys.argv = saved
            if state["hooks"] is not None:
                uninstall(state["hooks"])
            activate(None)
            del builtins.RLBENCH_TOGGLE  # type: ignore[attr-defined]
            builtins.__dict__.pop("RLBENCH_CALLBACK", None)
    if phases is not None:
        phases.update(attributor.excl)
    return times


def quad_ratios(times: dict[str, list[float]]) -> list[float]:
    """Per ABBA quad (on, off, off, on), its on-blocks' seconds over its off-blocks': a slow spell of the machine that
    lasts a quad (seconds) moves both sides of it, where it moves only one side of a median over the whole run."""
    on, off = times["on"], times["off"]
    return [(on[2 * i] + on[2 * i + 1]) / (off[2 * i] + off[2 * i + 1]) for i in range(min(len(on), len(off)) // 2)]


def main(argv: list[str] | None = None) -> int:
    from rlbench.profiling.attribution import SAMPLE_EVERY, SAMPLE_FROM

    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--script", choices=sorted(LOOPS), default="cleanrl", help="which script (default: cleanrl, PPO)")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="agent steps per run (default: 98,304 for PPO, 512 per iteration; 16,000 for the DQNs, 4,000 for SAC and TD3)",
    )
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS), help="configurations to run")
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu (default): the main thread's CPU time, which a shared machine's steal does not move; wall: wall time, "
        "which also counts torch's other threads and waiting",
    )
    p.add_argument(
        "--sample-every",
        type=int,
        default=SAMPLE_EVERY,
        metavar="K",
        help=f"attribute one iteration in K from the {SAMPLE_FROM}th on, as rlbench profile does (default: "
        f"{SAMPLE_EVERY}; 1: every one, as --all-iterations). The on-blocks share one attributor, so iterations count "
        "across them",
    )
    p.add_argument("--json", action="store_true", help="print the raw per-block times as JSON")
    args = p.parse_args(argv)
    steps = args.steps or {"cleanrl": 98_304, "cleanrl_dqn": 16_000, "sb3_dqn": 16_000}.get(args.script, 4_000)
    results = {c: measure(c, steps, args.script, args.clock, args.sample_every) for c in args.configs}
    if args.json:
        print(json.dumps(results))
        return 0
    for config, t in results.items():
        on, off = statistics.median(t["on"]), statistics.median(t["off"])
        ratios = quad_ratios(t)
        quads = ""
        if ratios:
            mid, lo, hi, _, sure = median_interval(ratios)
            quads = (
                f"; per ABBA quad (its two on-blocks over its two off-blocks, {len(ratios)} quads) "
                f"{100 * (mid - 1):+.1f}%, {'95% interval' if sure else 'range'} {100 * (lo - 1):+.1f}…{100 * (hi - 1):+.1f}%"
            )
        print(
            f"{args.script} {config:9s} blocks on/off {len(t['on'])}/{len(t['off'])}: median {on * 1e3:.2f} / "
            f"{off * 1e3:.2f} ms ({args.clock}), overhead {100 * (on / off - 1):+.1f}%{quads}; the off-blocks alone "
            f"spread {min(t['off']) * 1e3:.0f}–{max(t['off']) * 1e3:.0f} ms (compare the `none` line: the harness's floor)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where ``rlbench profile``'s overhead comes from, in the steady state of the CleanRL-style script.

``python -m rlbench.suites.scripts.overhead`` runs a copy of ``cleanrl_ppo.py`` in this process with one line
added at the top of its iteration loop, which installs or removes the hooks before the iteration starts, in the
pattern on, off, off, on (ABBA) after three warm-up iterations. Each iteration's CPU time goes to its side; the
ratio of the medians is the hooks' steady-state cost, with the machine's drift cancelled by the interleaving.
Three configurations, each in its own run:

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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOOP = "    for iteration in range(1, args.num_iterations + 1):\n"
CONFIGS = ("full", "wrappers", "none")


def toggled_copy(directory: Path) -> Path:
    """``cleanrl_ppo.py`` with a call to ``builtins.RLBENCH_TOGGLE(iteration)`` at the top of its iteration loop."""
    src = (HERE / "cleanrl_ppo.py").read_text(encoding="utf-8")
    if LOOP not in src:
        raise RuntimeError("cleanrl_ppo.py has no iteration loop to hook")
    out = directory / "cleanrl_toggled.py"
    out.write_text(src.replace(LOOP, LOOP + "        __import__('builtins').RLBENCH_TOGGLE(iteration)\n", 1), encoding="utf-8")
    return out


def measure(config: str, steps: int) -> dict[str, list[float]]:
    """CPU seconds of each steady iteration, by side (``on``: hooks installed)."""
    from rlbench.profiling.attribution import Attributor, activate
    from rlbench.profiling.autohooks import uninstall
    from rlbench.profiling.session import install_hooks

    state: dict[str, Any] = {"hooks": None, "t": None, "side": None}
    times: dict[str, list[float]] = {"on": [], "off": []}
    attributor = Attributor(count_iteration=None)

    def toggle(iteration: int) -> None:
        t = time.thread_time()
        if state["t"] is not None and iteration > 4:
            times[state["side"]].append(t - state["t"])
        if state["hooks"] is not None:
            uninstall(state["hooks"])
            state["hooks"] = None
            activate(None)
        side = "on" if iteration % 4 in (0, 3) else "off"
        if side == "on" and config != "none":
            state["hooks"] = install_hooks(attributor)
            activate(attributor)
            if config == "wrappers":
                attributor.depth = 1  # an open phase, forever: every hooked call passes through
        state["side"] = side
        state["t"] = time.thread_time()

    with tempfile.TemporaryDirectory() as tmp:
        script = toggled_copy(Path(tmp))
        builtins.RLBENCH_TOGGLE = toggle  # type: ignore[attr-defined]
        saved = list(sys.argv)
        sys.argv = [str(script), "--total-timesteps", str(steps)]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv = saved
            if state["hooks"] is not None:
                uninstall(state["hooks"])
            activate(None)
            del builtins.RLBENCH_TOGGLE  # type: ignore[attr-defined]
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=98_304, help="agent steps per run (512 per iteration; default 98,304)")
    p.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS), help="configurations to run")
    p.add_argument("--json", action="store_true", help="print the raw per-iteration CPU times as JSON")
    args = p.parse_args(argv)
    results = {c: measure(c, args.steps) for c in args.configs}
    if args.json:
        print(json.dumps(results))
        return 0
    for config, t in results.items():
        on, off = statistics.median(t["on"]), statistics.median(t["off"])
        print(
            f"{config:9s} iterations on/off {len(t['on'])}/{len(t['off'])}: median {on * 1e3:.2f} / {off * 1e3:.2f} ms, "
            f"overhead {100 * (on / off - 1):+.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

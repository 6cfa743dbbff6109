"""How long each compiled hook spends in its own code, per agent step, inside a real training loop.

``python -m rlbench.suites.scripts.hook_time SCRIPT [ARGS...]`` runs SCRIPT in this process under the hooks
``rlbench profile`` installs (default settings) and prints, per hook: its calls per agent step (and how many of
them were at top level, not nested in another hooked call), the time it spent in its own code per call and per
agent step, and the calls that went to Python: to its Python wrapper, or with a call of the Python attributor (the
cases the compiled hooks leave to Python).

A hook's own time runs from its entry to its return, less the call it wraps (where the hooks nested in that call
count as their own) and less the Python wrapper's run: it is what the compiled hooks' code costs in place, with the
training step's caches as they are, not what it costs in a tight loop. It leaves out what a hook costs outside its
code: the dispatch into it and the training step running slower after it. Compare the total with the whole loop
timed with and without the hooks (``python -m rlbench.suites.scripts.command_cost``) to see how much that is.

It needs a measuring build of the extension, which counts ticks in every hook (rdtsc on x86)::

    CPPFLAGS=-DRLBENCH_HOOK_TIMING pip install --no-build-isolation --no-deps -e .

(``CPPFLAGS``: ``CFLAGS`` would replace the optimization flags), and the ordinary build back afterwards (the same
command without ``CPPFLAGS``). ``--json`` prints the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import runpy
import sys
import time
from pathlib import Path
from typing import Any

BUILD = "CPPFLAGS=-DRLBENCH_HOOK_TIMING pip install --no-build-isolation --no-deps -e ."


class HookTimeError(Exception):
    """What stops a measurement before it means anything: exit 2, one line."""


def timing_module() -> Any:
    """The measuring build of the extension, or None where the installed one is the ordinary build."""
    from rlbench.profiling import autohooks

    module = autohooks._fastevent
    return module if module is not None and hasattr(module, "HOOK_TIMING") else None


def hook_name(event: Any) -> str:
    """``phase: what it wraps``, from the hook's repr (``<rlbench hook 'env/step' around <function Env.step at ...>>``)."""
    m = re.match(r"<rlbench hook '(.*)' around <(?:function|built-in method|method) '?([\w.<>]+)'?", repr(event))
    return f"{m.group(1)}: {m.group(2)}" if m else repr(event)


def measure(script: Path, args: list[str]) -> dict[str, Any]:
    """Run ``script`` with ``args`` under the hooks; the per-hook rows and the totals, per agent step."""
    import torch  # noqa: F401  (imported before the clock starts, as the profiled child does)

    from rlbench.profiling.session import Session, Settings

    fe = timing_module()
    if fe is None:
        raise HookTimeError(f"the installed extension is the ordinary build; build the measuring one: {BUILD}")
    before = {id(row[0]): row for row in fe.timing_table()}
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    t0, k0 = time.perf_counter(), fe.ticks()
    try:
        with Session(Settings()) as session:
            with contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(str(script), run_name="__main__")
            table = fe.timing_table()  # while the hooks are installed: the session's end lets them go
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    wall, ticks = time.perf_counter() - t0, fe.ticks() - k0
    per_s = ticks / wall  # the tick rate, against perf_counter over the whole run
    steps = session.outcome.attribution.steps
    if steps <= 0:
        raise HookTimeError("the script took no agent step (no env step was seen): nothing to divide by")
    rows = []
    for event, own, calls, top, fallbacks in table:
        old = before.get(id(event))
        if old is not None and old[0] is event:
            own, calls, top, fallbacks = own - old[1], calls - old[2], top - old[3], fallbacks - old[4]
        if calls:
            rows.append(
                {
                    "hook": hook_name(event),
                    "calls_per_step": calls / steps,
                    "top_per_step": top / steps,
                    "own_ns_per_call": own / per_s / calls * 1e9,
                    "own_us_per_step": own / per_s / steps * 1e6,
                    "python_per_step": fallbacks / steps,
                }
            )
    rows.sort(key=lambda r: -r["own_us_per_step"])
    return {
        "script": str(script),
        "args": args,
        "steps": steps,
        "wall_s": wall,
        "own_us_per_step": sum(r["own_us_per_step"] for r in rows),
        "calls_per_step": sum(r["calls_per_step"] for r in rows),
        "python_per_step": sum(r["python_per_step"] for r in rows),
        "rows": rows,
    }


def print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Hooks' own time in {Path(result['script']).name}, {result['steps']:,} agent steps")
    for col in ("hook", "calls / step", "top-level / step", "own ns / call", "own µs / step", "to Python / step"):
        table.add_column(col, justify="left" if col == "hook" else "right")
    for r in result["rows"]:
        if r["own_us_per_step"] < 0.005 and r["python_per_step"] < 0.005:
            continue
        table.add_row(
            r["hook"],
            f"{r['calls_per_step']:.2f}",
            f"{r['top_per_step']:.2f}",
            f"{r['own_ns_per_call']:.0f}",
            f"{r['own_us_per_step']:.2f}",
            f"{r['python_per_step']:.2f}",
        )
    table.add_row(
        "all hooks",
        f"{result['calls_per_step']:.1f}",
        "",
        "",
        f"{result['own_us_per_step']:.2f}",
        f"{result['python_per_step']:.2f}",
        style="bold",
    )
    Console().print(table)
    print(f"wall {result['wall_s']:.2f} s under the hooks ({result['wall_s'] / result['steps'] * 1e6:.1f} µs per agent step)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlbench.suites.scripts.hook_time",
        description="Each compiled hook's own time per agent step in a real training loop (needs the measuring build).",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("script", type=Path, help="the training script, run in this process")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    opts = parser.parse_args(argv)
    if not opts.script.is_file():
        parser.error(f"no such script: {opts.script}")
    try:
        result = measure(opts.script, opts.args)
    except HookTimeError as exc:
        print(f"hook_time: error: {exc}", file=sys.stderr)
        return 2
    if opts.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

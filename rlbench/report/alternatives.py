"""Measured alternatives for a run's advice: micro-benchmark results from the same store and the same machine.

When a profiled script spends its time stepping a registered env, and the store also holds an ``rlbench run envs``
run for that env id measured on the same machine, the advice quotes it ("SyncVectorEnv took 103 µs per step of 8
CartPole-v1 envs, ``numba`` 2.1 µs: 48× faster, run …"). Nothing is quoted from another machine: without a matching
run the advice names the command that measures it.
"""

from __future__ import annotations

import math
import re
from statistics import median

from rlbench.report.data import RunData
from rlbench.report.format import fmt, fmt_s, md_code
from rlbench.results.metrics import ENV_STEPS, LEGACY_TIME_CALL, TIME_CALL
from rlbench.results.records import Record

REFERENCE = "reference"  # gymnasium's SyncVectorEnv in the envs micro-benchmark
# what every line of a store holding an envs micro-benchmark record contains (its params' "group": "envs"): the store is
# read with this text test before any line is decoded (decoding a store of a hundred profiled runs whole took ~1 s,
# after every `rlbench profile`)
CONTEXT_LINES = ('"group"', '"envs"')


def _machine(r: Record) -> str | None:
    return (r.fingerprint.get("machine") or {}).get("id")


def env_steps_per_call(d: RunData) -> float:
    """Agent steps per top-level env step of the run (the vector env's batch size), or NaN."""
    step = next((r for r in d.records if r.metric == "time/env/step"), None)
    steps = next((r for r in d.records if r.metric == ENV_STEPS), None)
    if step is None or steps is None:
        return math.nan
    events = step.meta.get("events")
    total = steps.meta.get("all_steps")
    if not isinstance(events, (int, float)) or not isinstance(total, (int, float)) or events <= 0:
        return math.nan
    return float(total) / float(events)


def _size(label: str) -> float:
    m = re.search(r"(\d+)", label)
    return float(m.group(1)) if m else math.nan


def environment(d: RunData, context: list[Record]) -> str | None:
    """What ``rlbench run envs`` measured on this machine for the env this run stepped, or ``None``."""
    steps = next((r for r in d.records if r.metric == ENV_STEPS), None)
    envs = list((steps.meta.get("envs") or []) if steps is not None else [])
    machine = _machine(d.first)
    if len(envs) != 1 or machine is None:
        return None
    env = envs[0]
    cells: dict[str, dict[str, list[float]]] = {}
    run_of: dict[str, str] = {}
    for r in context:
        if r.metric not in (TIME_CALL, LEGACY_TIME_CALL) or _machine(r) != machine:
            continue
        if r.params.get("group") != "envs" or r.params.get("op") != env:
            continue
        size = str(r.params.get("size"))
        cells.setdefault(size, {}).setdefault(str(r.params.get("impl")), []).extend(r.samples)
        run_of[size] = max(run_of.get(size, ""), r.run_id)
    usable = {s: by for s, by in cells.items() if by.get(REFERENCE) and len(by) > 1 and math.isfinite(_size(s))}
    if not usable:
        return None
    n = env_steps_per_call(d)
    size = min(usable, key=lambda s: abs(_size(s) - n) if math.isfinite(n) else _size(s))
    med = {impl: median(v) for impl, v in usable[size].items() if v}
    best = min((impl for impl in med if impl != REFERENCE), key=lambda i: med[i])
    ref, fast = med[REFERENCE], med[best]
    return (
        f"`rlbench run envs` measured {env} on this machine (run {md_code(run_of[size])}, {size}): gymnasium's "
        f"SyncVectorEnv {fmt_s(ref)} per step, {md_code(best)} {fmt_s(fast)} ({fmt(ref / fast, 1)}× faster)"
    )


def measured(d: RunData, context: list[Record]) -> dict[str, str]:
    """Layer → a sentence quoting a micro-benchmark of an alternative, measured on this run's machine."""
    out = {}
    env = environment(d, context)
    if env is not None:
        out["environment"] = env
    return out

"""What a profile has measured so far, while the script runs: per role, the phases' shares, steady SPS, the top bottleneck.

Two readers use it. ``rlbench profile --log-to`` (:mod:`rlbench.profiling.tracking`) turns each interval of training
into series for the user's tracker, in the script's own process; ``rlbench profile --live`` draws it in rlbench's own
process, once a second. Both read the same figures:

* the script's own process: each thread's :class:`~rlbench.profiling.attribution.Attributor`, read without stopping it
  (:func:`thread_view`: a copy of its running totals, as :meth:`Attributor.peek` takes them, without the iteration
  marks' copy), written to ``live-<pid>.json`` for ``--live``;
* every followed process: its periodic snapshot (:func:`rlbench.profiling.follow.snapshot`, ``snap-<pid>-<n>.json``
  in the repeat's collection folder), whose raw totals carry the same fields.

A *view* is one thread's running totals (plain numbers, JSON): its role, agent steps, iterations, exclusive seconds per
phase, and where its steady state began (its second iteration: its time, steps and totals then). :class:`Window` turns
two consecutive views into the interval's figures (each phase's share and time per iteration, SPS), and
:func:`steady` the steady state so far. Nothing here imports torch or numpy: ``rlbench profile``'s own process reads it.
"""

from __future__ import annotations

import json
import math
import os
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter as _clock
from typing import Any

OTHER = "other"
"""The series name of the empty phase path (the report's "Python/other")."""
LIVE_PREFIX = "live-"
SNAP_PREFIX = "snap-"


def _plain(d: Any) -> dict[str, float]:
    """A copy of a dict of floats as new float objects (the compiled hooks add in place to a float only its dict
    holds: a copy that shared them would make every later update allocate)."""
    snap = dict(d)  # one C call: atomic under the GIL, whatever the hooks do meanwhile
    return {k: v + 0.0 for k, v in snap.items()}


def thread_view(a: Any, role: str, pid: int, thread: str | None = None) -> dict[str, Any]:
    """One attributor's running totals now, without stopping or copying its iteration marks (see the module
    docstring). Read from another thread: every copy is one call under the GIL, so a transition in flight may be
    missed, never torn. The time since the last transition is booked as :meth:`Attributor.peek` books it."""
    now = _clock()
    excl = _plain(a.excl)
    stack = list(a.stack)
    if not a.paused:
        top = stack[-1] if stack else ""
        if a.pending and stack:
            excl[top] = excl.get(top, 0.0) + max(a.t_exit - a.t, 0.0)
            below = stack[-2] if len(stack) > 1 else ""
            excl[below] = excl.get(below, 0.0) + max(now - a.t_exit, 0.0)
        else:
            excl[top] = excl.get(top, 0.0) + max(now - a.t, 0.0)
    ts, steps_at = a.iteration_t, a.iteration_steps
    n = min(len(ts), len(steps_at), len(a.iteration_excl))
    start_steps = int(steps_at[0]) if n else 0
    steady = None
    if n >= 2:
        packed = a.iteration_excl[1]
        keys = list(a.excl)
        values = array("d", packed)
        steady = {"t": float(ts[1]), "steps": int(steps_at[1]), "excl": dict(zip(keys, values.tolist()))}
    enters = dict(a.enters)
    return {
        "role": role,
        "pid": pid,
        "thread": thread,
        "t": now,
        "begun": float(a.t_begin),
        "started": None if a.started is None else float(a.started),
        "steps": int(a.steps),
        "start_steps": start_steps,
        "iterations": n,
        "excl": excl,
        "layers": dict(a.layers),
        "steady": steady,
        "events": int(sum(enters.values())),
        "merges": int(a.merges),
        "passthrough": int(a.passthrough),
        "marks": int(a.mem_marks),
    }


def session_views(session: Any, pid: int | None = None) -> list[dict[str, Any]]:
    """Every attributed thread of this process's session, as views: the session's thread (role ``main``), then each
    other thread (its role as the report names it)."""
    import threading

    from rlbench.profiling.threads import ROLES, thread_role

    pid = os.getpid() if pid is None else pid
    out = []
    a = session.attributor
    if a is not None:
        out.append(thread_view(a, "main", pid))
    threads = session.threads
    if threads is not None:
        by_ident = {t.ident: t for t in threading.enumerate()}
        for ident, b in list(threads.live.items()):
            t = by_ident.get(ident)
            role = ROLES.get(ident) or (thread_role(t) if t is not None else "thread")
            out.append(thread_view(b, role, pid, t.name if t is not None else str(ident)))
    return out


def snapshot_views(folder: Path, skip_pid: int | None = None) -> list[dict[str, Any]]:
    """The followed processes' latest snapshots in a collection folder, as views (their threads' raw totals)."""
    out: list[dict[str, Any]] = []
    for path in sorted(folder.glob(f"{SNAP_PREFIX}*.json")):
        data = _read(path)
        if data is None or data.get("pid") == skip_pid:
            continue
        ended = float(data.get("ended") or 0.0)
        for t in data.get("threads") or []:
            raw = t.get("raw") or {}
            steady = raw.get("steady")
            out.append(
                {
                    "role": str(t.get("role") or data.get("role") or "process"),
                    "pid": int(data.get("pid") or 0),
                    "thread": t.get("thread"),
                    "t": float(t.get("ended") or ended),
                    "begun": float(t.get("begun") or 0.0),
                    "started": t.get("started"),
                    "steps": int(raw.get("steps") or 0),
                    "start_steps": int(raw.get("start_steps") or 0),
                    "iterations": int(raw.get("iterations") or 0),
                    "excl": {k: float(v) for k, v in (raw.get("excl") or {}).items()},
                    "layers": dict(raw.get("layers") or {}),
                    "steady": steady,
                    "events": 0,
                    "merges": 0,
                    "passthrough": 0,
                    "marks": 0,
                }
            )
    return out


def read_live(folder: Path) -> dict[str, Any] | None:
    """The script's process's latest published view (``live-<pid>.json``), or ``None`` before its first."""
    found = sorted(folder.glob(f"{LIVE_PREFIX}*.json"))
    return _read(found[-1]) if found else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` whole or not at all (a reader never sees half a file); a folder that is gone is no error."""
    tmp = path.with_name(path.name + ".part")
    try:
        tmp.write_text(json.dumps(data, allow_nan=False, default=lambda v: None), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, ValueError):
        try:
            tmp.unlink()
        except OSError:
            pass


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- figures ------------------------------------------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\- /]+")


def phase_name(path: str) -> str:
    """A phase path as a series name: ``""`` is ``other``; characters trackers refuse in a name become ``-``."""
    return _UNSAFE.sub("-", path).strip() or OTHER if path else OTHER


@dataclass
class RoleFigures:
    """One role's figures over an interval (or over its steady state so far).

    Attributes:
        role: The role (``main``: the script's main thread).
        seconds: Exclusive seconds per phase path, summed over the role's threads and processes.
        wall_s: The role's wall time in the interval, summed over its threads.
        span_s: The interval's own length (the longest of its threads').
        steps: Agent steps in it.
        iterations: Training iterations in it.
        layers: Each phase's layer.
        threads: Threads (and processes) of the role.
    """

    role: str
    seconds: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    span_s: float = 0.0
    steps: int = 0
    iterations: int = 0
    layers: dict[str, str] = field(default_factory=dict)
    threads: int = 0

    @property
    def booked_s(self) -> float:
        return sum(self.seconds.values())

    def shares(self) -> dict[str, float]:
        """Each phase's share of the booked time: with sampled iterations only the attributed ones book anything,
        so the booked seconds stand for the interval in the same proportions."""
        total = self.booked_s
        return {p: s / total for p, s in self.seconds.items()} if total > 0 else {}

    def per_iteration_s(self) -> dict[str, float]:
        """Each phase's seconds per iteration: its share of the role's mean iteration."""
        if self.iterations <= 0 or self.wall_s <= 0:
            return {}
        mean = self.wall_s / self.iterations
        return {p: share * mean for p, share in self.shares().items()}

    @property
    def sps(self) -> float:
        return self.steps / self.span_s if self.span_s > 0 else math.nan

    def add(self, excl: dict[str, float], layers: dict[str, str], wall_s: float, steps: int, iterations: int) -> None:
        for p, s in excl.items():
            if s > 0:
                self.seconds[p] = self.seconds.get(p, 0.0) + s
        for p in excl:
            if p in layers:
                self.layers.setdefault(p, layers[p])
        self.wall_s += max(wall_s, 0.0)
        self.span_s = max(self.span_s, wall_s)
        self.steps += max(steps, 0)
        self.iterations += max(iterations, 0)
        self.threads += 1


def _key(view: dict[str, Any]) -> tuple[int, str]:
    return int(view.get("pid") or 0), str(view.get("thread"))


def steady(views: list[dict[str, Any]]) -> dict[str, RoleFigures]:
    """Every role's steady state so far (from each thread's second iteration on), in the order roles first appear."""
    out: dict[str, RoleFigures] = {}
    for v in views:
        s = v.get("steady")
        if not s:
            continue
        base = s.get("excl") or {}
        excl = {p: x - base.get(p, 0.0) for p, x in v["excl"].items()}
        fig = out.setdefault(v["role"], RoleFigures(v["role"]))
        fig.add(excl, v.get("layers") or {}, v["t"] - float(s["t"]), v["steps"] - int(s["steps"]), v["iterations"] - 2)
    return out


class Window:
    """Consecutive views, turned into each interval's figures per role (:meth:`update`)."""

    def __init__(self) -> None:
        self.last: dict[tuple[int, str], dict[str, Any]] = {}

    def update(self, views: list[dict[str, Any]]) -> dict[str, RoleFigures]:
        """The figures of the interval since the last call, per role; a thread is counted from its first iteration
        (what ran before is start-up), and a thread seen for the first time counts from then."""
        out: dict[str, RoleFigures] = {}
        seen = {}
        for v in views:
            key = _key(v)
            seen[key] = v
            if v.get("started") is None:  # still starting up: its totals are cleared at its first iteration
                continue
            before = self.last.get(key)
            if before is None or before.get("started") is None:
                # its first figures since it started training: from its first iteration on
                excl, wall = v["excl"], v["t"] - float(v["started"])
                steps, iters = v["steps"] - int(v.get("start_steps") or 0), v["iterations"]
            else:
                prev = before["excl"]
                excl = {p: x - prev.get(p, 0.0) for p, x in v["excl"].items()}
                if any(d < -1e-9 for d in excl.values()):  # another process under an old one's key: start again
                    excl = dict(v["excl"])
                wall = v["t"] - before["t"]
                steps = v["steps"] - before["steps"]
                iters = v["iterations"] - before["iterations"]
            fig = out.setdefault(v["role"], RoleFigures(v["role"]))
            fig.add(excl, v.get("layers") or {}, wall, steps, iters)
        self.last = {**self.last, **seen}
        return out


def hooks_share(views: list[dict[str, Any]], costs: dict[str, float] | None) -> float:
    """What the hooks cost so far (their events times the per-event costs measured in this process), as a share of
    the threads' wall time; NaN without costs."""
    if not costs:
        return math.nan
    spent = wall = 0.0
    for v in views:
        if v.get("events") is None:
            continue
        full = max(v["events"] - v["merges"], 0)
        spent += (
            full * costs.get("event_us", 0.0)
            + v["merges"] * costs.get("merge_us", 0.0)
            + v["passthrough"] * costs.get("passthrough_us", 0.0)
            + v["marks"] * costs.get("mark_us", 0.0)
        ) * 1e-6
        wall += max(v["t"] - float(v.get("begun") or v["t"]), 0.0)
    return spent / wall if wall > 0 else math.nan


def series(figures: dict[str, RoleFigures], prefix: str = "rlbench") -> dict[str, float]:
    """An interval's figures as named series: ``rlbench/sps``, ``rlbench/share/<phase>``, ``rlbench/iter_ms/<phase>``
    for the main role; ``rlbench/role/<role>/...`` for every other role."""
    out: dict[str, float] = {}
    for role, fig in figures.items():
        base = prefix if role == "main" else f"{prefix}/role/{phase_name(role)}"
        if math.isfinite(fig.sps) and fig.steps > 0:
            out[f"{base}/sps"] = fig.sps
        for p, share in fig.shares().items():
            out[f"{base}/share/{phase_name(p)}"] = share
        for p, s in fig.per_iteration_s().items():
            out[f"{base}/iter_ms/{phase_name(p)}"] = 1000.0 * s
    return out


@dataclass
class Bottleneck:
    """One phase of one role, ranked by its steady share (and its Amdahl bound: the role's speed-up were it free)."""

    role: str
    phase: str
    layer: str
    share: float

    @property
    def bound(self) -> float:
        return 1.0 / (1.0 - self.share) if self.share < 1.0 else math.inf


def is_wait(phase: str, layer: str = "") -> bool:
    """A blocking wait (``wait/...``): time a role spends waiting on another one, which is where the bottleneck is not."""
    return layer == "wait" or phase == "wait" or phase.startswith("wait/") or "/wait/" in phase


def bottlenecks(figures: dict[str, RoleFigures], limit: int = 10) -> list[Bottleneck]:
    """The phases with the largest shares of their role's time (Python/other ranked too: it is where no phase is).
    Waits are not ranked: a role waiting on another is not the one to speed up (:func:`waits` says who waited)."""
    found = []
    for role, fig in figures.items():
        for p, share in fig.shares().items():
            layer = fig.layers.get(p, "other") if p else "other"
            if not is_wait(p, layer):
                found.append(Bottleneck(role, p, layer, share))
    found.sort(key=lambda b: b.share, reverse=True)
    return found[:limit]


def waits(figures: dict[str, RoleFigures]) -> dict[str, float]:
    """Per role, the share of its time it spent in blocking waits."""
    out = {}
    for role, fig in figures.items():
        share = sum(v for p, v in fig.shares().items() if is_wait(p, fig.layers.get(p, "")))
        if share > 0:
            out[role] = share
    return out


def bottleneck_table(figures: dict[str, RoleFigures], limit: int = 10) -> str:
    """The steady state's bottlenecks as a markdown table (what ``--log-to`` logs at the end)."""
    rows = bottlenecks(figures, limit)
    if not rows:
        return "No steady state was reached (fewer than two training iterations): nothing to rank."
    lines = [
        "| # | Role | Phase | Layer | Share of the role's time | Bound |",
        "|---|---|---|---|---|---|",
    ]
    for i, b in enumerate(rows, 1):
        phase = b.phase or "Python/other"
        bound = f"≤ {b.bound:.2f}×" if math.isfinite(b.bound) else "–"
        lines.append(f"| {i} | {_cell(b.role)} | `{_cell(phase)}` | {b.layer} | {100 * b.share:.1f}% | {bound} |")
    sps = [f"{_cell(r)} {f.sps:,.0f}" for r, f in figures.items() if f.steps > 0 and math.isfinite(f.sps)]
    waited = [f"{_cell(r)} {100 * w:.0f}%" for r, w in waits(figures).items() if w >= 0.01]
    foot = "Steady state so far (from each thread's second iteration). Bound: the role's speed-up if that phase took no time."
    notes = (f"Steady SPS: {', '.join(sps)}. " if sps else "") + (
        f"Waiting on another role (not ranked): {', '.join(waited)}. " if waited else ""
    )
    return "\n".join([*lines, "", notes + foot])


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")

"""The parent's side of following processes: collect what every process of a repeat wrote, merge it into roles.

:mod:`rlbench.profiling.follow` has each followed process write ``proc-<pid>-<n>.json`` (its threads' metrics, the
channels its waits used, who used them) and a start marker. After the repeat, :func:`collect` reads the folder and
:func:`role_metrics` turns it into ordinary metrics, one set per process and thread, each carrying ``meta.role``,
``meta.pid`` and, for a thread other than its process's main thread, ``meta.thread``. The main process's main thread
keeps today's records, without a role. Three more records, on the main process, say what was followed
(``profile/processes``: the processes that never reported, and those rlbench saw but could not follow), who waited on
whom (each wait's channel and the roles on its other side, in the wait records' meta) and how a vector env's step
splits (``profile/env_workers``: the workers' own env time, the wait for the slowest, the rest: IPC and scheduling).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbench.profiling.follow import RAY_WORKER
from rlbench.profiling.results import metric_from_dict
from rlbench.results.metrics import (
    COUNTERS,
    ENV_STEPS,
    ITERATIONS,
    PROFILE_CPU_S,
    PROFILE_ENV_WORKERS,
    PROFILE_PROCESSES,
    SPS,
    SPS_STEADY,
    STARTUP_S,
    TRAIN_S,
    WALL_S,
    WARMUP_S,
    Metric,
)

ROLE_METRICS = (SPS, SPS_STEADY, WALL_S, WARMUP_S, TRAIN_S, ENV_STEPS, ITERATIONS, STARTUP_S, PROFILE_CPU_S)
"""What each role keeps besides its ``time/<phase>`` records (per-iteration series stay with the main process)."""


@dataclass
class Collected:
    """A repeat's followed processes (the main one's threads come from the bootstrap's own result)."""

    processes: list[dict[str, Any]] = field(default_factory=list)
    unreported: list[dict[str, Any]] = field(default_factory=list)  # started (a marker), never wrote a result
    not_followed: list[dict[str, Any]] = field(default_factory=list)  # seen in the process table, never joined


def collect(folder: Path, seen: dict[int, dict[str, Any]] | None = None, main_pid: int | None = None) -> Collected:
    """Read ``folder``'s results and markers; ``seen``: the processes the parent saw in its process table (pid ->
    ``{"argv", "python"}``), of which those that never joined are named."""
    out = Collected()
    reported: set[tuple[int, int]] = set()
    for path in sorted(folder.glob("proc-*.json")):
        data = _read(path)
        if data is None:
            continue
        for t in data.get("threads", []):
            if not t.get("metrics") and t.get("raw"):  # a process without numpy: its totals, made metrics here
                t["metrics"] = raw_metrics(t)
        out.processes.append(data)
        reported.add(_key(path.name))
    for path in sorted(folder.glob("snap-*.json")):  # a process killed before it ended: its last snapshot
        data = _read(path)
        if data is None or _key(path.name) in reported:
            continue
        for t in data.get("threads", []):
            t["metrics"] = raw_metrics(t)
        out.processes.append(data)
        reported.add(_key(path.name))
        out.unreported.append(
            {"pid": data.get("pid"), "argv": data.get("argv", []), "kind": data.get("kind"), "snapshot": True}
        )
    joined: set[int] = {p["pid"] for p in out.processes}
    execed = {_key(p.name)[0] for p in folder.glob("exec-*.json")}  # pids subprocess started: another program
    for path in sorted(folder.glob("start-*.json")):
        data = _read(path)
        if data is None:
            continue
        pid = int(data.get("pid", 0))
        now = (seen or {}).get(pid)
        if (
            _key(path.name) not in reported
            and (
                pid in {p["pid"] for p in out.processes}  # it exec'd a Python that joined as itself
                or (data.get("kind") == "fork" and pid in execed)
                or (now is not None and now.get("argv") and now["argv"][:1] != data.get("argv", [])[:1])
            )
        ):
            continue  # a fork that exec'd another program (subprocess's preexec_fn runs the fork handlers first)
        joined.add(pid)
        if _key(path.name) not in reported:
            out.unreported.append({"pid": data.get("pid"), "argv": data.get("argv", []), "kind": data.get("kind")})
    from rlbench.profiling.follow import helper

    for pid, info in sorted((seen or {}).items()):
        if pid in joined or pid == main_pid or helper(info.get("argv") or []):
            continue
        out.not_followed.append({"pid": pid, **info})
    return out


def raw_metrics(thread: dict[str, Any]) -> list[dict[str, Any]]:
    """A thread's raw totals (:func:`rlbench.profiling.follow.raw_attribution`: a snapshot's, or a process's that never
    imported numpy) as metrics: the thread's whole time after its start-up as one iteration."""
    from rlbench.profiling.attribution import Attribution
    from rlbench.profiling.results import attribution_metrics, metric_to_dict

    raw = thread.get("raw") or {}
    started, ended = float(thread.get("started") or 0.0), float(thread.get("ended") or 0.0)
    r = Attribution(
        started=started, ended=ended, excl=dict(raw.get("excl") or {}), enters=dict(raw.get("enters") or {}),
        layers=dict(raw.get("layers") or {}), steps=int(raw.get("steps") or 0), iterations=[], mem_bytes={},
        cuda_peak_bytes={}, transitions=int(raw.get("transitions") or 0), passthrough=int(raw.get("passthrough") or 0),
        merges=int(raw.get("merges") or 0), mem_marks=0, counted_iteration=None,
        sched=tuple(float("nan") if v is None else float(v) for v in (raw.get("sched") or [None, None]))[:2],
        other_threads_cpu_s=float(raw.get("other_threads_cpu_s") or 0.0), other_threads=int(raw.get("other_threads") or 0),
        foreign_phases=int(raw.get("foreign_phases") or 0), hooks=str(raw.get("hooks") or "python"),
        threads_followed=bool(raw.get("threads_followed")),
    )  # fmt: skip
    begun = float(thread.get("begun") or started)
    return [metric_to_dict(m) for m in attribution_metrics(r, startup_s=max(started - begun, 0.0))]


def _key(name: str) -> tuple[int, int]:
    parts = name.split(".")[0].split("-")
    try:
        return int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
    except (IndexError, ValueError):
        return -1, -1


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def role_metrics(main: dict[str, Any], collected: Collected, main_pid: int) -> list[Metric]:
    """Every role's metrics: the main process's other threads (``main["threads"]``, from the bootstrap) and every
    followed process's threads; then the main process's summary records of what was followed."""
    participants = _participants([main, *collected.processes])
    for p in collected.processes:  # a process is the other side of a join on it
        participants[f"process:{p['pid']}"]["set"].add(str(p.get("role")))
        if any(RAY_WORKER in str(a) for a in p.get("argv", [])):
            participants["ray"]["put"].add(str(p.get("role")))  # ray.get waits on the Ray workers' tasks
    out: list[Metric] = []
    entries: list[tuple[int, dict[str, Any], bool, str | None]] = [
        (main_pid, t, True, None) for t in main.get("threads", [])[1:]
    ]
    role_by_pid = {main_pid: "main", **{int(p["pid"]): str(p.get("role")) for p in collected.processes}}
    for p in collected.processes:
        for i, t in enumerate(p.get("threads", [])):
            entries.append((int(p["pid"]), t, i > 0, role_by_pid.get(int(p.get("ppid") or 0))))
    for pid, t, is_thread, parent in entries:
        meta: dict[str, Any] = {"role": str(t["role"]), "pid": pid}
        if is_thread:
            meta["thread"] = str(t.get("thread") or t.get("ident"))
        waits = _waits(t, participants)
        for w in waits:  # a pipe whose other end rlbench cannot see, in a process another one started: its parent's
            if w["side"] == "recv" and not w["other"] and parent is not None:
                w["other"] = [parent]
        for d in t.get("metrics") or (raw_metrics(t) if t.get("raw") else []):
            m = metric_from_dict(d)
            if not (m.name.startswith("time/") or m.name in ROLE_METRICS or m.name.split("/", 1)[0] in COUNTERS):
                continue
            m.meta = {**m.meta, **meta}
            if m.name.startswith("time/wait") and waits:
                m.meta["channels"] = [w for w in waits if _under(m.name, w["phase"])]
            out.append(m)
    main_waits = _waits((main.get("threads") or [{}])[0], participants)
    split = env_split(main, collected)
    meta: dict[str, Any] = {
        "followed": len(collected.processes),
        "unreported": collected.unreported,
        "not_followed": collected.not_followed,
        "main_waits": main_waits,
    }
    out.append(Metric(PROFILE_PROCESSES, "count", "none", [float(len(collected.processes))], meta=meta))
    if split is not None:
        out.append(Metric(PROFILE_ENV_WORKERS, "s", "none", [split["own_s"]], meta=split))
    return out


def job_steps(main: list[Metric], roles: list[Metric]) -> None:
    """Where the script's own main thread took no agent steps (a learner that actors feed, ``torchrun``'s launcher, a
    Ray driver), the job's are its other roles': ``env_steps``, ``sps`` and ``sps_steady`` of the main process become
    the sums over the roles that stepped (each role's steps over its own training time: the roles run side by side),
    and say so (``meta["from_roles"]``). Env workers are left out: their steps are their vector env's, which a role
    counts already."""
    steps = next((m for m in main if m.name == ENV_STEPS), None)
    if steps is None or (steps.samples and steps.samples[0] > 0):
        return
    stepping = {
        _who(m): m.samples[0]
        for m in roles
        if m.name == ENV_STEPS and m.samples and m.samples[0] > 0 and m.meta.get("role") != "env-worker"
    }
    if not stepping:
        return
    names = sorted({str(who[0]) for who in stepping})
    steps.samples = [float(sum(stepping.values()))]
    steps.meta = {**steps.meta, "from_roles": names}
    for name in (SPS, SPS_STEADY):
        rates = [m.samples[0] for m in roles if m.name == name and _who(m) in stepping and m.samples]
        rates = [r for r in rates if math.isfinite(r)]
        mine = next((m for m in main if m.name == name), None)
        if mine is not None and rates:
            mine.samples = [float(sum(rates))]
            mine.meta = {**mine.meta, "from_roles": names}


def _who(m: Metric) -> tuple[Any, Any, Any]:
    return m.meta.get("role"), m.meta.get("pid"), m.meta.get("thread")


def _under(metric: str, phase: str) -> bool:
    return metric == f"time/{phase}" or metric.endswith("/" + phase)


def _participants(procs: list[dict[str, Any]]) -> dict[str, dict[str, set[str]]]:
    merged: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for p in procs:
        for key, sides in (p.get("participants") or {}).items():
            for side, roles in sides.items():
                merged[key][side].update(roles)
    return merged


def trace_waits(procs: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """Per channel and side, the roles on the other side (for the trace's wait events)."""
    merged = _participants(procs)
    return {
        key: {side: sorted({r for s in OTHER_SIDE.get(side, ()) for r in sides.get(s, ())}) for side in sides}
        for key, sides in merged.items()
    }


OTHER_SIDE = {"get": ("put",), "put": ("get",), "recv": ("send",), "result": ("set",), "join": ("set",), "collective": ()}


def _waits(thread: dict[str, Any], participants: dict[str, dict[str, set[str]]]) -> list[dict[str, Any]]:
    """What one thread waited on: each channel and side, its seconds and calls, and the roles on the other side."""
    out = []
    for key, side, seconds, calls in thread.get("channels", []):
        sides = participants.get(key, {})
        others = sorted({r for s in OTHER_SIDE.get(side, ()) for r in sides.get(s, ())} - {thread.get("role")})
        if key.startswith("collective"):
            others = ["every rank"]
        out.append(
            {
                "phase": f"wait/{_kind(key, side)}",
                "channel": key,
                "side": side,
                "s": float(seconds),
                "calls": int(calls),
                "other": others,
            }
        )
    return out


def _kind(key: str, side: str) -> str:
    """The wait phase (``wait/<kind>``) a channel and side were noted under (:mod:`rlbench.profiling.waits`)."""
    if key == "ray":
        return "ray"
    if key.startswith("collective"):
        return "collective"
    if side in ("get", "put"):
        return "queue"
    if side == "recv":
        return "pipe"
    if side == "result":
        return "future"
    return {"join": "join", "collective": "collective"}.get(side, side)


def env_split(main: dict[str, Any], collected: Collected) -> dict[str, Any] | None:
    """A vector env's step in the main process, split: the env workers' own env time (each command's mean over the
    workers), the wait for the slowest worker (each command's max less its mean) and the rest of the main process's
    env phases (pipes, pickling, shared memory, the scheduler). ``None`` without env workers."""
    import numpy as np

    from rlbench.profiling.results import decode_series

    workers = [p for p in collected.processes if p.get("role") == "env-worker" and p.get("threads")]
    series = [decode_series(w["threads"][0]["env_series"]) for w in workers if w["threads"][0].get("env_series")]
    if len(series) < 1:
        return None
    main_env = _main_env_s(main)
    if main_env is None:
        return None
    n = min(len(s) for s in series)
    lengths = sorted({len(s) for s in series})
    table = np.vstack([s[:n] for s in series])
    complete = ~np.isnan(table).any(axis=0)
    if not complete.any():
        return None
    rows = table[:, complete]
    mean, peak = rows.mean(axis=0), rows.max(axis=0)
    scale = n / int(complete.sum())  # commands left unattributed in some worker: estimated from the attributed ones
    own = float(mean.sum()) * scale
    slowest = float(peak.sum()) * scale
    return {
        "own_s": own,
        "straggler_s": slowest - own,
        "rest_s": max(main_env - slowest, 0.0),
        "main_env_s": main_env,
        "workers": len(series),
        "commands": n,
        "command_counts": lengths,
        "attributed_commands": int(complete.sum()),
    }


def _main_env_s(main: dict[str, Any]) -> float | None:
    """The main process's env phases over its whole run (``run_s``), summed over their top-most paths."""
    threads = main.get("threads") or []
    metrics = main.get("metrics") or (threads[0].get("metrics") if threads else None) or []
    env = {}
    for d in metrics:
        name = d.get("name", "")
        meta = d.get("meta") or {}
        if name.startswith("time/") and meta.get("layer") == "environment" and "run_s" in meta:
            env[name[len("time/") :]] = float(meta["run_s"])
    tops = [p for p in env if not any(p.startswith(q + "/") for q in env if q != p)]
    total = sum(env[p] for p in tops)
    return total if total > 0 and math.isfinite(total) else None

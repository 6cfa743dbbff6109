"""Every role of a profiled job and who waits on whom, from records alone.

``rlbench profile`` follows a script's threads and processes; each one's records carry ``meta.role`` (and ``meta.pid``,
``meta.thread``). A role is every thread or process of one kind: the main process's main thread is ``main``; an
actor thread, the env workers, the data workers, ``rank-1``, a Ray actor class. Each role's time is its own wall after
its start-up (a spawned worker re-imports the script first): busy in its phases, or blocked in a wait (``wait/*``,
whose records name the roles on the other side). The verdict names the role the others wait on.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rlbench.report.format import fmt, fmt_s, md_code, md_table, md_text, pct
from rlbench.results.metrics import (
    PROFILE_CPU_S,
    PROFILE_ENV_WORKERS,
    PROFILE_PROCESSES,
    STARTUP_S,
    TRAIN_S,
    WALL_S,
    WARMUP_S,
    guess_layer,
)
from rlbench.results.records import Record, role_of

MAIN = "main"
WAIT_SHARE = 0.2
"""A role that waits this share of its time or more is waiting on someone; one that waits less is busy."""


@dataclass
class Role:
    """One role's figures: sums over its processes and threads, medians over repeats."""

    name: str
    pids: list[int] = field(default_factory=list)
    threads: int = 0
    run_s: float = 0.0  # its own steady state: its wall after start-up and after its first iteration (the warm-up)
    startup_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # steady-state seconds (inclusive), per phase path
    whole_s: float = 0.0  # its wall after start-up, warm-up included (what its hand timers' loop covers)
    whole_phases: dict[str, float] = field(default_factory=dict)  # seconds over that (inclusive), per phase path
    layers: dict[str, str] = field(default_factory=dict)
    waits: list[dict[str, Any]] = field(default_factory=list)  # each wait's channel, side, seconds, other side
    thread_role: bool = False  # its records are threads' (meta.thread), not processes' main threads
    cpu_s: float = math.nan  # on a CPU over its run (NaN: not known on this system)
    queued_s: float = math.nan  # runnable, waiting for a CPU

    @property
    def blocked_s(self) -> float:
        """Off the CPU and not in a wait rlbench hooked, over its wall after start-up: blocked where rlbench cannot see
        (a C++ wait, a sleep, I/O; a Ray worker waiting for its next task). NaN where the scheduler's figures are not
        known (the scheduler's figures cover the whole run, not the steady state alone)."""
        if not (math.isfinite(self.cpu_s) and math.isfinite(self.queued_s)):
            return math.nan
        whole_wait = sum(s for p, s in self.whole_phases.items() if self._top_wait(p))
        return max(self.whole_s - self.cpu_s - self.queued_s - whole_wait, 0.0)

    @property
    def idle_share(self) -> float:
        """Waiting on another role (its hooked waits' share of its steady state) and blocked elsewhere (that share of
        its wall after start-up)."""
        if not self.run_s > 0:
            return math.nan
        blocked = self.blocked_s / self.whole_s if math.isfinite(self.blocked_s) and self.whole_s > 0 else 0.0
        return self.wait_s / self.run_s + blocked

    @property
    def wait_s(self) -> float:
        return sum(s for p, s in self.phases.items() if self._top_wait(p))

    def _top_wait(self, path: str) -> bool:
        if self._layer(path) != "wait":
            return False
        parts = path.split("/")
        return not any(self._layer("/".join(parts[:i])) == "wait" for i in range(1, len(parts)))

    def _layer(self, path: str) -> str:
        return self.layers.get(path) or guess_layer(path)

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.run_s if self.run_s > 0 else math.nan

    @property
    def work_s(self) -> float:
        """Seconds in its attributed phases that are not waits (leaves summed)."""
        leaves = [p for p in self.phases if not any(q.startswith(p + "/") for q in self.phases)]
        return sum(self.phases[p] for p in leaves if self._layer(p) != "wait")

    def top(self, n: int = 3) -> list[tuple[str, float]]:
        """The leaf phases holding the most of its run, largest first (waits included)."""
        leaves = [p for p in self.phases if not any(q.startswith(p + "/") for q in self.phases)]
        return sorted(((p, self.phases[p]) for p in leaves), key=lambda x: -x[1])[:n]

    def others(self) -> list[str]:
        """The roles this one waited on (the other side of its waits), most seconds first."""
        by: dict[str, float] = defaultdict(float)
        for w in self.waits:
            for o in w.get("other", []):
                by[o] += float(w.get("s", 0.0))
        return [o for o, _ in sorted(by.items(), key=lambda x: -x[1])]


def roles(records: list[Record]) -> dict[str, Role]:
    """Every role of one run (``main`` first, then in the order they first appear): per repeat summed over the role's
    processes and threads, then the median over repeats."""
    per_repeat: dict[str, dict[int, Role]] = defaultdict(dict)
    order: list[str] = []
    for r in records:
        name = role_of(r) or MAIN
        if name not in order:
            order.append(name)
        role = per_repeat[name].setdefault(r.repeat, Role(name))
        pid = r.meta.get("pid")
        if isinstance(pid, int) and pid not in role.pids:
            role.pids.append(pid)
        if r.metric == WALL_S and r.meta.get("run_s") is not None:
            role.whole_s += float(r.meta["run_s"])
            role.threads += 1  # one wall per thread
            role.thread_role = "thread" in r.meta
        elif r.metric in (TRAIN_S, WARMUP_S) and r.samples and math.isfinite(r.samples[0]):
            role.run_s += float(r.samples[0]) * (1 if r.metric == TRAIN_S else -1)
        elif r.metric == PROFILE_CPU_S and r.samples and math.isfinite(r.samples[0]):
            role.cpu_s = (0.0 if math.isnan(role.cpu_s) else role.cpu_s) + float(r.samples[0])
            queued = float(r.meta.get("queued_s") or 0.0)
            role.queued_s = (0.0 if math.isnan(role.queued_s) else role.queued_s) + queued
        elif r.metric == STARTUP_S and r.samples:
            role.startup_s += float(r.samples[0]) if math.isfinite(r.samples[0]) else 0.0
        elif r.metric.startswith("time/") and r.metric != "time/warmup" and r.meta.get("run_s") is not None:
            path = r.metric[len("time/") :]
            role.whole_phases[path] = role.whole_phases.get(path, 0.0) + float(r.meta["run_s"])
            if r.samples and math.isfinite(r.samples[0]):
                role.phases[path] = role.phases.get(path, 0.0) + float(r.samples[0])
            if r.meta.get("layer"):
                role.layers[path] = str(r.meta["layer"])
            for c in r.meta.get("channels") or []:
                if isinstance(c, dict):
                    role.waits.append(c)
    out: dict[str, Role] = {}
    for name in order:
        reps = per_repeat[name]
        first = reps[min(reps)]
        merged = Role(name, sorted({p for r in reps.values() for p in r.pids}), max(r.threads for r in reps.values()))
        merged.run_s = statistics.median(r.run_s for r in reps.values())
        merged.whole_s = statistics.median(r.whole_s for r in reps.values())
        merged.startup_s = statistics.median(r.startup_s for r in reps.values())
        paths = {p for r in reps.values() for p in r.phases}
        merged.phases = {p: statistics.median(r.phases.get(p, 0.0) for r in reps.values()) for p in paths}
        paths = {p for r in reps.values() for p in r.whole_phases}
        merged.whole_phases = {p: statistics.median(r.whole_phases.get(p, 0.0) for r in reps.values()) for p in paths}
        merged.layers = {k: v for r in reps.values() for k, v in r.layers.items()}
        merged.waits = first.waits
        merged.thread_role = first.thread_role
        merged.cpu_s = statistics.median(r.cpu_s for r in reps.values())
        merged.queued_s = statistics.median(r.queued_s for r in reps.values())
        out[name] = merged
    return out


def followed(records: list[Record]) -> bool:
    """Whether the run holds records of roles other than the main one."""
    return any(role_of(r) for r in records)


def summary(records: list[Record]) -> dict[str, Any]:
    """``rlbench profile --json``'s ``roles``: role -> ``{"pids", "threads", "wall_s", "phases", "startup_s",
    "steady_s", "steady_phases", "wait_s"}``: its wall after start-up and the seconds of each phase over it (summed over
    the role's processes and threads; the main process's main thread is ``main``), its start-up, and its steady
    state (after its first iteration) with its seconds in waits there."""
    return {
        name: {
            "pids": r.pids,
            "threads": r.threads,
            "wall_s": r.whole_s,
            "phases": {p: r.whole_phases[p] for p in sorted(r.whole_phases)},
            "startup_s": r.startup_s,
            "steady_s": r.run_s,
            "steady_phases": {p: r.phases[p] for p in sorted(r.phases)},
            "wait_s": r.wait_s,
        }
        for name, r in roles(records).items()
    }


def verdict(table: dict[str, Role], launcher: bool = False) -> str:
    """Who the job waits on, in a sentence a user can act on (``launcher``: the main process only starts and watches
    the others, torchrun's agent, and is left out). A role is idle when it waits on another role (a hooked wait) or is
    blocked where rlbench cannot see (off the CPU outside any hooked wait)."""
    if launcher:
        table = {k: v for k, v in table.items() if k != MAIN}
        if not table:
            return "The main process only launched the workers, and no worker reported."
    # a role that only ever waited (a timer thread, an idle helper) does no work the job waits on: left out
    table = {k: v for k, v in table.items() if v.run_s > 0 and v.work_s > 0}
    if not table:
        return "No role did any work rlbench could attribute."
    cpu = _cpu_bound(table) + _threads_blocked(table)
    waiting = sorted((r for r in table.values() if r.idle_share >= WAIT_SHARE), key=lambda r: -r.idle_share)
    if not waiting:
        tops = "; ".join(
            f"{md_text(r.name)}: {', '.join(f'{md_code(p)} {pct(s / r.run_s)}' for p, s in r.top(2))}" for r in table.values()
        )
        return (
            f"No role waits {pct(WAIT_SHARE, 0)} of its time or more: every one is busy, so the job is as fast as its "
            f"work. Their largest phases: {tops}.{cpu}"
        )
    r = waiting[0]
    others = [o for o in r.others() if o != r.name]
    hooked = r.wait_s / r.run_s if r.run_s > 0 else 0.0
    if others:
        on = ", ".join(md_text(o) for o in others)
    elif math.isfinite(r.blocked_s) and r.blocked_s > r.wait_s:
        on = "something outside Python rlbench cannot see (a C/C++ wait, a sleep, I/O; a Ray worker's next task)"
    else:
        on = "another role (rlbench could not see the other side)"
    unseen = r.idle_share - hooked
    how = f" ({pct(hooked)} in waits it saw, {pct(unseen)} blocked elsewhere)" if unseen >= 0.05 and hooked >= 0.05 else ""
    text = f"**{md_text(r.name)}** waited **{pct(r.idle_share)}** of its time{how}, on {on}"
    busy = [table[o] for o in others if o in table]
    if busy:
        shares = ", ".join(f"{md_text(o.name)} busy {pct(1 - o.idle_share)}" for o in busy)
        if all(o.idle_share < WAIT_SHARE for o in busy):
            names = " and ".join(md_text(o.name) for o in busy)
            return (
                f"{text}; {shares}: **{names} {'is' if len(busy) == 1 else 'are'} the bottleneck**. Making "
                f"{names} faster (or running more of {'it' if len(busy) == 1 else 'them'}) speeds up the job; making "
                f"{md_text(r.name)} faster does not.{cpu}"
            )
        return f"{text}; {shares}: the roles wait on each other, so the job is bound by the hand-offs between them.{cpu}"
    return f"{text}.{cpu}"


def _threads_blocked(table: dict[str, Role]) -> str:
    """A sentence when roles that are Python threads of one process were blocked outside any hooked wait for a tenth of
    their time or more: there, that is most often the GIL (a thread waiting while another runs Python)."""
    threads = [r for r in table.values() if r.thread_role]
    if not threads:
        return ""
    shared = {p for r in threads for p in r.pids}
    processes = {p for r in table.values() if not r.thread_role and r.name != MAIN for p in r.pids}

    def with_threads(r: Role) -> bool:
        if r.thread_role:
            return True
        return bool(shared - processes) if r.name == MAIN else bool(set(r.pids) & shared)

    blocked = [
        r
        for r in table.values()
        if with_threads(r) and math.isfinite(r.blocked_s) and r.whole_s > 0 and r.blocked_s / r.whole_s >= 0.1
    ]
    if not blocked:
        return ""
    names = ", ".join(f"{md_text(r.name)} {pct(r.blocked_s / r.whole_s)}" for r in blocked)
    return (
        f" Blocked outside any hooked wait: {names}; {'a Python thread' if len(blocked) == 1 else 'Python threads'} "
        "sharing a process with other Python threads, where that is most often the GIL (a thread waiting while another "
        "runs Python) or torch's own thread pool: processes instead of threads remove the GIL's share."
    )


def _cpu_bound(table: dict[str, Role]) -> str:
    """A sentence when roles spent a large part of their time runnable but waiting for a free CPU core."""
    queued = [r for r in table.values() if r.run_s > 0 and math.isfinite(r.queued_s) and r.queued_s / r.run_s >= 0.1]
    if not queued:
        return ""
    names = ", ".join(f"{md_text(r.name)} {pct(r.queued_s / r.run_s)}" for r in queued)
    return (
        f" Time spent ready to run but waiting for a free CPU core: {names}: the job's processes and threads want more "
        "CPU than the machine gives them (fewer workers, or a machine with more cores, would remove that wait)."
    )


def section(records: list[Record]) -> list[str]:
    """The report's section on roles: the verdict, a table of every role (busy against waiting), each role's top
    phases and what it waited on, a vector env's step split, and the processes that never reported."""
    if not followed(records):
        return []
    table = roles(records)
    processes = next((r for r in records if r.metric == PROFILE_PROCESSES and not role_of(r)), None)
    launcher = bool(processes is not None and processes.meta.get("main_is_launcher"))
    rows = []
    for r in table.values():
        name = md_code(r.name) + (" (the launcher: it starts and watches the others)" if launcher and r.name == MAIN else "")
        top = ", ".join(f"{md_code(p)} {pct(s / r.run_s if r.run_s else math.nan)}" for p, s in r.top())
        if r.thread_role:
            who = f"{r.threads} thread{'s' if r.threads != 1 else ''}"
        elif len(r.pids) > 1:
            who = f"{len(r.pids)} processes"
        else:
            who = f"pid {r.pids[0]}" if r.pids else "the script's"
        whole, steady = _share_of(r.whole_s), _share_of(r.run_s)
        rows.append(
            [
                name,
                who,
                fmt_s(r.whole_s),
                fmt_s(r.startup_s),
                fmt_s(r.run_s),
                whole(r.cpu_s),
                steady(r.wait_s),
                whole(r.blocked_s),
                whole(r.queued_s),
                top,
            ]
        )
    out = [
        "## Roles: who waits on whom",
        "",
        verdict(table, launcher),
        "",
        "Each role is every thread or process of one kind: `main` is the script's own main thread; other threads are "
        "named by `rlbench.role(...)` or their name, other processes by what started them. Its wall after start-up (a "
        "spawned worker re-imports the script first; its start-up is shown apart) splits into time on a CPU, time "
        "blocked where rlbench cannot see (off the CPU outside any hooked wait: a C/C++ wait, a sleep, I/O) and time "
        "ready to run but waiting for a free core (the scheduler's own figures, over that wall). Its steady state "
        "(after its first iteration) holds its phases: the waits rlbench hooked (`wait/*`: a queue, a pipe, a future, "
        "a collective) and the top phases are shares of it. With several processes or threads, their seconds are "
        "summed.",
        "",
        md_table(
            [
                "Role",
                "Processes / threads",
                "Wall after start-up",
                "Start-up",
                "Steady state",
                "On a CPU",
                "In waits (steady)",
                "Blocked elsewhere",
                "Waiting for a core",
                "Top phases",
            ],
            rows,
        ),
    ]
    waits = []
    for r in table.values():
        merged: dict[tuple[str, str, str], float] = defaultdict(float)
        for w in r.waits:  # one row per kind of wait and other side (a role's processes and channels summed)
            other = ", ".join(md_text(o) for o in w.get("other", [])) or "not seen"
            merged[(str(w.get("phase", "wait")), str(w.get("side", "")), other)] += float(w.get("s", 0.0))
        for (phase, side, other), seconds in merged.items():
            share = seconds / r.whole_s if r.whole_s else math.nan
            waits.append([md_code(r.name), md_code(phase), md_text(side), other, pct(share)])
    if waits:
        out += [
            "",
            "What each role waited on (the other side: the roles that used the same queue, pipe or future from the "
            "other end; seconds from the first repeat):",
            "",
            md_table(["Role", "Wait", "Its side", "Other side", "Share of its time"], waits),
        ]
    out += env_split_lines(records)
    out += unreported_lines(records)
    return out


def _share_of(total: float) -> Any:
    def share(v: float) -> str:
        return pct(v / total) if total > 0 and math.isfinite(v) else "–"

    return share


def env_split_lines(records: list[Record]) -> list[str]:
    """How the main loop's vector-env step splits (``profile/env_workers``), as a sentence."""
    r = next((r for r in records if r.metric == PROFILE_ENV_WORKERS and not role_of(r)), None)
    if r is None:
        return []
    m = r.meta
    total = float(m.get("main_env_s") or 0.0)
    if total <= 0:
        return []
    own, straggler, rest = (float(m.get(k) or 0.0) for k in ("own_s", "straggler_s", "rest_s"))
    return [
        "",
        f"**The vector env's step, split.** The main loop spent {fmt_s(total)} in its env phases over "
        f"{fmt(float(m.get('commands') or 0), 0)} commands to {m.get('workers')} env workers: the workers' own env time "
        f"{fmt_s(own)} ({pct(own / total)}, each command's mean over the workers), waiting for the slowest worker "
        f"{fmt_s(straggler)} ({pct(straggler / total)}, each command's slowest less its mean), and the rest "
        f"{fmt_s(rest)} ({pct(rest / total)}: pipes, pickling, shared memory, and the workers waiting for a CPU). "
        + _env_advice(own / total, straggler / total, rest / total),
    ]


def _env_advice(own: float, straggler: float, rest: float) -> str:
    if rest >= max(own, straggler):
        return (
            "The IPC around the env is the largest part: fewer, larger steps per message (more envs per worker), "
            "shared memory for observations, or fewer workers than CPU cores would cut it."
        )
    if straggler >= own:
        return "The slowest worker sets the pace: uneven envs or too few cores for the workers."
    return "The envs' own stepping is the largest part: a faster env (or more workers, given free cores) would help."


def unreported_lines(records: list[Record]) -> list[str]:
    """The processes that never reported, and those rlbench saw but could not follow."""
    r = next((r for r in records if r.metric == PROFILE_PROCESSES and not role_of(r)), None)
    if r is None:
        return []
    lost = r.meta.get("unreported") or []
    foreign = r.meta.get("not_followed") or []
    out = []
    snapped = [p for p in lost if p.get("snapshot")]
    lost = [p for p in lost if not p.get("snapshot")]
    if snapped:
        names = "; ".join(f"pid {p.get('pid')} ({md_text(' '.join(map(str, p.get('argv', [])[:4])))})" for p in snapped[:8])
        out += [
            "",
            f"{len(snapped)} process(es) were ended before they could write their results (Ray ends its workers so): "
            f"their figures are those of their last snapshot (taken every quarter second while they work, and "
            f"whenever they go quiet): {names}.",
        ]
    if lost:
        names = "; ".join(f"pid {p.get('pid')} ({md_text(' '.join(map(str, p.get('argv', [])[:4])))})" for p in lost[:8])
        out += [
            "",
            f"**{len(lost)} process(es) joined and never reported** (killed, crashed, or still running when the script "
            f"ended; their numbers are missing from the tables): {names}.",
        ]
    if foreign:
        names = "; ".join(f"pid {p.get('pid')} ({md_text(' '.join(map(str, p.get('argv', [])[:4])))})" for p in foreign[:8])
        out += [
            "",
            f"**{len(foreign)} process(es) seen but not followed** (another program, or a Python without rlbench "
            f"importable, or started without the environment): {names}.",
        ]
    return out

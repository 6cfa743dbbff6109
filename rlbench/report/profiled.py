"""Sections of the bottleneck report that only runs of ``rlbench profile`` (or ``rlbench.session``) have.

A profiled run is any script's: what it measured is what the hooks saw (``meta["kind"] == "profile"``). These
sections say what the automatic attribution cost, how memory grew per phase, and show the metrics the script
recorded itself (``rlbench.record``).
"""

from __future__ import annotations

import math
import statistics

from rlbench.report.data import RunData
from rlbench.report.format import fmt, fmt_s, md_code, md_table, md_text, pct
from rlbench.report.phases import Breakdown
from rlbench.results.metrics import (
    COUNTERS,
    CUDA_MEM,
    DIAG,
    ITER_TIME,
    LIMITS,
    MACHINE,
    MEM,
    PROFILE_ATTRIBUTED,
    PROFILE_CHILD_WALL_S,
    PROFILE_COMMAND_S,
    PROFILE_EVENT_US,
    PROFILE_EVENTS,
    PROFILE_EXCLUDED_S,
    PROFILE_LOGGING_S,
    PROFILE_OVERHEAD_S,
    PROFILE_PASSTHROUGH_US,
    PROFILE_PLAIN_WALL_S,
    PROFILE_THREADS_S,
    TIME,
)

KNOWN_PREFIXES = (
    TIME, ITER_TIME, DIAG, MACHINE, MEM, CUDA_MEM, LIMITS, "profile/", "timer/", "train/", *(f"{c}/" for c in COUNTERS)
)  # fmt: skip
KNOWN = {
    "sps",
    "sps/steady",
    "wall_s",
    "startup_s",
    "init_s",
    "warmup_s",
    "train_s",
    "eval_s",
    "env_steps",
    "iterations",
    "eval_return",
}


def is_profiled(d: RunData) -> bool:
    """Whether the run was measured by automatic attribution (a user's script) rather than rlbench's own loops."""
    return d.first.meta.get("kind") == "profile"


COMMAND_COST_MARK = "<!-- rlbench profile: the command's measured cost -->"
"""Where ``rlbench profile`` puts :func:`command_cost_line` once the report and its charts are done (the figure
covers them); a re-rendered report reads it from the ``profile/command_s`` record instead."""


def command_cost_line(
    own_s: float, command_s: float, script_s: float, hooks_share: float, measured: str = "", plain_s: float = 0.0
) -> str:
    """The whole cost of profiling, in one line: the hooks' share of the run and the command's own seconds; then
    ``measured`` (:func:`single_run_cost`), where ``--against-plain`` measured it (its plain runs took ``plain_s``)."""
    if math.isfinite(hooks_share):
        hooks = f"hooks ≈ **{pct(hooks_share, 2)}** of the training wall time (lower bound)"
    else:
        hooks = "hooks: not measured"
    return (
        f"Profiling cost: {hooks}; start-up and the command's own work **{fmt_s(own_s)}** (measured in this run: "
        f"the whole command's wall from the CLI's start to the report written, {fmt_s(command_s)}, minus the script's "
        f"own run in its process, {fmt_s(script_s)}"
        + (f", and the plain runs, {fmt_s(plain_s)}" if plain_s > 0 else "")
        + "; the rest is the CLI's start, rlbench's imports, hooks set-up and "
        "results in the script's process, fingerprints, records, report and charts)." + measured
    )


def command_cost(d: RunData) -> list[str]:
    """The cost line from the ``profile/command_s`` record, or the place the running command fills in."""
    share = d.meta(PROFILE_OVERHEAD_S, "share", math.nan)
    if d.has(PROFILE_COMMAND_S):
        m = d.by_metric[PROFILE_COMMAND_S][0].meta
        own = d.med(PROFILE_COMMAND_S)
        measured = single_run_cost(plain_pairs(d), own)
        command_s, script_s, plain_s = (m.get(k, math.nan) for k in ("command_s", "script_s", "plain_s"))
        plain_s = plain_s if math.isfinite(plain_s) else 0.0
        return [command_cost_line(own, command_s, script_s, share, measured, plain_s)]
    if str(d.first.meta.get("command", "")).startswith("rlbench profile"):
        return [COMMAND_COST_MARK]
    return []


def plain_pairs(d: RunData) -> list[tuple[int, str, float, float]]:
    """``--against-plain``'s pairs: (repeat, order, plain seconds, profiled seconds), each process start to exit."""
    if not (d.has(PROFILE_PLAIN_WALL_S) and d.has(PROFILE_CHILD_WALL_S)):
        return []
    profiled = {r.repeat: r.samples[0] for r in d.by_metric[PROFILE_CHILD_WALL_S] if r.samples}
    return [
        (r.repeat, str(r.meta.get("order", "")), r.samples[0], profiled[r.repeat])
        for r in d.by_metric[PROFILE_PLAIN_WALL_S]
        if r.samples and r.repeat in profiled and r.samples[0] > 0
    ]


def against_plain(d: RunData) -> float:
    """The median over ``--against-plain``'s pairs of profiled over plain, minus 1 (NaN without pairs)."""
    pairs = plain_pairs(d)
    return statistics.median(p / q - 1 for _, _, q, p in pairs) if pairs else math.nan


def plain_section(d: RunData) -> list[str]:
    """What profiling cost as measured by ``--against-plain``: each profiled process against its plain run."""
    pairs = plain_pairs(d)
    if not pairs:
        return []
    ratios = [p / q - 1 for _, _, q, p in pairs]
    rows = [[str(k), order, fmt(q, 2), fmt(p, 2), f"{100 * r:+.1f}%"] for (k, order, q, p), r in zip(pairs, ratios)]
    med = statistics.median(ratios)
    lines = [
        "### Measured against the plain script (`--against-plain`)",
        "",
        "Each repeat was paired with a run of the same command without rlbench, alternating which went first "
        "(profiled-plain, plain-profiled, plain-profiled, profiled-plain, ...); each process is timed from its start "
        "to its exit, on this machine, in this run. It holds what the estimate above cannot see: rlbench's start-up "
        "and results in the script's process, and the hooks' effect on the script's own code (colder caches).",
        "",
        md_table(["Pair", "Order", "Plain (s)", "Profiled (s)", "Profiled against plain"], rows),
        "",
        f"Median over {len(pairs)} pair{'s' if len(pairs) != 1 else ''}: **{100 * med:+.1f}%** "
        f"(from {100 * min(ratios):+.1f}% to {100 * max(ratios):+.1f}%).",
    ]
    if len(pairs) < 4:
        lines[-1] += " Fewer than four pairs: the machine's noise can be larger than the cost; run `--repeats 4` or more."
    return lines


def single_run_cost(pairs: list[tuple[int, str, float, float]], own_s: float) -> str:
    """The whole command against its plain runs: the profiled processes and the command's own seconds over the plain
    runs' seconds, all summed (for one repeat, what one ``rlbench profile`` costs); ``""`` without pairs."""
    if not pairs or not math.isfinite(own_s):
        return ""
    plain = sum(q for _, _, q, _ in pairs)
    profiled = sum(p for _, _, _, p in pairs)
    runs = f"its {len(pairs)} profiled runs" if len(pairs) > 1 else "its profiled run"
    theirs = "the plain runs' time" if len(pairs) > 1 else "the plain run's time"
    return (
        f" Measured against the plain script (below), the whole command ({runs} and its own work) took "
        f"**{100 * ((profiled + own_s) / plain - 1):+.1f}%** against {theirs}."
    )


def logging_section(d: RunData) -> list[str]:
    """What ``--log-to`` and ``--live`` logged, where, and what rlbench's logging thread cost; what was not logged."""
    if not d.has(PROFILE_LOGGING_S):
        return []
    lines = ["### Logging while the script ran (`--log-to`, `--live`)", ""]
    for r in d.by_metric[PROFILE_LOGGING_S]:
        m = r.meta
        cpu, wall = (r.samples or [math.nan])[0], float(m.get("wall_s") or math.nan)
        what = []
        if m.get("log_to"):
            runs = m.get("runs") or []
            where = "; ".join(
                f"{md_code(str(x.get('backend')))} {md_code(str(x.get('where')))} "
                + ("(the script's own run)" if x.get("user") else "(opened by rlbench)")
                for x in runs
            )
            what.append(
                f"`--log-to {m['log_to']}` every {fmt(float(m.get('every_s') or math.nan), 3)} s: {m.get('points', 0)} "
                f"points of {m.get('series', 0)} series and {m.get('texts', 0)} bottleneck table(s), on "
                f"{m.get('step', 'agent steps')} step" + (f", into {where}" if where else ", nowhere (no run was opened)")
            )
        if m.get("live"):
            what.append("`--live`: this process's figures published once a second")
        share = cpu / wall if wall > 0 and math.isfinite(cpu) else math.nan
        lines.append(
            f"- Repeat {r.repeat}: " + "; ".join(what) + f". rlbench's logging thread used {fmt_s(cpu)} of CPU over the "
            f"script's {fmt_s(wall)} ({pct(share, 2)} of one core), reading the figures, computing the series and calling "
            "the tracker (a tracker's own background threads and processes are not in it)."
        )
        failures = m.get("failures") or []
        if failures or m.get("failed_points"):
            lines.append(
                f"  - **Not logged**: {m.get('failed_points', 0)} point(s) and {max(int(m.get('failures_n') or 0), 0)} "
                f"call(s) failed; the profile went on. First: {md_code(str(failures[0]))}"
                if failures
                else f"  - **Not logged**: {m.get('failed_points', 0)} point(s)."
            )
        for note in m.get("notes") or []:
            lines.append(f"  - {md_text(note[:1].upper() + note[1:])}.")
    return lines


def overhead_section(d: RunData, b: Breakdown) -> list[str]:
    """What the hooks cost: events of each kind times their cost measured in the same run; and what the command
    cost around the script (measured by the command, :func:`command_cost`)."""
    cost = command_cost(d)
    measured = plain_section(d)
    if measured:
        cost = [*cost, "", *measured] if cost else measured
    logged = logging_section(d)
    if logged:
        cost = [*cost, "", *logged] if cost else logged
    if not d.has(PROFILE_OVERHEAD_S):
        return ["## What profiling cost", "", *cost] if cost else []
    ev = d.by_metric[PROFILE_EVENTS][0].meta
    full = d.med(PROFILE_EVENTS) - (ev.get("merges") or 0)
    calls, repeats = ev.get("calls"), ev.get("repeats")  # (records from before they were kept say neither)
    calibration = f"minimum of {repeats:g} × {calls:,.0f} calls" if calls and repeats else "the minimum of repeated loops"
    rows = [
        ["Phase opened and closed at top level", fmt(d.med(PROFILE_EVENT_US), 3) + " µs", fmt(full, 0)],
        ["Call continuing the phase it just left", fmt(ev.get("merge_us", math.nan), 3) + " µs", fmt(ev.get("merges"), 0)],
        ["Nested hooked call (passes through)", fmt(d.med(PROFILE_PASSTHROUGH_US), 3) + " µs", fmt(ev.get("passthrough"), 0)],
        ["Peak-RSS reading", fmt(ev.get("mark_us", math.nan), 3) + " µs", fmt(ev.get("memory_marks"), 0)],
    ]
    ov = d.med(PROFILE_OVERHEAD_S)
    share = d.meta(PROFILE_OVERHEAD_S, "share", math.nan)
    lines = [
        "## What profiling cost",
        "",
        "Each kind of hook event was timed in the same process right after the script finished (a hooked call "
        f"against a bare one, {calibration}); the estimate is those costs times this run's events. It is a lower "
        "bound: a nested call inside real code (a module's sub-modules, `Tensor.to` inside torch) costs more than the "
        "calibrated call, and the hooks' own time lands mostly in Python/other. Compare shares, not absolute times, "
        "with an unprofiled run.",
        "",
        md_table(["Hook event", "Cost per event", "Events (first repeat)"], rows),
        "",
        f"Estimated cost of the hooks (lower bound): {fmt_s(ov)}, **{pct(share, 2)}** of the training wall time.",
    ]
    excluded = d.med(PROFILE_EXCLUDED_S)
    if math.isfinite(excluded) and excluded > 0:
        it = d.meta(PROFILE_EXCLUDED_S, "counted_iteration")
        lines += [
            "",
            f"Iteration {it} ran under the op counter (`--count-ops`: a torch dispatch mode, which slows what it counts): "
            f"its {fmt_s(excluded)} are left out of the steady state above.",
        ]
    return [*lines, "", *cost] if cost else lines


def _exclusive_iter_s(d: RunData, phase: str) -> float:
    """Median seconds per steady iteration spent in ``phase`` itself (its children's medians taken off)."""
    own = d.med(f"{ITER_TIME}{phase}")
    children = [m for m in d.by_metric if m.startswith(f"{ITER_TIME}{phase}/") and "/" not in m[len(f"{ITER_TIME}{phase}/") :]]
    return own - sum(d.med(c) for c in children)


def limits_section(d: RunData) -> list[str]:
    """Each counted phase against this machine's matmul rate at its own shapes and its op-dispatch floor."""
    from rlbench.report.roofline import verdict

    if not d.has(f"{LIMITS}dispatch_us"):
        return []
    dispatch = d.med(f"{LIMITS}dispatch_us")
    ctx = d.by_metric[f"{LIMITS}dispatch_us"][0].meta
    phases = sorted(
        {m[len("ops/") :] for m in d.by_metric if m.startswith("ops/") and m != "ops/iteration"},
        key=lambda p: (-d.med(f"flops/{p}") if d.has(f"flops/{p}") else 0.0, p),  # name breaks ties: same order each run
    )
    rows = []
    for phase in phases:
        secs = _exclusive_iter_s(d, phase) if phase != "other" else math.nan
        ops = d.med(f"ops/{phase}")
        flops = d.med(f"flops/{phase}") if d.has(f"flops/{phase}") else 0.0
        achievable = d.med(f"{LIMITS}achievable_s/{phase}") if d.has(f"{LIMITS}achievable_s/{phase}") else 0.0
        floor = ops * dispatch * 1e-6
        ok = math.isfinite(secs) and secs > 0
        rows.append(
            [
                "Python/other" if phase == "other" else f"{md_code(phase)}",
                fmt(secs * 1e6, 0) if ok else "–",
                fmt(ops, 0),
                fmt(flops / 1e6, 1),
                fmt(flops / secs / 1e9, 1) if ok and flops else "–",
                pct(achievable / secs) if ok and achievable else "–",
                pct(floor / secs) if ok else "–",
                verdict(secs, achievable, floor) if ok else "–",
            ]
        )
    return [
        "## Against this machine's limits",
        "",
        f"Measured in the same process after the script ended ({ctx.get('device')}, {ctx.get('threads')} torch threads, "
        f"the script's own): the achievable matmul rate at each product shape the counted iteration used "
        f"({ctx.get('shapes')} shapes, up to {fmt(d.med(f'{LIMITS}peak_gflops'), 0)} GFLOP/s), and the floor cost of "
        f"one torch op ({fmt(dispatch, 2)} µs). A phase is compute-bound when its products at that rate explain most "
        "of its time, dispatch-bound when its op count at the floor does; neither means Python or other work.",
        "",
        md_table(
            [
                "Phase",
                "µs / iteration",
                "Torch ops",
                "MFLOP",
                "Achieved GFLOP/s",
                "Products at achievable rate",
                "Dispatch floor",
                "Bound",
            ],
            rows,
        ),
    ]


def memory_section(d: RunData) -> list[str]:
    """Peak-RSS growth (and CUDA peak allocation) per top-level phase."""
    rows = []
    for prefix, what in ((MEM, "peak RSS growth"), (CUDA_MEM, "CUDA peak allocated")):
        for metric in sorted(m for m in d.by_metric if m.startswith(prefix)):
            phase = metric[len(prefix) :]
            label = "Python/other" if phase == "other" else f"{md_code(phase)}"
            rows.append([label, what, fmt(d.med(metric) / 2**20, 2)])
    if not rows:
        return []
    return [
        "## Memory by phase",
        "",
        "How much the process's peak resident memory grew while each top-level phase ran (read at phase boundaries, "
        "in the first iterations and every 8th after); growth is where new memory was first touched, usually in the "
        "warm-up.",
        "",
        md_table(["Phase", "Measure", "MiB (median over repeats)"], rows),
    ]


def user_metrics_section(d: RunData) -> list[str]:
    """The metrics the script recorded itself (``rlbench.record``), medians over repeats."""
    names = [m for m in d.by_metric if m not in KNOWN and not m.startswith(KNOWN_PREFIXES)]
    if not names:
        return []
    rows = []
    for name in names:
        r = d.by_metric[name][0]
        rows.append([f"{md_code(name)}", fmt(d.med(name), 4), r.unit or "–", r.direction, str(len(r.samples))])
    return [
        "## Metrics the script recorded",
        "",
        "Recorded with `rlbench.record(...)`; medians over repeats of each repeat's mean.",
        "",
        md_table(["Metric", "Median", "Unit", "Better", "Samples per repeat"], rows),
    ]


def no_eval_note() -> list[str]:
    """Learning section of a profiled run that recorded no ``eval_return``."""
    return [
        "## Learning outcome",
        "",
        'The script recorded no `eval_return`. Add `rlbench.record("eval_return", returns, unit="return", '
        'direction="higher")` after its evaluation to see it here and have `rlbench gate` check that a faster '
        "change still learns.",
    ]


LONG_EXCESS = 0.02
"""Unattributed iterations called out when long ones (over ``long_x`` times the attributed median) hold this much
more of their time than long ones hold of the attributed iterations' time: work no attributed iteration saw."""


def sampling_section(d: RunData) -> list[str]:
    """Which steady iterations the profile attributed, when it sampled them (``--all-iterations`` turns it off)."""
    if not d.has(PROFILE_ATTRIBUTED):
        return []
    meta = d.by_metric[PROFILE_ATTRIBUTED][0].meta
    steady, every = int(meta.get("steady") or 0), int(meta.get("every") or 1)
    attributed = int(d.by_metric[PROFILE_ATTRIBUTED][0].samples[0])
    share = float(meta.get("attributed_s") or 0.0) / float(meta.get("steady_s") or math.nan)
    lines = [
        "## Sampled iterations",
        "",
        f"From iteration {fmt(meta.get('from'), 0)} on, one iteration in {every} was attributed, picked by a hash of "
        "its index; in the others the hooks passed every call through and recorded only where the iteration began "
        f"and its agent steps. **{attributed:,} of {steady:,} steady iterations** were attributed "
        f"({pct(share, 1)} of the steady wall time, first repeat). The phase seconds above are the first "
        f"{fmt(meta.get('from'), 0)} iterations' as measured and the later attributed ones' scaled to all the later "
        "iterations' wall time, so per-step and per-call figures are the attributed iterations'; the Events column "
        "counts their calls. `--all-iterations` attributes every iteration, at the hooks' full cost.",
    ]
    unattributed_long, attributed_long = meta.get("unattributed_long_share"), meta.get("attributed_long_share")
    if unattributed_long is not None and attributed_long is not None and unattributed_long - attributed_long >= LONG_EXCESS:
        lines += [
            "",
            f"**Iterations over {fmt(meta.get('long_x'), 0)}× the attributed ones' median held "
            f"{pct(unattributed_long, 1)} of the unattributed time, against {pct(attributed_long, 1)} of the "
            f"attributed**; the longest took {fmt(meta.get('longest_unattributed_x'), 1)}× that median. That time is "
            "shared out in the attributed iterations' proportions, though it was probably other work (an evaluation, a "
            "checkpoint). Rerun with `--all-iterations` to see what it was.",
        ]
    return lines


def threads_section(d: RunData) -> list[str]:
    """What Python threads other than the profiled one did: phases follow the thread that started the script, so a
    trainer in worker threads would otherwise show as "Python/other" with nothing to say why."""
    if not d.has(PROFILE_THREADS_S):
        return []
    meta = d.by_metric[PROFILE_THREADS_S][0].meta
    if meta.get("followed"):  # each thread that made a hooked call is a role of its own, in the section on roles
        return []
    cpu, run_s = d.med(PROFILE_THREADS_S), float(meta.get("run_s") or math.nan)
    lines = [
        "## Other threads",
        "",
        f"{fmt(meta.get('threads'), 0)} Python thread(s) besides the profiled one used **{fmt_s(cpu)}** of CPU "
        f"({pct(cpu / run_s if run_s > 0 else math.nan, 1)} of the run's wall time, first repeat). Phases follow the "
        "main thread only: their work is not in the tables above, and the main thread's time waiting for them "
        "(a `join`, a queue) shows as Python/other.",
    ]
    if meta.get("foreign_phases"):
        lines += [
            "",
            f"{fmt(meta['foreign_phases'], 0)} `rlbench.phase` block(s) opened in those threads were not attributed "
            "(they never land on the main thread's phases).",
        ]
    return lines

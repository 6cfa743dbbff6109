"""An automatic attribution as ordinary metrics: the same names rlbench's own loops record, so every report applies.

Iterations split the run: the first is the warm-up (``time/warmup``); the steady state is every later iteration but
the one that ran under the op counter (a dispatch mode slows what it counts), which is reported apart
(``profile/excluded_s``). The last iteration, which runs to the end of the script, counts in the totals but gives no
per-iteration sample. A run with no env event at all (a function under
``@rlbench.benchmark``) is one steady iteration with no warm-up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any

from rlbench.profiling.attribution import SAMPLE_FROM, Attribution, IterationMark
from rlbench.results.metrics import (
    CUDA_MEM,
    ENV_STEPS,
    ITERATIONS,
    LIMITS,
    MEM,
    PROFILE_ATTRIBUTED,
    PROFILE_CPU_S,
    PROFILE_EVENT_US,
    PROFILE_EVENTS,
    PROFILE_EXCLUDED_S,
    PROFILE_OVERHEAD_S,
    PROFILE_PASSTHROUGH_US,
    PROFILE_THREADS_S,
    SPS,
    SPS_STEADY,
    STARTUP_S,
    TIMER_OVERHEAD_S,
    TRAIN_S,
    WALL_S,
    WARMUP,
    WARMUP_S,
    Metric,
    guess_layer,
    iter_time_metric,
    time_metric,
)

if TYPE_CHECKING:  # numpy is imported where the metrics are computed: rlbench's own process reads them only
    import numpy as np

MAX_ITER_SAMPLES = 1000
"""``iter_time/`` keeps at most this many samples: longer runs average consecutive iterations (``meta``: ``per_sample``)."""


def ordered_paths(paths: Iterable[str]) -> list[str]:
    """Every path and its ancestors as a tree walk: each parent right before its sub-tree, siblings in first-seen order."""
    children: dict[str, list[str]] = {"": []}
    for p in paths:
        parts = p.split("/") if p else []
        for i in range(1, len(parts) + 1):
            parent, q = "/".join(parts[: i - 1]), "/".join(parts[:i])
            if q not in children:
                children[q] = []
                children[parent].append(q)
    out: list[str] = []
    todo = list(reversed(children[""]))
    while todo:
        q = todo.pop()
        out.append(q)
        todo.extend(reversed(children[q]))
    return out


def inclusive(excl: dict[str, float], paths: list[str]) -> dict[str, float]:
    """Inclusive seconds of each path: its own plus its sub-tree's."""
    return {p: sum(v for q, v in excl.items() if q == p or q.startswith(p + "/")) for p in paths}


def _delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: v - a.get(k, 0.0) for k, v in b.items() if v - a.get(k, 0.0) > 0}


def snapshot_matrix(marks: list[IterationMark], final: dict[str, float]) -> tuple[list[str], np.ndarray]:
    """Every mark's snapshot of the running totals, then ``final`` (the run's end), as the rows of one matrix whose
    columns are the returned keys; a phase absent from a snapshot had 0 s there.

    Marks an Attributor made hold their snapshots packed against the final totals' keys (:class:`IterationMark`):
    those are read as one buffer, with no dict per mark. Any other marks go through their dicts.
    """
    import numpy as np

    keys = list(final)
    shared = marks[0].keys if marks else None
    if shared is not None and shared == keys[: len(shared)] and all(m.keys is shared for m in marks):
        lengths = np.fromiter((len(m.packed) // 8 for m in marks), np.intp, len(marks))
        values = np.frombuffer(b"".join(m.packed for m in marks), float)
        rows = np.repeat(np.arange(len(marks)), lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        out = np.zeros((len(marks) + 1, len(keys)))
        out[rows, np.arange(len(values)) - starts] = values
        out[-1] = np.fromiter(final.values(), float, len(keys))
        return keys, out
    snapshots = [mark.excl for mark in marks] + [final]
    keys += sorted(set().union(*(snap.keys() for snap in snapshots)) - final.keys())
    zeros = [0.0] * len(keys)  # (one flat pass, no list per snapshot: a list each is 4x slower at this size)
    flat = chain.from_iterable(map(snap.get, keys, zeros) for snap in snapshots)
    return keys, np.fromiter(flat, float, len(snapshots) * len(keys)).reshape(-1, len(keys))


LONG_X = 5.0
"""A steady iteration this many times the attributed iterations' median is a long one (see :func:`_long_iterations`)."""


def _long_iterations(spans: np.ndarray, kept: np.ndarray) -> dict[str, float]:
    """The longest unattributed span over the attributed spans' median, and the share of each side's seconds (the
    unattributed and the attributed spans) that spans over :data:`LONG_X` times that median hold."""
    import numpy as np

    if kept.all() or not kept.any():
        return {}
    median = float(np.sort(spans[kept])[int(kept.sum()) // 2])  # (np.median imports numpy.ma: 10 ms)
    if median <= 0:
        return {}
    long = spans > LONG_X * median
    share = {}
    for side, rows in (("unattributed", ~kept), ("attributed", kept)):
        total = float(spans[rows].sum())
        share[f"{side}_long_share"] = float(spans[rows & long].sum()) / total if total > 0 else 0.0
    return {"longest_unattributed_x": float(spans[~kept].max()) / median, "long_x": LONG_X, **share}


def _chunks(samples: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """At most ``limit`` rows: consecutive groups of ``k`` samples averaged (a tail shorter than ``k`` left out)."""
    k = max(1, math.ceil(len(samples) / limit))
    if k == 1:
        return samples, 1
    groups = len(samples) // k
    return samples[: groups * k].reshape(groups, k, samples.shape[1]).mean(axis=1), k


def iteration_seconds(r: Attribution, layer: str) -> str | None:
    """Each iteration's seconds in the phases of ``layer`` (``environment``: an env worker's own env time per
    command), NaN for an iteration left unattributed, as base64 of float64s (compact in a process's result file);
    ``None`` without iterations or such phases."""
    if not r.iterations:
        return None
    import base64

    import numpy as np

    keys, cumulative = snapshot_matrix(r.iterations, r.excl)
    columns = [i for i, k in enumerate(keys) if k and _layer(r, k) == layer]
    if not columns:
        return None
    per = np.clip(np.diff(cumulative[:, columns].sum(axis=1)), 0.0, None)
    if r.sampled:
        attributed = np.ones(len(per), dtype=bool)
        attributed[: min(len(per), len(r.sampled))] = np.asarray(r.sampled[: len(per)], dtype=bool)
        per[~attributed] = np.nan
    return base64.b64encode(per.astype("<f8").tobytes()).decode("ascii")


def decode_series(text: str) -> np.ndarray:
    """The inverse of :func:`iteration_seconds`."""
    import base64

    import numpy as np

    return np.frombuffer(base64.b64decode(text), dtype="<f8")


def overhead_s(r: Attribution, costs: dict[str, float]) -> float:
    """Seconds the hooks added to a run: its events of each kind times their measured costs."""
    full = r.transitions / 2
    return (
        full * costs["event_us"]
        + r.merges * costs["merge_us"]
        + r.passthrough * costs["passthrough_us"]
        + r.mem_marks * costs["mark_us"]
    ) * 1e-6


def attribution_metrics(
    r: Attribution,
    *,
    startup_s: float | None = None,
    costs: dict[str, float] | None = None,
    limits: dict[str, Any] | None = None,
) -> list[Metric]:
    """The run's metrics: SPS, wall-time parts, phases (with layer and events), per-iteration times, counts, memory.

    Args:
        r: What the attributor measured.
        startup_s: Seconds from the process start to the first iteration (imports, setup), if known.
        costs: The hooks' per-event costs measured in this run (:func:`rlbench.profiling.session.measure_costs`).
        limits: This machine's limits for the counted iteration's products
            (:func:`rlbench.instrument.roofline.machine_limits`), if measured.
    """
    import numpy as np

    marks = r.iterations or [IterationMark(r.started, 0, {})]
    n = len(marks)
    # span j runs from mark j to mark j + 1 (the last one to the run's end); a long off-policy run has tens of
    # thousands, so the spans are arrays: their start times, agent steps and, per phase, cumulative seconds
    t = np.fromiter((mark.t for mark in marks), float, n)
    t = np.append(t, r.ended)
    at_steps = np.fromiter((mark.steps for mark in marks), float, n)
    at_steps = np.append(at_steps, r.steps)
    span_s, span_steps = np.diff(t), np.diff(at_steps)
    warm = n > 1  # span 0 is the warm-up
    steady = np.arange(1 if warm else 0, n)
    excluded_s = 0.0
    c = r.counted_iteration
    if c is not None and len(steady) > 1 and steady[0] <= c < n:
        excluded_s = float(span_s[c])
        steady = steady[steady != c]
    # sampling (Attributor.sample_every): the steady iterations attributed; the others booked nothing. Iterations
    # before SAMPLE_FROM are all attributed and stand for themselves; from it on, the attributed ones' seconds are
    # scaled to all of those iterations' wall time (a ratio estimate within that stratum: a loop whose mix changes
    # over the run, epsilon-greedy acting that grows, is not estimated from its first iterations' mix)
    attributed = np.ones(n, dtype=bool)
    if r.sampled:
        attributed[: min(n, len(r.sampled))] = np.asarray(r.sampled[:n], dtype=bool)
    kept = attributed[steady]
    # the unfinished tail (the last iteration and whatever ran after it) is not a sample
    complete_rows = np.flatnonzero((steady != n - 1) & kept)
    # every iteration's seconds per phase, as one matrix: the rows are the iterations kept, the columns the phases;
    # only growth counts (a phase absent from a snapshot had 0 s). Phases are never removed from the attributor's
    # running totals, so the last snapshot (the run's end) holds every key (an Attribution built otherwise adds its
    # other keys after them).
    keys, cumulative = snapshot_matrix(marks, r.excl)
    deltas = np.clip(cumulative[steady + 1] - cumulative[steady], 0.0, None) if len(steady) else np.zeros((0, len(keys)))
    steady_s = float(span_s[steady].sum())
    attributed_s = float(span_s[steady][kept].sum())
    weights = np.ones(len(steady))
    late = steady >= SAMPLE_FROM
    if not kept.all():
        late_attributed_s = float(span_s[steady][late & kept].sum())
        if late_attributed_s > 0:
            weights[late] = float(span_s[steady][late].sum()) / late_attributed_s
    measured = deltas[kept].sum(axis=0)  # (an unattributed row's deltas are 0: nothing was booked)
    totals = (deltas[kept] * weights[kept][:, None]).sum(axis=0)
    steady_excl = {k: float(v) for k, v in zip(keys, totals) if v > 0}
    paths = ordered_paths(r.layers)
    measured_incl = inclusive({k: float(v) for k, v in zip(keys, measured) if v > 0}, paths)
    steady_steps = int(span_steps[steady].sum())
    warm_s = float(span_s[0]) if warm else 0.0
    warm_steps = int(span_steps[0]) if warm else 0
    train_s = warm_s + steady_s
    steps = warm_steps + steady_steps
    incl = inclusive(steady_excl, paths)
    m = [
        Metric(
            SPS,
            "steps/s",
            "higher",
            [steps / train_s if train_s > 0 and steps else math.nan],
            meta={"steps": steps, "synchronized": r.synchronized},
        ),
        Metric(SPS_STEADY, "steps/s", "higher", [steady_steps / steady_s if steady_s > 0 and steady_steps else math.nan]),
        Metric(WALL_S, "s", "lower", [(startup_s or 0.0) + (r.ended - r.started)], meta={"run_s": r.ended - r.started}),
        Metric(WARMUP_S, "s", "lower", [warm_s]),
        Metric(TRAIN_S, "s", "lower", [train_s]),
        Metric(
            ENV_STEPS,
            "steps",
            "none",
            [float(steps)],
            meta={"all_steps": r.steps, "envs": r.env_ids, "steady_steps": steady_steps, "warmup_steps": warm_steps},
        ),
        Metric(ITERATIONS, "count", "none", [float(1 + len(steady) if warm else len(steady))], meta={"detected": n}),
        Metric(PROFILE_EXCLUDED_S, "s", "none", [excluded_s], meta={"counted_iteration": r.counted_iteration}),
    ]
    if not kept.all():  # sampled: how many steady iterations were attributed, and what the rest took
        meta = {
            "steady": len(steady),
            "every": r.sample_every,
            "from": SAMPLE_FROM,
            "attributed_s": attributed_s,
            "steady_s": steady_s,
            # rare long iterations (an evaluation every N steps) are shared out in the attributed ones' proportions
            # if none of them was attributed: how much of each side's time, from SAMPLE_FROM on, was in iterations
            # over LONG_X times the attributed median (a GC pause or a log line makes a few on both sides)
            **_long_iterations(span_s[steady][late], kept[late]),
        }
        m.append(Metric(PROFILE_ATTRIBUTED, "count", "none", [float(kept.sum())], meta=meta))
    if startup_s is not None:
        m.append(Metric(STARTUP_S, "s", "lower", [startup_s]))
    on_cpu, queued = r.sched
    if math.isfinite(on_cpu):  # the thread's wall is on a CPU, waiting for one, or blocked
        m.append(Metric(PROFILE_CPU_S, "s", "none", [on_cpu], meta={"queued_s": queued, "run_s": r.ended - r.started}))
    if r.other_threads or r.foreign_phases:  # phases follow one thread: say what the others did meanwhile
        meta = {
            "threads": r.other_threads,
            "foreign_phases": r.foreign_phases,
            "run_s": r.ended - r.started,
            "followed": r.threads_followed,
        }
        m.append(Metric(PROFILE_THREADS_S, "s", "none", [r.other_threads_cpu_s], meta=meta))
    if warm:
        # what the first iteration held: agent steps, and seconds in update phases (a replay prefill has ~none)
        warm_excl = _delta(marks[0].excl, marks[1].excl)
        update_s = sum(v for q, v in warm_excl.items() if _layer(r, q) == "update")
        meta = {"events": 1, "layer": "other", "steps": warm_steps, "update_s": update_s}
        m.append(Metric(time_metric(WARMUP), "s", "lower", [warm_s], meta=meta))
    whole = inclusive(r.excl, paths)  # over all of training: warm-up and the counted iteration included
    for p in paths:
        # run_s: over the whole run (warm-up and the counted iteration included); sampled, its steady part scaled
        run_s = whole[p] + incl[p] - measured_incl.get(p, 0.0)
        meta = {"events": r.enters.get(p, 0), "layer": _layer(r, p), "run_s": run_s}
        # calls are counted over the whole run only; where the phase ran in the steady state alone they are its
        # steady-state calls exactly (per-call figures then divide steady seconds by steady calls); sampled, the
        # calls of the attributed iterations, scaled as their seconds are
        if whole[p] - measured_incl.get(p, 0.0) <= 1e-9 * max(whole[p], 1.0):
            seen = measured_incl.get(p, 0.0)
            scale = incl[p] / seen if seen > 0 and kept.any() and not kept.all() else 1.0
            meta["steady_events"] = round(r.enters.get(p, 0) * scale)
        m.append(Metric(time_metric(p), "s", "lower", [incl[p]], meta=meta))
    samples, per_sample = _chunks(deltas[complete_rows], MAX_ITER_SAMPLES)
    if len(samples) and warm:
        under = np.array([[q == p or q.startswith(p + "/") for p in paths] for q in keys], dtype=float)
        series_by_path = (samples @ under.reshape(len(keys), len(paths))).T
        for p, series in zip(paths, series_by_path):
            meta = {"layer": _layer(r, p), "per_sample": per_sample}
            m.append(Metric(iter_time_metric(p), "s", "lower", [float(x) for x in series], meta=meta))
    for kind, per_phase in r.counts.items():
        for p, n in per_phase.items():
            m.append(Metric(f"{kind}/{p or 'other'}", "count", "lower", [float(n)]))
        m.append(Metric(f"{kind}/iteration", "count", "lower", [float(sum(per_phase.values()))]))
    if limits:
        ctx = {"device": limits.get("device"), "threads": limits.get("threads"), "shapes": limits.get("shapes")}
        m += [
            Metric(f"{LIMITS}dispatch_us", "us", "none", [limits["dispatch_us"]], meta=ctx),
            Metric(f"{LIMITS}memory_gbps", "GB/s", "none", [limits["memory_gbps"]], meta=ctx),
            Metric(f"{LIMITS}peak_gflops", "GFLOP/s", "none", [limits["peak_gflops"]], meta=ctx),
        ]
        for p, secs in limits["achievable_s"].items():
            m.append(Metric(f"{LIMITS}achievable_s/{p or 'other'}", "s", "none", [secs], meta=ctx))
    for prefix, values in ((MEM, r.mem_bytes), (CUDA_MEM, r.cuda_peak_bytes)):
        for p, v in values.items():
            m.append(Metric(f"{prefix}{p or 'other'}", "bytes", "lower", [float(v)]))
    if costs:
        events = sum(r.enters.values())
        overhead = overhead_s(r, costs)
        share = overhead / (r.ended - r.started) if r.ended > r.started else math.nan
        m += [
            Metric(PROFILE_EVENT_US, "us", "lower", [costs["event_us"]]),
            Metric(PROFILE_PASSTHROUGH_US, "us", "lower", [costs["passthrough_us"]]),
            Metric(
                PROFILE_EVENTS,
                "count",
                "none",
                [float(events)],
                meta={
                    "passthrough": r.passthrough,
                    "merges": r.merges,
                    "memory_marks": r.mem_marks,
                    "hooks": r.hooks,
                    **costs,
                },
            ),
            Metric(PROFILE_OVERHEAD_S, "s", "lower", [overhead], meta={"share": share}),
            # the report's overhead finding reads this name: the hooks' estimated cost within the steady state
            Metric(
                TIMER_OVERHEAD_S, "s", "lower", [overhead * steady_s / (r.ended - r.started) if r.ended > r.started else 0.0]
            ),
        ]
    return m


def _layer(r: Attribution, path: str) -> str:
    layer = r.layers.get(path) or ""
    return layer or guess_layer(path)


def metric_to_dict(m: Metric) -> dict[str, Any]:
    """A metric as JSON-friendly data (NaN as ``None``)."""
    return {
        "name": m.name,
        "unit": m.unit,
        "direction": m.direction,
        "samples": [None if not math.isfinite(v) else v for v in m.samples],
        "x": m.x,
        "meta": m.meta,
        "params": m.params,
    }


def metric_from_dict(d: dict[str, Any]) -> Metric:
    """Inverse of :func:`metric_to_dict`."""
    return Metric(
        d["name"],
        d["unit"],
        d["direction"],
        [math.nan if v is None else float(v) for v in d["samples"]],
        x=d.get("x"),
        meta=d.get("meta") or {},
        params=d.get("params") or {},
    )

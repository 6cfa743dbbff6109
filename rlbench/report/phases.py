"""Phases of any training run, read from its records alone: the phase tree, leaf phases, layers, shares.

Nothing here knows which code produced the records. Phases are the run's ``time/<phase>`` metrics; a phase with
no recorded child is a *leaf*, and leaves partition the timed part of the steady state (the rest is
"Python/other"). In a profile, a phase the hooks entered that holds a nested one (``replay/sample`` around the
batch's copy to the GPU, ``replay/sample/transfer``) also counts its *own* time, outside its children, in its layer.
Each phase's layer comes from its record (``meta["layer"]``), or, for records written before phases carried one,
from :func:`rlbench.results.metrics.guess_layer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlbench.analysis.stats import median, summarize
from rlbench.report.charts import Bar, Chart
from rlbench.report.data import RunData
from rlbench.report.format import fmt, md_code, md_table, pct
from rlbench.results.metrics import (
    ENV_STEPS,
    ITER_TIME,
    ITERATIONS,
    LAYERS,
    SPS_STEADY,
    TIME,
    TRAIN_S,
    WARMUP,
    WARMUP_S,
    guess_layer,
)

OTHER = "Python/other"


def steady_phases(d: RunData) -> list[str]:
    """Recorded phases after warm-up, in recorded order (parents before children)."""
    return [p for p in d.phases() if p != WARMUP]


def leaf_phases(d: RunData) -> tuple[str, ...]:
    """Phases with no recorded child phase: together they partition the timed steady state."""
    phases = steady_phases(d)
    return tuple(p for p in phases if not any(q.startswith(p + "/") for q in phases))


def layer_of(d: RunData, phase: str) -> str:
    """The phase's layer id: as recorded, else guessed from its name."""
    layer = d.meta(TIME + phase, "layer") or d.meta(ITER_TIME + phase, "layer")
    return layer if layer in LAYERS else guess_layer(phase)


def children(d: RunData, parent: str) -> list[str]:
    """Recorded direct children of ``parent``."""
    return [p for p in steady_phases(d) if p.startswith(parent + "/") and "/" not in p[len(parent) + 1 :]]


def own_time_phases(d: RunData) -> tuple[str, ...]:
    """Profiled phases with children whose own time (outside the children) counts in their layer.

    The profiler's phases are entered by events (``meta["events"]``): one that holds a nested phase, a replay label
    around the batch's device copy, spends the rest of its time doing its own named work, not Python/other. The
    grouping parents (``env``, ``replay``, ``train``: no events) and rlbench's own loops (whose parents' rest is loop
    overhead, by the suites' definition) keep the leaves-only rule.
    """
    if d.first.meta.get("kind") != "profile":
        return ()
    leaves = leaf_phases(d)
    return tuple(
        p for p in steady_phases(d) if p not in leaves and d.has(TIME + p) and (d.meta(TIME + p, "events", 0) or 0) > 0
    )


@dataclass
class Breakdown:
    """Median steady-state seconds per leaf phase (and the own time of :func:`own_time_phases`), plus the rest
    ('Python/other')."""

    steady_s: float
    leaf_s: dict[str, float]
    other_s: float
    iterations: int

    def share(self, seconds: float) -> float:
        """Fraction of steady-state time."""
        return seconds / self.steady_s if self.steady_s > 0 else math.nan


def breakdown(d: RunData, leaves: tuple[str, ...] | None = None) -> Breakdown:
    """Steady-state time (training minus warm-up) split into leaf phases and the rest."""
    leaves = leaf_phases(d) if leaves is None else leaves
    steady = median([t - w for t, w in zip(d.per_repeat(TRAIN_S), d.per_repeat(WARMUP_S))])
    leaf = {p: d.med(TIME + p) for p in leaves if d.has(TIME + p)}
    for p in own_time_phases(d):
        own = d.med(TIME + p) - sum(d.med(TIME + c) for c in children(d, p) if d.has(TIME + c))
        if own > 0:
            leaf[p] = own
    n = d.med(ITERATIONS) if d.has(ITERATIONS) else math.nan
    iters = int(n) - 1 if math.isfinite(n) else 0
    return Breakdown(steady, leaf, max(steady - sum(leaf.values()), 0.0), max(iters, 1))


def steady_steps(d: RunData, b: Breakdown) -> float:
    """Agent steps of the steady state (the warm-up's left out), the steps its per-step figures divide by.

    Recorded by profiled runs (``env_steps`` ``meta["steady_steps"]``); else the steady steps/s times the steady
    seconds; else, for records with neither, the run's steps spread evenly over its iterations.
    """
    recorded = d.meta(ENV_STEPS, "steady_steps")
    if recorded is not None:
        return float(median([float(r.meta.get("steady_steps", math.nan)) for r in d.by_metric[ENV_STEPS]]))
    if d.has(SPS_STEADY) and math.isfinite(d.med(SPS_STEADY)) and b.steady_s > 0:
        return d.med(SPS_STEADY) * b.steady_s
    total = d.med(ENV_STEPS) if d.has(ENV_STEPS) else math.nan
    return total * b.iterations / (b.iterations + 1) if total and math.isfinite(total) else math.nan


def per_event_us(d: RunData, phase: str) -> float:
    """Steady-state seconds of a phase per steady-state call, in µs (NaN when that cannot be told).

    A profiled run counts calls over the whole run, not per iteration. Where the phase ran in the steady state
    alone, those are its steady calls (``meta["steady_events"]``). Where it also ran in the warm-up, an environment
    phase's calls are taken as proportional to agent steps (a fixed batch per call); any other phase gets no
    per-call figure, since its warm-up calls (none, one, or thousands) cannot be told apart. Records written before
    the steady calls were recorded divide whole-run seconds (``meta["run_s"]``) by whole-run calls.
    """
    ev = d.meta(TIME + phase, "events", 0) or 0
    if not ev:
        return math.nan
    run_s = d.meta(TIME + phase, "run_s")
    if run_s is None:  # rlbench's own loops: events and seconds are both the steady state's
        return d.med(TIME + phase) / ev * 1e6
    steady_ev = d.meta(TIME + phase, "steady_events")
    if steady_ev is not None:
        return d.med(TIME + phase) / steady_ev * 1e6 if steady_ev else math.nan
    all_steps = d.meta(ENV_STEPS, "all_steps")
    steady = d.meta(ENV_STEPS, "steady_steps")
    if steady is None:  # older records: whole-run seconds over whole-run calls
        return run_s / ev * 1e6
    if layer_of(d, phase) == "environment" and all_steps and steady:
        return d.med(TIME + phase) / (ev * steady / all_steps) * 1e6
    return math.nan


def layer_seconds(d: RunData, b: Breakdown) -> dict[str, float]:
    """Steady-state seconds per layer (leaf phases summed), in :data:`~rlbench.results.metrics.LAYERS` order."""
    out = dict.fromkeys(LAYERS, 0.0)
    for phase, s in b.leaf_s.items():
        out[layer_of(d, phase)] += s
    return {k: v for k, v in out.items() if v > 0 or any(layer_of(d, p) == k for p in b.leaf_s)}


def phase_table(d: RunData, b: Breakdown) -> list[str]:
    """Section: every steady-state phase with its time, share, per-iteration median and IQR, events and layer."""
    rows = []
    leaves = leaf_phases(d)
    for phase in steady_phases(d):
        s = d.med(TIME + phase)
        if phase in leaves:
            layer = LAYERS[layer_of(d, phase)]
        elif phase in b.leaf_s:
            layer = f"{LAYERS[layer_of(d, phase)]} (own {fmt(b.leaf_s[phase], 3)} s)"
        else:
            layer = "–"
        iq = summarize(d.pooled(ITER_TIME + phase)) if d.has(ITER_TIME + phase) else None
        per_iter = iq.median * 1e6 if iq and iq.n else s / b.iterations * 1e6
        iqr = f"{fmt(iq.q1 * 1e6, 0)}–{fmt(iq.q3 * 1e6, 0)}" if iq and iq.n else "–"
        label = ("&nbsp;&nbsp;&nbsp;&nbsp;" * phase.count("/")) + f"{md_code(phase)}"
        events = int(d.meta(TIME + phase, "events", 0) or 0)
        rows.append([label, layer, fmt(s, 3), pct(b.share(s)), fmt(per_iter, 0), iqr, f"{events:,}"])
    rows.append(
        [
            f"{OTHER} (outside leaf phases)",
            "–",
            fmt(b.other_s, 3),
            pct(b.share(b.other_s)),
            fmt(b.other_s / b.iterations * 1e6, 0),
            "–",
            "–",
        ]
    )
    rows.append(
        ["**Steady-state total**", "", f"**{fmt(b.steady_s, 3)}**", "100%", fmt(b.steady_s / b.iterations * 1e6, 0), "–", "–"]
    )
    return [
        "## Phase breakdown (steady state)",
        "",
        f"Steady state = training minus the warm-up iteration: {b.iterations} iterations. Shares are of steady-state time; "
        "a parent phase includes its children, and leaf phases carry the layer they are counted in below (a phase the "
        "profiler entered around a nested one counts its own time there too). Per-iteration "
        "figures are medians over iterations (IQR beside them).",
        "",
        md_table(["Phase", "Layer", "Time (s)", "Share", "µs / iteration", "IQR µs / iteration", "Events"], rows),
    ]


def layer_table(d: RunData, b: Breakdown) -> list[str]:
    """Section: steady-state time grouped by layer (environment, inference, ..., Python/other)."""
    steps = steady_steps(d, b)
    rows = []
    for layer, s in [*((LAYERS[k], v) for k, v in layer_seconds(d, b).items()), (OTHER, b.other_s)]:
        rows.append(
            [
                layer,
                fmt(s, 3),
                pct(b.share(s)),
                fmt(s / b.iterations * 1e3, 2),
                fmt(s / steps * 1e6, 2) if steps and math.isfinite(steps) else "–",
            ]
        )
    lines = ["## Time by layer", ""]
    if steps and math.isfinite(steps) and b.steady_s > 0:
        lines += [
            f"Per agent step over the steady state's {fmt(steps, 0)} agent steps (the warm-up's left out): the rows add "
            f"up to {fmt(b.steady_s / steps * 1e6, 2)} µs, {fmt(steps / b.steady_s, 0)} steady-state steps/s.",
            "",
        ]
    return [*lines, md_table(["Layer", "Time (s)", "Share", "ms / iteration", "µs / agent step"], rows)]


def phase_chart(d: RunData, b: Breakdown) -> Chart:
    """Bars of leaf phases and the rest, as percent of steady-state time (none when the run has no steady state)."""
    leaves = leaf_phases(d)
    bars = [Bar(p if p in leaves else f"{p} (own)", 100 * b.share(s)) for p, s in b.leaf_s.items()]
    bars.append(Bar(OTHER, 100 * b.share(b.other_s)))
    if not all(math.isfinite(bar.value) for bar in bars):
        bars = []
    return Chart("-phases.png", f"{d.first.benchmark}: share of steady-state time", bars, "% of steady-state time")

"""The record vocabulary: metric names, phase layers, the typed training result and the metrics it becomes.

Every producer of records (rlbench's own loops, a user's script, another library under rlbench's runner) and
every reader (reports, compare, gate, ``rlbench.load``) names metrics through this module, so a report never
guesses what an algorithm called things.

**Phases carry their layer.** A ``time/<phase>`` record stores its layer in ``meta["layer"]``, one of
:data:`LAYERS`, so a report groups *any* phase names (a user's ``gae`` or ``replay/sample`` included) without
knowing the code that produced them. Loops declare the layer of each phase they time (:data:`PhaseLayers`);
:func:`guess_layer` names one for phases nobody declared, from conventional names.

This module sits just above the components: the algorithms build a :class:`TrainingResult` and the suites turn
it into :class:`Metric` objects with :func:`training_metrics`. It imports nothing heavier than the timers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from rlbench.core.variants import BASELINE  # noqa: F401 - re-exported: records label the setting as given with it
from rlbench.instrument.callbacks import IterationInfo
from rlbench.instrument.machine_load import MachineLoad
from rlbench.instrument.timers import estimate_overhead_s

# --- metric names -------------------------------------------------------------------------------------------------
SPS = "sps"  #: training agent steps per second, warm-up included
SPS_STEADY = "sps/steady"  #: agent steps per second after warm-up
WALL_S = "wall_s"  #: init + training + evaluation
STARTUP_S = "startup_s"  #: process start to the first repeat (imports, parsing)
INIT_S = "init_s"
WARMUP_S = "warmup_s"
TRAIN_S = "train_s"
EVAL_S = "eval_s"
ENV_STEPS = "env_steps"  #: agent steps (env transitions summed over envs) actually taken
ITERATIONS = "iterations"
EVAL_RETURN = "eval_return"  #: one sample per deterministic evaluation episode
UPDATES = "updates"  #: gradient updates made (off-policy)
FIRST_UPDATE_S = "first_update_s"
THRESHOLD_REACHED = "threshold_reached"
STEPS_TO_THRESHOLD = "steps_to_threshold"
TIME_TO_THRESHOLD_S = "time_to_threshold_s"
TIMER_BOUNDARY_US = "timer/boundary_us"
TIMER_CONTEXT_US = "timer/context_us"
TIMER_EVENTS = "timer/events"
TIMER_OVERHEAD_S = "timer/overhead_s"
TRAIN_EPISODE_RETURN = "train/episode_return"
TRAIN_RECENT_RETURN = "train/recent_return"
TRAIN_ELAPSED_S = "train/elapsed_s"
PROFILE_SELF_S = "profile/self_s"
PROFILE_OVERHEAD_S = "profile/overhead_s"  #: what ``rlbench profile``'s hooks cost the run (measured costs x events)
PROFILE_EVENT_US = "profile/event_us"  #: cost of one automatic phase (open and close), measured in the run
PROFILE_PASSTHROUGH_US = "profile/passthrough_us"  #: cost of one nested hooked call that passes straight through
PROFILE_EVENTS = "profile/events"  #: phases opened (meta: ``passthrough``, the nested calls)
PROFILE_EXCLUDED_S = "profile/excluded_s"  #: steady time left out: the iteration that ran under the op counter
PROFILE_THREADS_S = "profile/other_threads_cpu_s"  #: CPU seconds other Python threads used (meta: threads, phases)
#: steady iterations attributed when the profile sampled them (meta: steady, every, attributed_s, steady_s, ...)
PROFILE_ATTRIBUTED = "profile/attributed_iterations"
PROFILE_COMMAND_S = "profile/command_s"  #: ``rlbench profile``'s own wall outside the children (meta: whole, children)
PROFILE_CHILD_WALL_S = "profile/child_wall_s"  #: ``--against-plain``: a profiled repeat's process, start to exit
PROFILE_PLAIN_WALL_S = "profile/plain_wall_s"  #: ``--against-plain``: the same command unprofiled, start to exit
PROFILE_LOGGING_S = "profile/logging_s"  #: ``--log-to``: CPU seconds rlbench's logging thread used (meta: what it logged)
#: a profiled thread's seconds on a CPU from its first iteration on (meta: ``queued_s``, waiting for a CPU; ``run_s``)
PROFILE_CPU_S = "profile/cpu_s"
#: the processes a profile followed (meta: ``unreported``, ``not_followed``, ``main_waits``: the main thread's channels)
PROFILE_PROCESSES = "profile/processes"
#: a vector env's step split: its workers' own env time (meta: ``straggler_s``, ``rest_s``, ``main_env_s``, ``workers``)
PROFILE_ENV_WORKERS = "profile/env_workers"
MEM = "mem/"  #: prefix: peak-RSS growth per top-level phase, bytes (``cuda_mem/``: CUDA peak allocated per phase)
CUDA_MEM = "cuda_mem/"
PEER_PHASE_WALL_S = "peers/phase_wall_s"  #: training wall that a peer's ``time/<phase>`` records are shares of
PEER_ERROR = "peers/error"  #: a peer implementation raised (meta: ``error``); the others' records stand
TIME_CALL = "time/call"  #: seconds per call of a micro-benchmark (pytest-benchmark rounds)
LEGACY_TIME_CALL = "time"  #: what ``rlbench import`` named ``time/call`` before the vocabulary was unified
MICRO_CASE_KEYS = ("group", "impl", "size", "op", "device")
"""``extra_info`` keys of a pytest-benchmark test that identify its case (become record parameters)."""
TIME = "time/"  #: prefix: seconds per phase over the run (``meta``: ``events``, ``layer``)
ITER_TIME = "iter_time/"  #: prefix: seconds per phase, one sample per steady iteration
DIAG = "diag/"  #: prefix: update diagnostics per iteration (losses, KL, ...)
COUNTERS = ("ops", "syncs", "copies", "flops")  #: prefixes of noise-free counts per phase (``ops/iteration`` ...)
LIMITS = "limits/"  #: prefix: this machine's limits for a profiled run's products (``limits/achievable_s/<phase>`` ...)

MACHINE = "machine/"  #: prefix: what else the machine was doing during a repeat (context, never compared as a case)
MACHINE_OTHER_CPU = "machine/other_cpu"  #: share of CPU capacity other processes used during the repeat
MACHINE_STEAL = "machine/steal"
MACHINE_LOADAVG = "machine/loadavg"
MACHINE_CPU_MHZ = "machine/cpu_mhz"
MACHINE_THROTTLE = "machine/throttle_events"

PROFILE_CALL_S = "profile/call_s"  #: an ``@rlbench.benchmark`` function's whole call: the user's code, timed
#: prefixes of rlbench's own bookkeeping: what its timers and profiler cost and counted, the machine's load
INTERNAL_PREFIXES = ("profile/", "timer/", MACHINE)
#: rlbench's own counts of a run (the budget a loop was given, not something the code under test made faster)
INTERNAL_METRICS = frozenset({ENV_STEPS, ITERATIONS})


def is_internal(metric: str) -> bool:
    """Whether ``metric`` is rlbench's own bookkeeping rather than a measurement of the code under test.

    ``profile/*`` (what the profiler cost and counted; :data:`PROFILE_CALL_S`, the user's call timed whole, excepted),
    ``timer/*`` (the timers' own cost), ``machine/*`` (the machine's load) and :data:`INTERNAL_METRICS` (agent steps and
    iterations: the run's budget). The history site, ``rlbench compare`` and ``rlbench ab --report`` hide them unless
    ``--all-metrics`` is given or the metric is named with ``--metric``; records and the run's own report keep them.
    """
    if metric == PROFILE_CALL_S:
        return False
    return metric in INTERNAL_METRICS or metric.startswith(INTERNAL_PREFIXES)


VARIANT = "variant"  #: parameter naming the what-if variant of a record
WARMUP = "warmup"  #: the phase holding the first iteration's one-time costs

# --- phase layers -------------------------------------------------------------------------------------------------
LAYERS: dict[str, str] = {
    "environment": "environment",
    "inference": "policy inference",
    "advantage": "advantage",
    "update": "training update",
    "replay": "replay buffer",
    "transfer": "host-device transfer",
    "wait": "waiting on another role",
    "other": "other named phases",
}
"""Layer ids, in report order, with the label a report prints."""

PhaseLayers = dict[str, str]
"""Phase name -> layer id, in timing order (parents before their children)."""

_GUESSES = (  # whole-word matches, checked in order on the phase's last path component, then on the whole name
    ("wait", {"wait", "waiting", "idle", "blocked"}),
    ("transfer", {"transfer", "copy", "h2d", "d2h", "sync", "device"}),
    ("replay", {"replay", "buffer", "rb", "sample", "store", "priority", "priorities"}),
    ("environment", {"env", "envs", "environment", "reset", "sim", "simulate"}),
    ("inference", {"policy", "inference", "infer", "act", "action", "actions"}),
    ("advantage", {"advantage", "advantages", "gae", "return", "returns", "td", "lambda"}),
    (
        "update",
        {
            "update",
            "train",
            "training",
            "learn",
            "loss",
            "forward",
            "backward",
            "optimizer",
            "optim",
            "grad",
            "grads",
            "gradient",
            "critic",
            "actor",
            "alpha",
            "polyak",
            "prepare",
            "target",
        },
    ),
)


def guess_layer(phase: str) -> str:
    """The layer a conventionally named phase belongs to (``"other"`` when no word matches).

    Used for phases whose code declared no layer. Names are split into words (``env_step`` -> ``env``, ``step``);
    the last path component decides first (``update/sample`` is replay work inside the update), then the whole name.
    """
    for text in (phase.rsplit("/", 1)[-1], phase):
        words = set(re.split(r"[^a-z0-9]+", text.lower()))
        for layer, vocabulary in _GUESSES:
            if words & vocabulary:
                return layer
    return "other"


def time_metric(phase: str) -> str:
    """``time/<phase>``."""
    return TIME + phase


def iter_time_metric(phase: str) -> str:
    """``iter_time/<phase>``."""
    return ITER_TIME + phase


# --- the typed training result ------------------------------------------------------------------------------------
@dataclass
class TrainingResult:
    """What an instrumented training run measured (raw numbers; :func:`training_metrics` makes metrics of it).

    Attributes:
        config: The run's configuration dataclass.
        device: The torch device the update ran on.
        env_steps: Agent steps actually taken.
        init_s: Building envs, networks, optimizers.
        warmup_s: The first iteration (one-time costs: allocation, compilation, random warm-up frames).
        train_s: Training wall time, warm-up included.
        eval_s: Deterministic evaluation after training.
        phase_s: Seconds per phase after warm-up (``warmup`` itself as one phase).
        phase_events: Timed events per phase.
        context_events: Events timed with ``with timer.phase(...)`` (the costlier kind).
        phase_layers: Layer of every phase the loop times, in timing order.
        iterations: One entry per logged iteration.
        eval_returns: One return per evaluation episode.
        episode_returns: Returns of finished training episodes.
        episode_end_steps: Agent step at which each of those ended.
        steady_steps: Agent steps taken after warm-up.
        steady_s: Seconds those steps took.
        synchronized: Whether phase boundaries synchronized the device.
        completed: False when a callback stopped training early.
    """

    config: Any
    device: str
    env_steps: int
    init_s: float
    warmup_s: float
    train_s: float
    eval_s: float
    phase_s: dict[str, float]
    phase_events: dict[str, int]
    context_events: int
    phase_layers: PhaseLayers
    iterations: list[IterationInfo]
    eval_returns: list[float]
    episode_returns: list[float]
    episode_end_steps: list[int]
    steady_steps: int
    steady_s: float
    synchronized: bool
    completed: bool = True

    @property
    def sps(self) -> float:
        """Training agent steps per second (warm-up included)."""
        return self.env_steps / self.train_s if self.train_s > 0 else 0.0


@dataclass
class Metric:
    """One measured quantity of one repeat (becomes one record).

    Attributes:
        name: Slash-namespaced metric name (see the constants of this module).
        unit: Unit of the samples.
        direction: ``higher``, ``lower`` or ``none``.
        samples: Raw measurements.
        x: Optional abscissa per sample.
        meta: Free-form context (labels, paths; ``layer`` and ``events`` for phases).
        params: Case parameters added to the benchmark's own (e.g. ``impl`` and ``size`` of a micro-benchmark).
    """

    name: str
    unit: str
    direction: str
    samples: list[float]
    x: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Value:
    """A value an ``@rlbench.benchmark`` function returns, with its unit and which way is better (``rlbench.Value``).

    ::

        @rlbench.benchmark
        def my_gae(T: int = 128, N: int = 8) -> dict[str, rlbench.Value]:
            ...
            return {"time_per_pass": rlbench.Value(seconds / passes, unit="s", direction="lower")}

    A value so declared is recorded with its unit and direction: the report shows it in its unit, and ``rlbench
    compare``, ``gate --fail time_per_pass:5%`` and ``ab`` can judge it. A bare number is recorded too, with no unit and
    no better direction: shown, never gated.

    Attributes:
        value: One number (a float, int, NumPy scalar or 0-d tensor) or a flat sequence of them (the samples).
        unit: Its unit, as text (``s``, ``ms``, ``bytes``, ``steps/s``); ``s`` is shown as s, ms or µs.
        direction: ``lower`` or ``higher`` is better, or ``none`` (informational: never gated).

    Raises:
        ValueError: On a unit that is not text or a direction other than ``lower``, ``higher`` or ``none``.
    """

    value: Any
    unit: str = ""
    direction: str = "none"

    def __post_init__(self) -> None:
        if not isinstance(self.unit, str):
            raise ValueError(f"rlbench.Value: unit must be text such as 's' or 'bytes', got {self.unit!r}")
        if self.direction not in ("higher", "lower", "none"):
            raise ValueError(f"rlbench.Value: direction must be 'higher', 'lower' or 'none', got {self.direction!r}")


def training_metrics(result: TrainingResult, overhead: dict[str, float]) -> list[Metric]:
    """The metrics every training benchmark records (one record each): SPS, wall-time parts, returns, phases, timers.

    Args:
        result: What the training run measured.
        overhead: Per-event timer costs from :func:`rlbench.instrument.timers.measure_overhead`.
    """
    events = sum(result.phase_events.values())
    iters = result.iterations
    steps_x = [float(it.env_steps) for it in iters]
    m = [
        Metric(SPS, "steps/s", "higher", [result.sps], meta={"steps": result.env_steps, "synchronized": result.synchronized}),
        Metric(SPS_STEADY, "steps/s", "higher", [result.steady_steps / result.steady_s if result.steady_s > 0 else math.nan]),
        Metric(WALL_S, "s", "lower", [result.init_s + result.train_s + result.eval_s]),
        Metric(INIT_S, "s", "lower", [result.init_s]),
        Metric(WARMUP_S, "s", "lower", [result.warmup_s]),
        Metric(TRAIN_S, "s", "lower", [result.train_s]),
        Metric(EVAL_S, "s", "lower", [result.eval_s]),
        Metric(ENV_STEPS, "steps", "none", [float(result.env_steps)]),
        Metric(ITERATIONS, "count", "none", [float(len(iters))]),
        Metric(EVAL_RETURN, "return", "higher", [float(v) for v in result.eval_returns]),
        Metric(TIMER_BOUNDARY_US, "us", "lower", [overhead["boundary_us"]]),
        Metric(TIMER_CONTEXT_US, "us", "lower", [overhead["context_us"]]),
        Metric(TIMER_EVENTS, "count", "none", [float(events)], meta={"context_events": result.context_events}),
        Metric(TIMER_OVERHEAD_S, "s", "lower", [estimate_overhead_s(events, result.context_events, overhead)]),
        Metric(
            TRAIN_EPISODE_RETURN,
            "return",
            "none",
            [float(v) for v in result.episode_returns],
            x=[float(s) for s in result.episode_end_steps],
        ),
        Metric(TRAIN_RECENT_RETURN, "return", "none", [it.recent_return for it in iters], x=steps_x),
        Metric(TRAIN_ELAPSED_S, "s", "none", [it.elapsed_s for it in iters], x=steps_x),
    ]
    layers = {WARMUP: "other", **result.phase_layers}
    for phase, layer in layers.items():
        if phase in result.phase_s:
            meta = {"events": result.phase_events.get(phase, 0), "layer": layer}
            m.append(Metric(time_metric(phase), "s", "lower", [result.phase_s[phase]], meta=meta))
    steady = iters[1:]
    for phase, layer in result.phase_layers.items():
        if phase in result.phase_s:
            samples = [it.phase_s.get(phase, 0.0) for it in steady]
            m.append(Metric(iter_time_metric(phase), "s", "lower", samples, meta={"layer": layer}))
    for key in sorted({k for it in iters for k in it.diagnostics}):
        samples = [it.diagnostics.get(key, math.nan) for it in iters]
        m.append(Metric(DIAG + key, "", "none", samples, x=steps_x))
    return m


def counter_metrics(counts: dict[str, dict[str, int]]) -> list[Metric]:
    """``{"ops": {phase: n}, ...}`` as ``ops/<phase>`` ... metrics (noise-free counts of one iteration)."""
    return [
        Metric(f"{kind}/{phase}", "count", "lower", [float(n)])
        for kind, per_phase in counts.items()
        for phase, n in per_phase.items()
    ]


def load_metrics(load: MachineLoad) -> list[Metric]:
    """One repeat's :class:`~rlbench.instrument.machine_load.MachineLoad` as ``machine/*`` metrics (readable ones)."""
    values = [
        (MACHINE_OTHER_CPU, "fraction", load.other_cpu),
        (MACHINE_STEAL, "fraction", load.steal),
        (MACHINE_LOADAVG, "load", load.loadavg),
        (MACHINE_CPU_MHZ, "MHz", load.cpu_mhz),
        (MACHINE_THROTTLE, "count", None if load.throttle is None else float(load.throttle)),
    ]
    return [Metric(name, unit, "none", [float(v)], meta={"wall_s": load.wall_s}) for name, unit, v in values if v is not None]


#: metric names rlbench records itself: a user's metric of that name would shadow rlbench's (``sps`` is a report's
#: headline and what ``gate --fail sps:5%`` checks), so it is refused
OWN_METRICS = frozenset(
    {
        SPS,
        SPS_STEADY,
        WALL_S,
        STARTUP_S,
        INIT_S,
        WARMUP_S,
        TRAIN_S,
        EVAL_S,
        ENV_STEPS,
        ITERATIONS,
        UPDATES,
        FIRST_UPDATE_S,
        THRESHOLD_REACHED,
        STEPS_TO_THRESHOLD,
        TIME_TO_THRESHOLD_S,
        TRAIN_EPISODE_RETURN,
        TRAIN_RECENT_RETURN,
        TRAIN_ELAPSED_S,
        LEGACY_TIME_CALL,
    }
)
#: prefixes of metric families rlbench records itself (phase times, its own costs, counters, machine context)
OWN_PREFIXES = (
    TIME,
    ITER_TIME,
    "timer/",
    "profile/",
    MEM,
    CUDA_MEM,
    LIMITS,
    MACHINE,
    "peers/",
    *(f"{kind}/" for kind in COUNTERS),
)

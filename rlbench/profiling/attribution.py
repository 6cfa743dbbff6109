"""Automatic phase attribution: every moment of a training script booked to exactly one phase.

An :class:`Attributor` keeps a stack of open phases and books the clock, at each transition, to the phase on top
(the empty path ``""`` when none is open: "Python/other"). Seconds are *exclusive*; a parent's inclusive time is
the sum over its sub-tree, derived when the run ends (:meth:`Attributor.inclusive`). Three kinds of phases open:

* **automatic** phases, opened by the hooks of :mod:`rlbench.profiling.autohooks` around env steps, module calls,
  backward passes, optimizer steps and host-device transfers. Nested automatic calls count once, in the outermost
  (a wrapper's ``step`` calling the env's ``step``, a module calling its sub-modules): while one is open
  (``depth > 0``) the hooks pass through at the cost of one attribute test.
* the **training forward** is *sticky*: a module called with grad enabled opens ``train/forward`` and it stays
  open through the loss computation until a phase of another kind starts (``zero_grad``, ``backward``, the next
  env step or inference, an explicit phase), as a person timing "forward + loss" by hand would put it. Transfers
  and further grad-enabled calls inside it count as forward.
* **explicit** phases (``rlbench.phase("gae")``, and the labels rlbench puts on libraries' methods) always open,
  inside automatic ones too, and take precedence: automatic phases inside them open again as their children
  (``update/train/backward``).

Agent steps are counted at the outermost env call (a vector env's batch size, 1 for a single env). Iterations are
found without help: an env step or reset after an update (backward or optimizer step) starts a new one; each
boundary snapshots the exclusive seconds, so per-iteration figures come out.
"""

from __future__ import annotations

import math
import resource
import threading
from array import array
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import wraps
from threading import get_ident as _get_ident
from time import perf_counter as _clock
from typing import Any

# frame kinds: ACTING is the sticky policy call of acting (see Attributor.enter_acting)
AUTO, STICKY, EXPLICIT, ACTING = 0, 1, 2, 3
# roles of automatic events: an env event after an update starts an iteration; an update event marks one; both and
# inference close a sticky forward, while a transfer inside one nests in it; a wait (rlbench.profiling.waits) is a
# blocking call that closes acting without splitting it (an actor's put after its policy call)
ENV, UPDATE, INFER, NEST, WAIT = 0, 1, 2, 3, 4

FORWARD = "train/forward"
ACT = "inference"  # acting: the policy's call on the env's batch, with or without grad, up to the env step
TARGET = "train/target"  # module calls and tensor work under no_grad inside the update (TD targets, alpha's log-pi)
TARGET_UPDATE = "train/target_update"  # copies or lerps of one module's parameters into another's
ADVANTAGE = "advantage"  # after the rollout's last acting call, what runs before the update (the GAE loop)
OWN_THREAD_PREFIX = "rlbench-"  # rlbench's own threads are named so, and are not the script's "other threads"
MERGE_GAP_S = 20e-6
"""An automatic phase called again within this many seconds of its last return continues it: the glue between calls
(a tensor reshaped between two transfers, a module's output unpacked) counts with them, as a hand timer around the
block counts it. Inference calls inside one grad-mode block continue each other at any distance (see
:mod:`rlbench.profiling.autohooks`)."""
MEMORY_FIRST, MEMORY_EVERY = 2, 32  # peak-RSS marks (a syscall each) in the first 2 iterations, then in every 32nd,
MEMORY_SPARSE = 1024  # and from the 1,024th on in every 1,024th (an off-policy loop starts one per env step: its
# marked iterations run in Python, ~0.3% of a DQN step when one in 32 was; growth between them is booked at the next)
MEMORY_MARKS = 8  # around the first 8 occurrences of each top-level phase there (allocations happen the first times)
SAMPLE_FROM = 512
"""With sampling on (``Attributor(sample_every=k)``, k > 1), iterations from this index on are attributed one in k
(:func:`iteration_sampled`); the others only have their start, agent steps and wall time recorded. An off-policy loop
starts one per env step, and attributing each costs about 3% of its step; sampled, the hooks pass the rest through."""
SAMPLE_EVERY = 8  # rlbench profile's default (Settings.sample_every): one iteration in 8 from SAMPLE_FROM on
_MASK64 = (1 << 64) - 1


def iteration_sampled(index: int, every: int) -> bool:
    """Whether iteration ``index`` (0-based) is attributed when one in ``every`` is from :data:`SAMPLE_FROM` on.

    A hash of the index (splitmix64), not a random draw: no state, the same answer in ``_fastevent.c``'s
    ``sampled_index`` and here, and no period a training loop's own schedule (a target update every 500 steps, a log
    line every 1,000) could fall in step with.
    """
    if every <= 1 or index < SAMPLE_FROM:
        return True
    x = (index + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) % every == 0


def memory_marked(index: int) -> bool:
    """Whether iteration ``index`` (0-based) takes memory marks (``_fastevent.c``'s ``iteration_due`` says the same)."""
    return index < MEMORY_FIRST or index % (MEMORY_EVERY if index < MEMORY_SPARSE else MEMORY_SPARSE) == 0


_RSS_UNIT = 1024  # ru_maxrss is in KiB on Linux
MEMORY_ONLY = 2  # Attributor.extras when memory marks are the only extra on (see Attributor.refresh_extras)


class IterationMark:
    """Where one detected iteration began: its time, the agent steps before it, and the exclusive seconds per phase
    up to it (``excl``).

    A mark an :class:`Attributor` made holds that snapshot packed (``packed``: C doubles, the values of the first
    ``len(packed) // 8`` of ``keys``, the running totals' keys at the end) and unpacks it when ``excl`` is first read:
    a long off-policy run has one mark per env step, and a dict each would cost three times the memory.
    """

    __slots__ = ("_excl", "keys", "packed", "steps", "t")

    def __init__(
        self,
        t: float,
        steps: int,
        excl: dict[str, float] | None = None,
        *,
        packed: bytes = b"",
        keys: list[str] | None = None,
    ) -> None:
        if excl is None and len(packed) // 8 > len(keys or ()):
            raise ValueError(f"an iteration snapshot holds {len(packed) // 8} phases, its keys only {len(keys or ())}")
        self.t, self.steps, self.packed, self.keys = t, steps, packed, keys
        self._excl = excl

    @property
    def excl(self) -> dict[str, float]:
        if self._excl is None:
            self._excl = dict(zip(self.keys or (), array("d", self.packed)))
        return self._excl

    def __repr__(self) -> str:
        return f"IterationMark(t={self.t!r}, steps={self.steps!r}, excl={self.excl!r})"


@dataclass
class TraceEvent:
    """One closed phase (for Chrome/Perfetto traces)."""

    path: str
    start: float
    end: float


@dataclass
class Attribution:
    """What an :class:`Attributor` measured, in plain numbers (see :meth:`Attributor.result`)."""

    started: float
    ended: float
    excl: dict[str, float]
    enters: dict[str, int]
    layers: dict[str, str]
    steps: int
    iterations: list[IterationMark]
    mem_bytes: dict[str, float]
    cuda_peak_bytes: dict[str, float]
    transitions: int
    passthrough: int
    merges: int
    mem_marks: int
    counted_iteration: int | None
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    matmuls: dict[str, dict[tuple[int, int, int, int], int]] = field(default_factory=dict)
    trace: list[TraceEvent] = field(default_factory=list)
    trace_dropped: int = 0
    env_ids: list[str] = field(default_factory=list)
    synchronized: bool = False
    hooks: str = "python"  # which hooks ran: "compiled" (rlbench/profiling/_fastevent.c) or "python"
    other_threads_cpu_s: float = 0.0  # CPU seconds Python threads other than the attributed one used meanwhile
    other_threads: int = 0  # how many such threads ran
    foreign_phases: int = 0  # rlbench.phase blocks opened from those threads (not attributed)
    sampled: list[bool] = field(default_factory=list)  # per iteration, whether it was attributed ([]: every one)
    sample_every: int = 1  # one iteration in this many attributed from SAMPLE_FROM on (1: every one)
    begun: float = 0.0  # when attribution began (the session's start; a thread's start)
    thread: int = 0  # the thread attributed (threading.get_ident)
    sched: tuple[float, float] = (math.nan, math.nan)  # the thread's seconds on a CPU and waiting for one, from started
    threads_followed: bool = False  # the other threads were attributed on their own (rlbench.profiling.threads)
    channels: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (channel, side) -> [seconds, calls]
    wait_log: list[tuple[float, float, str, str]] = field(default_factory=list)  # traced waits: (start, end, channel, side)


class Attributor:
    """Books wall time to a stack of phases (see the module docstring).

    Args:
        sync: Called before every clock read at a transition (``torch.cuda.synchronize`` for ``--sync``), or ``None``.
        trace_limit: Keep up to this many closed phases for a trace (0: none).
        count_iteration: Count torch ops, syncs and copies per phase during this iteration (0-based; ``None``: never).
        memory: Record peak-RSS growth per top-level phase (``getrusage`` at their boundaries, a syscall each: in
            the first :data:`MEMORY_FIRST` iterations, then in every ``MEMORY_EVERY``-th, from the
            ``MEMORY_SPARSE``-th on in every ``MEMORY_SPARSE``-th: :func:`memory_marked`; around the first
            :data:`MEMORY_MARKS` occurrences of each top-level phase there).
    """

    __slots__ = (
        "_cuda",
        "_mem_left",
        "_now",
        "_paths",
        "_rss0",
        "act_return",
        "auto_name",
        "block_t",
        "blocks",
        "channels",
        "clock",
        "count_iteration",
        "counted",
        "counter",
        "cpu0",
        "cuda_peak_bytes",
        "depth",
        "enters",
        "env_ids",
        "env_self",
        "env_width",
        "excl",
        "extras",
        "foreign_phases",
        "forked",
        "forward_names",
        "iteration_excl",
        "iteration_sampled",
        "iteration_steps",
        "iteration_t",
        "kinds",
        "layers",
        "learns",
        "matmuls",
        "mem_bytes",
        "mem_marks",
        "mem_on",
        "memory",
        "merged",
        "merges",
        "native_id",
        "param_hint",
        "param_ptrs",
        "parent",
        "passthrough",
        "paused",
        "paused_explicit",
        "pending",
        "profiler_enabled",
        "ranges",
        "rf_on",
        "sample_every",
        "saved_depth",
        "seen_modules",
        "shadowed",
        "slow",
        "stack",
        "started",
        "starts",
        "steps",
        "sync",
        "t",
        "t_begin",
        "t_exit",
        "thread",
        "thread_cpu",
        "trace",
        "trace_dropped",
        "trace_limit",
        "unshadowable",
        "updated",
        "wait_log",
    )

    def __init__(
        self,
        *,
        sync: Callable[[], None] | None = None,
        trace_limit: int = 0,
        count_iteration: int | None = 1,
        memory: bool = True,
        sample_every: int = 1,
    ) -> None:
        self.stack: list[str] = []
        self.parent = ""  # the path under the top of the stack ("" at depth 0 or 1), kept by _push and _pop
        self.kinds: list[int] = []
        self.starts: list[float] = []
        self.saved_depth: list[int] = []
        self.ranges: list[Any] = []
        self.excl: defaultdict[str, float] = defaultdict(float)
        self.enters: defaultdict[str, int] = defaultdict(int)
        self.layers: dict[str, str] = {}
        self.depth = 0
        self.passthrough = 0
        self.steps = 0
        self.updated = False
        self.started: float | None = None
        # IterationMark's fields, one list each: one mark per env step (DQN) as a tracked object each would pile up
        # in the old generations that every full garbage collection walks; floats, ints and bytes are not.
        # iteration_excl holds each snapshot of excl packed (_pack): its values as C doubles, in its key order. A dict
        # copy per iteration (DQN: one per env step) would stream new memory through the caches all run long, and
        # its shared floats would stop excl's being updated in place. The marks finish() makes keep them packed.
        self.iteration_t: list[float] = []
        self.iteration_steps: list[int] = []
        self.iteration_excl: list[bytes] = []
        # whether each iteration was attributed: with sample_every > 1 the compiled hooks leave most iterations from
        # SAMPLE_FROM on unattributed (paused: hooked calls pass through, only iterations and agent steps are found)
        self.iteration_sampled: list[bool] = []
        self.sample_every = sample_every
        self.paused = False
        self.paused_explicit = 0  # rlbench.phase blocks opened while paused (they open and close nothing)
        self.sync = sync
        self.trace: list[TraceEvent] | None = [] if trace_limit else None
        self.trace_limit = trace_limit
        self.trace_dropped = 0
        self.memory = memory
        self.mem_bytes: dict[str, float] = {}
        self.cuda_peak_bytes: dict[str, float] = {}
        self._rss0 = 0
        self._mem_left: dict[str, int] = {}
        self._cuda = False
        self.count_iteration = count_iteration
        self.counter: Any = None
        self.slow = False  # the hooks must end their phases through exit(): ops are being counted, or it has finished
        self.counted: dict[str, dict[str, int]] = {}
        self.matmuls: dict[str, dict[tuple[int, int, int, int], int]] = {}
        self.profiler_enabled: Callable[[], bool] = _false
        self.rf_on = False  # emit record_function ranges: torch's profiler was on at the last iteration boundary
        self.mem_on = memory
        self._paths: dict[tuple[str, str], str] = {}
        self.merged = 0  # calls merged into the top automatic phase since it opened (added to its enters when it closes)
        self.pending = False  # the top automatic phase has returned; it closes at the next event (or merges with it)
        self.t_exit = 0.0
        self.auto_name = ""
        self.block_t = 0.0  # when the grad-mode block still open was entered (0: none); see autohooks._install_grad_modes
        self.blocks = 0  # grad-mode blocks open at depth 0 (Normal.sample opens one inside the policy's block)
        self.env_width = 0  # agent steps the last env step took: a module call on a batch this wide is acting (0: none yet)
        self.act_return = 0.0  # when the last call of the open acting phase returned
        self.param_hint = 0.0  # when a module's parameters() was last listed at depth 0 (a polyak loop's zip)
        self.param_ptrs: set[int] = set()  # data pointers of the parameters of every module called at top level
        self.seen_modules: set[int] = set()  # ids of the modules whose parameters are in param_ptrs
        self.foreign_phases = 0  # rlbench.phase blocks opened from another thread (not attributed: see phase)
        self.merges = 0
        self.mem_marks = 0
        self._now: Callable[[], float] = _clock if sync is None else self._synced_now
        self.clock = self._now  # what hooks read the time with (synchronized under --sync)
        self.forward_names: dict[type, str] = {}  # module classes whose grad-enabled call is a named forward (a loss)
        self.thread = threading.get_ident()  # phases follow the thread that started attribution
        # CPU seconds of each other Python thread since attribution started: threads already running count from
        # now; a thread started later adds its whole thread_time when its run() returns (autohooks._install_threads)
        self.thread_cpu: dict[int, float] = {k: -v for k, v in _live_threads_cpu(self.thread).items()}
        self.env_self: Any = None  # the env whose step or reset is the open env phase
        self.env_ids: dict[type, str] = {}  # registered env id of each env class stepped at top level
        self.shadowed: list[tuple[Any, str]] = []  # (weak env, method) given back their unwrapped method
        self.unshadowable: set[type] = set()  # env classes whose instances take no attribute (autohooks.shadow)
        self.channels: dict[tuple[str, str], list[float]] = {}  # what each wait waited on (rlbench.profiling.waits)
        self.wait_log: list[tuple[float, float, str, str]] = []  # traced waits, for the trace's links between roles
        self.learns = False  # an update has been seen (its waits no longer set the actor's rhythm)
        self.forked = False  # a forked child's, reset inside a hooked call: careful (slow) until its first iteration
        self.native_id = threading.get_native_id()  # the thread's OS id: its scheduler statistics (sched_seconds)
        self.cpu0 = sched_seconds(self.native_id)  # on a CPU and waiting for one, when attribution began
        self.extras: bool | int = False
        self.refresh_extras()
        self.t = self.t_begin = _clock()

    # --- the clock ------------------------------------------------------------------------------------------------
    def _synced_now(self) -> float:
        self.sync()  # type: ignore[misc]
        return _clock()

    def _book(self, now: float) -> None:
        top = self.stack[-1] if self.stack else ""
        self.excl[top] = self.excl.get(top, 0.0) + (now - self.t)
        self.t = now

    def refresh_extras(self) -> None:
        """Whether any per-transition extra is on (trace, profiler ranges, memory marks, op counting).

        :data:`MEMORY_ONLY` when memory marks are the only one: they act on top-level phases alone, and only on each
        one's first :data:`MEMORY_MARKS` occurrences in the iteration, so the compiled hooks keep their inline
        transition for every other phase change (``rlbench/profiling/_fastevent.c``).
        """
        others = self.trace is not None or self.rf_on or self.counter is not None or bool(self.ranges)
        self.extras = True if others else MEMORY_ONLY if self.mem_on else False

    # --- frames ---------------------------------------------------------------------------------------------------
    def _new_path(self, parent: str, name: str, layer: str) -> str:
        if not parent:
            path = name
        elif "/" in name and parent.rsplit("/", 1)[-1] == name.split("/", 1)[0]:
            path = f"{parent}/{name.split('/', 1)[1]}"  # "train/forward" inside "train" is "train/forward"
        else:
            path = f"{parent}/{name}"
        self._paths[(parent, name)] = path
        self.layers.setdefault(path, layer)
        return path

    def _push(self, name: str, layer: str, kind: int, now: float) -> None:
        # the hot path of every transition: one dict lookup for the path, the rest only when an extra is on
        stack = self.stack
        top = stack[-1] if stack else ""
        self.excl[top] += now - self.t
        self.t = now
        if self.merged:  # calls merged into the phase below count as its own
            self._flush_merged(top)
        path = self._paths.get((top, name)) or self._new_path(top, name, layer)
        stack.append(path)
        self.parent = top
        self.kinds.append(kind)
        if self.extras:
            self._push_extras(path, now)

    def _push_extras(self, path: str, now: float) -> None:
        stack = self.stack
        if len(stack) == 1 and self.mem_on and self._mem_left.get(path, MEMORY_MARKS) > 0:
            self._memory_mark("")
        if self.trace is not None:
            self.starts.append(now)
        if self.counter is not None:
            self.counter.phase = path
        if self.rf_on:
            import torch

            rf = torch.autograd.profiler.record_function(f"rlbench/{path}")
            rf.__enter__()
            self.ranges.append((len(stack), rf))

    def _pop(self, now: float) -> None:
        stack = self.stack
        path = stack.pop()
        self.parent = stack[-2] if len(stack) > 1 else ""
        self.kinds.pop()
        self.excl[path] += now - self.t
        self.t = now
        if self.merged:
            self._flush_merged(path)
        self.enters[path] += 1
        if self.extras:
            self._pop_extras(path, now)

    def _flush_merged(self, path: str) -> None:
        self.enters[path] += self.merged
        self.merges += self.merged
        self.merged = 0

    def _pop_extras(self, path: str, now: float) -> None:
        stack = self.stack
        if self.ranges and self.ranges[-1][0] == len(stack) + 1:
            self.ranges.pop()[1].__exit__(None, None, None)
        if self.trace is not None:
            start = self.starts.pop()
            if len(self.trace) < self.trace_limit:
                self.trace.append(TraceEvent(path, start, now))
            else:
                self.trace_dropped += 1
        if not stack and self.mem_on:
            left = self._mem_left.get(path, MEMORY_MARKS)
            if left > 0:
                self._mem_left[path] = left - 1
                self._memory_mark(path)
        if self.counter is not None:
            self.counter.phase = stack[-1] if stack else "other"

    def _memory_mark(self, path: str) -> None:
        """Book peak-RSS growth since the last mark to ``path`` (``""`` for growth outside any phase)."""
        self.mem_marks += 1
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT
        if rss > self._rss0:
            if self._rss0:
                self.mem_bytes[path] = self.mem_bytes.get(path, 0.0) + (rss - self._rss0)
            self._rss0 = rss
        if self._cuda:
            import torch

            if path:
                peak = float(torch.cuda.max_memory_allocated())
                self.cuda_peak_bytes[path] = max(self.cuda_peak_bytes.get(path, 0.0), peak)
            torch.cuda.reset_peak_memory_stats()

    def _close_sticky(self, now: float, split: bool = True) -> None:
        kind = self.kinds[-1] if self.kinds else AUTO
        if kind == STICKY:
            self._pop(now)
        elif kind == ACTING:
            self._close_acting(now, split=split)

    # --- automatic events (called by the hooks) -------------------------------------------------------------------
    def _settle(self) -> None:
        """Close the automatic phase left pending by :meth:`exit` at the time it really ended."""
        if self.pending:
            self.pending = False
            self._pop(self.t_exit)

    def enter(self, name: str, layer: str, role: int, now: float | None = None) -> bool:
        """Open automatic phase ``name`` (the caller checked ``depth == 0``); ``role`` drives iteration detection.

        Agent steps are not counted here: the env hook adds them after its call returns
        (:func:`rlbench.profiling.autohooks.env_wrapper`), so an iteration boundary snapshots the steps before it.

        Returns:
            Whether an automatic phase is now open on top, so that :meth:`exit` has one to end (a transfer inside
            the sticky forward opens none).
        """
        if self.paused:  # an unattributed iteration (a Python-only hook: load_state_dict): it passes through
            return False
        if now is None:
            now = self._now()
        self.depth = 1
        if self.pending:
            self.pending = False
            t_exit = self.t_exit
            if name == self.auto_name and (
                now - t_exit < MERGE_GAP_S or (role == INFER and self.t >= self.block_t > 0.0) or name == TARGET_UPDATE
            ):
                # the same kind again (for inference and targets, also anywhere inside the grad-mode block it opened
                # in; for a target update, with nothing else between: the polyak loop's arithmetic): one phase
                self.merged += 1
                if self.counter is not None:
                    self.counter.phase = self.stack[-1]
                return True
            self._pop(t_exit)
        kinds = self.kinds
        if kinds and kinds[-1] >= STICKY and kinds[-1] != EXPLICIT:
            if role == NEST:  # a transfer inside the loss computation (or the action's conversion) is part of it
                return False
            if kinds[-1] == ACTING:
                self._close_acting(now, split=role not in (ENV, WAIT))
            else:
                self._pop(now)
        if role == INFER and self.block_t > self.t:  # opened in the open grad-mode block: it starts there
            now = self.block_t
        elif name == TARGET_UPDATE and self.param_hint > self.t:  # the polyak loop's zip and first arithmetic
            now = self.param_hint
        if role == ENV:
            if self.started is None or self.updated:
                self._new_iteration(now)
                now = self._now()  # the iteration's bookkeeping is the profiler's: the env phase starts after it
        elif role == UPDATE:
            self.updated = True
        elif self.updated and not self.env_width:
            self._new_iteration(now)  # a cycle (see cycle_due)
        self._push(name, layer, AUTO, now)
        self.auto_name = name
        return True

    def exit(self, now: float | None = None) -> None:
        """End what :meth:`enter` opened: the phase is closed lazily, at the next event (see :data:`MERGE_GAP_S`)."""
        self.depth = 0
        kinds = self.kinds
        if kinds and kinds[-1] == AUTO:
            self.t_exit = self._now() if now is None else now
            self.pending = True
            if self.counter is not None:
                self.counter.phase = self.stack[-2] if len(self.stack) > 1 else "other"

    def enter_forward(self, name: str = FORWARD, now: float | None = None) -> None:
        """A module called with grad enabled at depth 0: open (or stay in) the sticky training forward ``name``.

        When the call returns the hook only clears ``depth``: the forward stays open for the loss computation."""
        self.depth = 1
        self._settle()
        if self.updated and not self.env_width:  # a cycle (see cycle_due)
            if now is None:
                now = self._now()
            self._close_sticky(now)
            self._new_iteration(now)
        if self.kinds and self.kinds[-1] == ACTING:
            if now is None:
                now = self._now()
            self._close_acting(now, split=True)
        if self.kinds and self.kinds[-1] == STICKY:
            if self.stack[-1].endswith(name):
                self.passthrough += 1
                return
            if now is None:
                now = self._now()
            self._pop(now)
        elif now is None:
            now = self._now()
        self._push(name, "update", STICKY, now)

    def enter_acting(self, now: float) -> None:
        """A module called on the env's batch (``env_width`` rows) at depth 0, with or without grad: acting.

        Acting is sticky like the training forward: the policy's other calls (the critic beside the actor), the
        distribution built and sampled from their output, the argmax, the noise and the conversion to the action all
        belong to it, up to the env step (or another event) that closes it (:meth:`_close_acting`). It starts at the
        grad-mode block the call sits in, where one is open.
        """
        self.depth = 1
        self._settle()
        kinds = self.kinds
        if kinds and kinds[-1] == ACTING:  # the policy's next call: the same acting
            self.passthrough += 1
            return
        if kinds and kinds[-1] == STICKY:
            self._pop(now)
        start = self.block_t if self.block_t > self.t else now
        self._push(ACT, "inference", ACTING, start)
        self.auto_name = ACT

    def _close_acting(self, now: float, split: bool) -> None:
        """Close the acting phase on top at ``now``. Closed by something else than the env step (``split``), what ran
        after its last call returned is the work between the rollout and the update: ``advantage`` (CleanRL computes
        GAE in the block that bootstraps the last value; SB3 between ``predict_values`` and its labelled
        ``compute_returns_and_advantage``)."""
        last = self.act_return
        if split and self.t <= last < now:
            self._pop(last)
            self._push(ADVANTAGE, "advantage", AUTO, last)
        self._pop(now)

    def block_enter(self, now: float) -> None:
        """A ``torch.no_grad``/``inference_mode`` block entered at depth 0 (see autohooks._install_grad_modes)."""
        self.blocks += 1
        if self.blocks == 1:
            self.block_t = now

    def block_exit(self, now: float) -> None:
        """Its exit: the outermost block's end also ends an inference or target phase that opened inside it (the
        block counts whole: the TD target's arithmetic after its last module call)."""
        if self.blocks > 1:
            self.blocks -= 1
            return
        self.blocks = 0
        if self.pending and self.t >= self.block_t > 0.0 and self.auto_name in (ACT, TARGET):
            self.t_exit = now
        self.block_t = 0.0

    def watch_module(self, module: Any) -> None:
        """Remember the parameters of a module called at top level: a copy into them is a target-network update."""
        self.seen_modules.add(id(module))
        params = getattr(module, "parameters", None)
        if params is not None:
            try:
                self.param_ptrs.update(p.data_ptr() for p in params())
            except Exception:
                pass

    # --- explicit phases ------------------------------------------------------------------------------------------
    def open_explicit(self, name: str, layer: str, starts_iteration: bool = False) -> None:
        """Open an explicit phase (always opens; automatic phases inside it open again as its children)."""
        if self.paused:  # an unattributed iteration: nothing opens (close_explicit closes nothing for it)
            self.paused_explicit += 1
            return
        now = self._now()
        self._settle()
        self._close_sticky(now)
        if (starts_iteration and (self.started is None or self.updated)) or self.cycle_due():
            self._new_iteration(now)
            now = self._now()  # (its bookkeeping is the profiler's: booked below the phase that opens)
        self.saved_depth.append(self.depth)
        self.depth = 0
        self.rf_on = self.profiler_enabled()
        self.refresh_extras()
        self._push(name, layer, EXPLICIT, now)

    def close_explicit(self) -> None:
        """Close the innermost explicit phase (and a sticky forward left open inside it).

        Acting left open inside a labelled inference (SB3's ``predict``: the obs conversion, the policy's call, the
        action's conversion) ends with the label, whole: what followed the policy's last call is still acting, not
        the advantage that follows a rollout (:meth:`_close_acting`).
        """
        if self.paused_explicit:  # opened while paused
            self.paused_explicit -= 1
            return
        now = self._now()
        self._settle()
        inside = self.stack[-2] if len(self.stack) > 1 and self.kinds[-1] == ACTING else ""
        self._close_sticky(now, split=self.layers.get(inside) != "inference")
        while self.kinds and self.kinds[-1] != EXPLICIT:  # an automatic phase left open by an exception
            self._pop(now)
        if self.kinds:
            self._pop(now)
            self.depth = self.saved_depth.pop() if self.saved_depth else 0

    # --- iterations -----------------------------------------------------------------------------------------------
    def reset_after_fork(self) -> None:
        """In a forked child: start over, keeping what is known of the code (paths and layers, watched modules and
        parameters, env ids, labelled losses, shadowed envs). Forked inside a hooked call (a phase open or pending),
        the hooks take the careful path until the child's first iteration: that call's return finds an empty stack."""
        keep = {
            name: getattr(self, name)
            for name in (
                "_paths", "layers", "forward_names", "param_ptrs", "seen_modules", "env_ids", "shadowed",
                "unshadowable", "profiler_enabled", "sync", "trace_limit", "sample_every", "thread",
            )
        }  # fmt: skip
        busy = bool(self.depth or self.pending or self.stack)
        Attributor.__init__(
            self,
            sync=keep["sync"],
            trace_limit=keep["trace_limit"],
            count_iteration=None,
            memory=False,
            sample_every=keep["sample_every"],
        )
        for name, value in keep.items():
            setattr(self, name, value)
        self.rf_on = self.profiler_enabled()
        self.refresh_extras()
        if busy:
            self.slow = self.forked = True

    def cycle_due(self) -> bool:
        """Whether an event now (not an update, not an env step) starts a *cycle*: a training iteration of a thread
        that steps no env (a learner fed by a queue, a DDP rank), which begins at its first event after an update
        (the next batch's queue get, replay sample or forward). A thread that steps an env keeps the env rhythm
        (an env step after an update starts an iteration). ``_fastevent.c``'s ``cycle_due`` is its twin."""
        return self.updated and not self.env_width

    def _new_iteration(self, now: float) -> None:
        # the compiled hooks run the common case themselves (an iteration with no memory mark due, nothing counted and
        # no torch profiler: _fastevent.c's env_iteration and start_iteration): a change here goes there too
        self._book(now)
        if self.started is None:
            self.started = now
            self.excl.clear()  # what ran before the first env event is start-up, not training
            self.cpu0 = sched_seconds(self.native_id)
        self._cuda = _cuda_initialized()
        index = len(self.iteration_t)
        self.iteration_t.append(now)
        self.iteration_steps.append(self.steps)
        self.iteration_excl.append(_pack(self.excl))
        self.iteration_sampled.append(True)  # (only the compiled hooks pause, at an env step or a collector's label)
        self.updated = False
        if self.forked:  # a forked child's first iteration: the call in flight at the fork has returned
            self.forked = self.slow = False
        self.mem_on = self.memory and memory_marked(index)
        self._mem_left.clear()
        self.rf_on = self.profiler_enabled()
        if self.counter is not None:
            self._stop_counting()
        elif self.count_iteration is not None and index == self.count_iteration:
            self.mem_on = False  # the dispatch mode's own allocations are not the script's
            self._start_counting()
        self.refresh_extras()

    def _start_counting(self) -> None:
        from rlbench.instrument.counters import OpCounter

        self.counter = OpCounter()
        self.counter.phase = self.stack[-1] if self.stack else "other"
        self.counter.__enter__()
        self.slow = True

    def _stop_counting(self) -> None:
        counter, self.counter = self.counter, None
        self.slow = False
        counter.__exit__(None, None, None)
        self.counted = {
            "ops": dict(counter.ops),
            "syncs": dict(counter.syncs),
            "copies": dict(counter.copies),
            "flops": dict(counter.flops),
        }
        self.matmuls = {phase: dict(per) for phase, per in counter.matmuls.items()}

    def _sched(self) -> tuple[float, float]:
        """The thread's seconds on a CPU and waiting for one (in a run queue) since attribution started."""
        now = sched_seconds(self.native_id)
        return (now[0] - self.cpu0[0], now[1] - self.cpu0[1])

    def peek(self) -> Attribution:
        """What has been measured so far, without closing anything: the time since the last transition is booked as
        it would be at the next one (to a pending phase up to its end, then to the phase below it). Read from another
        thread (a follower's periodic snapshot): every copy is one call under the GIL, so the snapshot may miss the
        transition in flight, never corrupt the attributor."""
        now = _clock()
        # the marks first: a phase booked meanwhile adds a key to the totals after them, never one before
        ts, steps, packed = list(self.iteration_t), list(self.iteration_steps), list(self.iteration_excl)
        excl = dict(self.excl)
        stack = list(self.stack)
        if not self.paused:
            top = stack[-1] if stack else ""
            if self.pending and stack:
                excl[top] = excl.get(top, 0.0) + max(self.t_exit - self.t, 0.0)
                below = stack[-2] if len(stack) > 1 else ""
                excl[below] = excl.get(below, 0.0) + max(now - self.t_exit, 0.0)
            else:
                excl[top] = excl.get(top, 0.0) + max(now - self.t, 0.0)
        n = min(len(ts), len(steps), len(packed))
        sampled = list(self.iteration_sampled)[:n]
        return Attribution(
            started=self.started if self.started is not None else self.t_begin,
            ended=now,
            excl=excl,
            enters=dict(self.enters),
            layers=dict(self.layers),
            steps=self.steps,
            iterations=_marks(ts[:n], steps[:n], packed[:n], list(excl)),
            sampled=[] if all(sampled) else sampled,
            sample_every=self.sample_every,
            mem_bytes={},
            cuda_peak_bytes={},
            transitions=2 * (sum(self.enters.values()) - self.merges),
            passthrough=self.passthrough,
            merges=self.merges,
            mem_marks=self.mem_marks,
            counted_iteration=None,
            begun=self.t_begin,
            thread=self.thread,
            sched=self._sched(),
            channels={k: list(v) for k, v in dict(self.channels).items()},
        )

    def finish(self) -> Attribution:
        """Close every open phase, stop counting, and return what was measured."""
        now = self._now()
        if self.paused:  # the last iteration was not attributed: nothing is booked since its start
            self.paused = False
            self.t = now
        self.slow = True  # a hooked call still running (the session ended inside it) must not leave a phase pending
        self._settle()
        while self.stack:
            self._pop(now)
        self._book(now)
        if self.counter is not None:  # the counted iteration never ended: its counts are incomplete
            self.counter.__exit__(None, None, None)
            self.counter = None
            self.counted = {}
            self.matmuls = {}
            counted = None
        else:
            counted = self.count_iteration if self.counted else None
        threads = dict(self.thread_cpu)
        for ident, cpu in _live_threads_cpu(self.thread).items():
            threads[ident] = threads.get(ident, 0.0) + cpu
        threads = {k: v for k, v in threads.items() if v > 1e-6}
        return Attribution(
            started=self.started if self.started is not None else self.t_begin,  # no env event: all of it is the run
            ended=now,
            excl=dict(self.excl),
            enters=dict(self.enters),
            layers=dict(self.layers),
            steps=self.steps,
            iterations=_marks(self.iteration_t, self.iteration_steps, self.iteration_excl, list(self.excl)),
            sampled=[] if all(self.iteration_sampled) else list(self.iteration_sampled),
            sample_every=self.sample_every,
            mem_bytes=dict(self.mem_bytes),
            cuda_peak_bytes=dict(self.cuda_peak_bytes),
            transitions=2 * (sum(self.enters.values()) - self.merges),  # each phase opened once is a push and a pop
            passthrough=self.passthrough,
            merges=self.merges,
            mem_marks=self.mem_marks,
            counted_iteration=counted,
            counts=self.counted,
            matmuls=self.matmuls,
            trace=list(self.trace or []),
            trace_dropped=self.trace_dropped,
            env_ids=sorted({i for i in self.env_ids.values() if i}),
            synchronized=self.sync is not None,
            other_threads_cpu_s=sum(threads.values()),
            other_threads=len(threads),
            foreign_phases=self.foreign_phases,
            begun=self.t_begin,
            thread=self.thread,
            sched=self._sched(),
            channels={k: list(v) for k, v in self.channels.items()},
            wait_log=list(self.wait_log),
        )


def _pack(excl: dict[str, float]) -> bytes:
    """A snapshot of ``excl``: its values as C doubles, in its key order (``_fastevent.c``'s ``start_iteration`` packs
    the same bytes)."""
    return array("d", excl.values()).tobytes()


def _marks(ts: list[float], steps: list[int], packed: list[bytes], keys: list[str]) -> list[IterationMark]:
    """The iteration marks, their snapshots left packed against ``keys``, the running totals' keys at the end.

    A snapshot of n values belongs to the first n keys: keys are only ever added to the totals once the first
    iteration has cleared them (:meth:`Attributor._new_iteration`), and a dict keeps its insertion order.
    """
    return [IterationMark(t, n, packed=snap, keys=keys) for t, n, snap in zip(ts, steps, packed)]


def _live_threads_cpu(main: int) -> dict[int, float]:
    """CPU seconds of every live Python thread but ``main`` and rlbench's own (named ``rlbench-*``: the watch on
    the parent process, the fingerprints), the threads still running when attribution ends."""
    import time

    out = {}
    for t in threading.enumerate():
        if t.ident is None or t.ident == main or not t.is_alive() or t.name.startswith(OWN_THREAD_PREFIX):
            continue
        try:
            out[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (AttributeError, OSError):  # not on this platform, or the thread just ended
            continue
    return out


def _false() -> bool:
    return False


def sched_seconds(native_id: int) -> tuple[float, float]:
    """A thread's seconds on a CPU and waiting for one, so far (Linux's ``/proc/self/task/TID/schedstat``; NaN where
    it cannot be read). A thread's wall is these two and its time blocked (asleep, waiting on a lock, on I/O)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            on_cpu, queued = f.read().split()[:2]
        return int(on_cpu) / 1e9, int(queued) / 1e9
    except (OSError, ValueError):
        return math.nan, math.nan


def _cuda_initialized() -> bool:
    import sys

    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


# --- the active attributor and explicit phases --------------------------------------------------------------------
class _Active:
    attributor: Attributor | None = None
    threads: Any = None  # the session's ThreadSet (rlbench.profiling.threads): every other thread's attributor


ACTIVE = _Active()


def activate(attributor: Attributor | None, threads: Any = None) -> None:
    """Make ``attributor`` the one explicit phases and hooks of its thread report to (``None``: none), and
    ``threads`` give every other thread's its own."""
    ACTIVE.attributor = attributor
    ACTIVE.threads = threads


def current() -> Attributor | None:
    """The calling thread's attributor while a session runs (``None``: none, or a thread that is not followed)."""
    a = ACTIVE.attributor
    if a is None or _get_ident() == a.thread:
        return a
    threads = ACTIVE.threads
    return None if threads is None else threads.attributor(_get_ident())


class phase:
    """Name a phase of your code: a context manager, or a decorator.

    Inside ``rlbench profile`` (or a :func:`rlbench.session`) the time is booked to ``name`` (slashes nest:
    ``"replay/sample"``); automatic phases inside it (env steps, module calls, backward) become its children.
    Elsewhere it costs one attribute test and does nothing, so it can stay in the code.

    Args:
        name: The phase's name.
        layer: Report layer (``environment``, ``inference``, ``advantage``, ``update``, ``replay``, ``transfer``,
            ``other``); guessed from the name when omitted (``gae`` → advantage).
    """

    __slots__ = ("layer", "name")

    def __init__(self, name: str, layer: str | None = None) -> None:
        if not isinstance(name, str) or not name.strip("/") or "//" in name:
            raise ValueError(f"rlbench.phase: a phase name is a non-empty string like 'gae' or 'replay/sample', got {name!r}")
        self.name = name.strip("/")
        self.layer = layer or ""  # "": the records name it from the phase's name (rlbench.results.metrics.guess_layer)

    def __enter__(self) -> phase:
        main = ACTIVE.attributor
        if main is not None:
            a = current()  # each thread's phases land in its own attribution
            if a is not None:
                a.open_explicit(self.name, self.layer)
            else:  # a thread that is not followed (rlbench's own): not attributed
                main.foreign_phases += 1
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if ACTIVE.attributor is not None:
            a = current()
            if a is not None:
                a.close_explicit()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        name, layer = self.name, self.layer

        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            a = current() if ACTIVE.attributor is not None else None
            if a is None:
                return fn(*args, **kwargs)
            a.open_explicit(name, layer)
            try:
                return fn(*args, **kwargs)
            finally:
                a.close_explicit()

        return timed

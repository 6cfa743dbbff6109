"""Phase timers: wall time attributed to named, nested phases for a fraction of a microsecond.

Phases are named with slashes for nesting (``"update"``, ``"update/backward"``); a parent's time that
no child accounts for is its own ("self") time, derived when reporting.

Two ways to time, with measured costs (:func:`measure_overhead`):

* **Boundary clock** (hot loops). Phases that follow each other share their boundaries, so each phase
  event costs one clock read and one float addition on a local variable::

      now = timer.now
      t_policy = t_env = 0.0
      t1 = now()
      for step in range(T):
          t0 = t1; act(); t1 = now(); t_policy += t1 - t0
          t0 = t1; step_env(); t1 = now(); t_env += t1 - t0
      timer.add("collect/policy", t_policy, T)
      timer.add("collect/env", t_env, T)

* **Context manager** (coarse phases): ``with timer.phase("advantage"): ...``. Readable, but Python's
  ``with`` costs several times more per event, so it is kept out of per-step loops.

**Test-only knob: injected slowdowns.** ``RLBENCH_INJECT_DELAY="update:0.05"`` (comma-separated
``phase:fraction`` pairs; unset by default) makes every :meth:`PhaseTimer.add` to that phase busy-wait
``fraction`` times the time being booked, and books the wait too: the phase really becomes 5% slower,
as a regression would make it. A fraction must be a finite number >= 0 (``inf`` would wait forever, ``nan``
would book nothing), and ``rlbench run`` refuses a phase its benchmark does not time. It exists to measure
what the gate detects (``reports/gate-calibration.md``); runs with it set say so in their software fingerprint.

On CUDA/MPS, ``sync`` (see :mod:`rlbench.instrument.sync`) is called at every clock read so that
queued GPU work is booked to the phase that queued it; ``sync=None`` measures unsynchronized (real
overlap). :class:`NullTimer` records nothing; its clock is the ``float`` builtin (returns 0.0).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

_perf = time.perf_counter
INJECT_ENV = "RLBENCH_INJECT_DELAY"
_SLOWED: set[str] = set()  # phases an injected delay slowed in this process


def slowed_phases() -> frozenset[str]:
    """The phases an injected delay (``RLBENCH_INJECT_DELAY``) has slowed in this process so far."""
    return frozenset(_SLOWED)


def parse_injection(text: str | None) -> dict[str, float]:
    """``"update:0.05,collect:0.1"`` -> ``{"update": 0.05, "collect": 0.1}`` (empty for ``None``/``""``).

    Raises:
        ValueError: On a malformed entry, a fraction that is negative or not finite (``inf``, ``nan``), or a phase named
            twice.
    """
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, frac = part.strip().rpartition(":")
        try:
            value = float(frac)
        except ValueError:
            value = -1.0
        if not sep or not name or not math.isfinite(value) or value < 0:
            raise ValueError(
                f"{INJECT_ENV}: expected PHASE:FRACTION[,PHASE:FRACTION] with FRACTION a finite number >= 0, got {part!r}"
            )
        if name in out:
            raise ValueError(f"{INJECT_ENV}: phase {name!r} is named twice")
        out[name] = value
    return out


def _synced_clock(sync: Callable[[], None]) -> Callable[[], float]:
    def now() -> float:
        sync()
        return _perf()

    return now


class _PhaseContext:
    """Context manager that books its duration to one phase of a timer."""

    __slots__ = ("_name", "_t0", "_timer")

    def __init__(self, timer: PhaseTimer, name: str) -> None:
        self._timer = timer
        self._name = name
        self._t0 = 0.0

    def __enter__(self) -> _PhaseContext:
        self._t0 = self._timer.now()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._timer.add(self._name, self._timer.now() - self._t0, 1, 1)


class PhaseTimer:
    """Accumulates seconds and event counts per phase name.

    Args:
        sync: Called before every clock read to wait for a device (``None`` on CPU, or for
            unsynchronized timing on a GPU).

    Attributes:
        now: The clock to read at phase boundaries (synchronizing when ``sync`` is given).
        seconds: Seconds per phase name, in first-use order.
        counts: Completed events per phase name.
        context_events: How many of the events were timed with the context manager (they cost more
            than boundary-clock events; the overhead estimate accounts for both).
    """

    enabled = True

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.synchronized = sync is not None
        self.now: Callable[[], float] = _perf if sync is None else _synced_clock(sync)
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.context_events = 0
        self._contexts: dict[str, _PhaseContext] = {}
        self.inject = parse_injection(os.environ.get(INJECT_ENV))

    def add(self, name: str, seconds: float, count: int = 1, context_events: int = 0) -> None:
        """Book ``seconds`` spread over ``count`` events to phase ``name``."""
        if self.inject and name in self.inject:  # test-only slowdown (see the module docstring)
            end = _perf() + seconds * self.inject[name]
            while _perf() < end:
                pass
            seconds *= 1.0 + self.inject[name]
            _SLOWED.add(name)
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.counts[name] = self.counts.get(name, 0) + count
        self.context_events += context_events

    def phase(self, name: str) -> _PhaseContext:
        """A reusable context manager timing phase ``name`` (keep it out of per-step loops)."""
        ctx = self._contexts.get(name)
        if ctx is None:
            ctx = self._contexts[name] = _PhaseContext(self, name)
        return ctx

    def events(self) -> int:
        """Total completed phase events."""
        return sum(self.counts.values())

    def snapshot(self) -> dict[str, float]:
        """A copy of the seconds per phase (subtract two snapshots for a per-iteration delta)."""
        return dict(self.seconds)

    def reset(self) -> None:
        """Forget everything recorded so far (e.g. after warm-up)."""
        self.seconds.clear()
        self.counts.clear()
        self.context_events = 0


class NullTimer(PhaseTimer):
    """Records nothing: its clock is the ``float`` builtin and ``add`` returns at once."""

    enabled = False

    def __init__(self) -> None:
        super().__init__(None)
        self.now = float
        self.inject = {}

    def add(self, name: str, seconds: float, count: int = 1, context_events: int = 0) -> None:
        """Ignore the event."""


def measure_overhead(n: int = 200_000, repeats: int = 5) -> dict[str, float]:
    """Measure what one phase event costs on this machine, in microseconds.

    Each style is timed over ``n`` empty events against an empty loop of ``n`` iterations,
    ``repeats`` times, keeping the minimum (the least disturbed estimate).

    Args:
        n: Events per measurement.
        repeats: Measurements per style; the minimum is kept.

    Returns:
        ``boundary_us``: one boundary-clock event (clock read + accumulate);
        ``context_us``: one ``with timer.phase(...)`` event;
        ``null_us``: one event on a :class:`NullTimer` (clock call only).
    """
    timer = PhaseTimer()
    ctx = timer.phase("overhead")
    now = timer.now
    null_now = NullTimer().now
    loop = range(n)

    def bare() -> None:
        for _ in loop:
            pass

    def boundary() -> None:
        acc = 0.0
        t1 = now()
        for _ in loop:
            t0 = t1
            t1 = now()
            acc += t1 - t0
        timer.add("overhead/boundary", acc, n)

    def context() -> None:
        for _ in loop:
            with ctx:
                pass

    def null() -> None:
        acc = 0.0
        t1 = null_now()
        for _ in loop:
            t0 = t1
            t1 = null_now()
            acc += t1 - t0

    best = {}
    for name, fn in (("bare", bare), ("boundary", boundary), ("context", context), ("null", null)):
        times = []
        for _ in range(repeats):
            t0 = _perf()
            fn()
            times.append(_perf() - t0)
        best[name] = min(times)
    return {f"{name}_us": max(best[name] - best["bare"], 0.0) / n * 1e6 for name in ("boundary", "context", "null")}


def estimate_overhead_s(events: int, context_events: int, cost: dict[str, float]) -> float:
    """Seconds the timer itself added to a run.

    Args:
        events: All phase events of the run.
        context_events: How many of them were timed with the context manager.
        cost: Per-event costs from :func:`measure_overhead`.
    """
    return ((events - context_events) * cost["boundary_us"] + context_events * cost["context_us"]) * 1e-6

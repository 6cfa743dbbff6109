"""Each actor's phases as wall-clock spans: busy work, waiting on a queue, syncing weights.

Spans use ``time.time()`` so that actors in different processes (or hosts with synchronized clocks) share one time
axis for the timeline figure. The kind of a phase is the part of its name before the first slash: ``busy/...``,
``wait/input``, ``wait/output``, ``sync/...``, ``measure/...`` (the harness's own readings); an actor's idle time
is its lifetime minus its spans.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

KINDS = ("busy", "wait", "sync", "measure")


@dataclass
class Timeline:
    """Spans of one actor.

    Attributes:
        actor: The actor's name (``generator-0``, ``scorer``, ``learner``).
        spans: ``(phase, start, end)`` in ``time.time()`` seconds.
        started: When the actor started.
        ended: When it stopped (0 while running).
    """

    actor: str
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    ended: float = 0.0

    @contextmanager
    def span(self, phase: str) -> Iterator[None]:
        """Time the block as ``phase`` (``busy/generate``, ``wait/input``, ``sync/weights``)."""
        t0 = time.time()
        try:
            yield
        finally:
            self.spans.append((phase, t0, time.time()))

    def close(self) -> Timeline:
        """Mark the actor stopped; returns itself."""
        self.ended = self.ended or time.time()
        return self

    def totals(self) -> dict[str, float]:
        """Seconds per phase."""
        out: dict[str, float] = {}
        for phase, t0, t1 in self.spans:
            out[phase] = out.get(phase, 0.0) + (t1 - t0)
        return out

    def split(self) -> dict[str, float]:
        """Seconds busy, waiting, syncing, measuring and idle over the actor's lifetime."""
        out = dict.fromkeys((*KINDS, "idle"), 0.0)
        for phase, t0, t1 in self.spans:
            kind = phase.split("/", 1)[0]
            out[kind if kind in KINDS else "busy"] += t1 - t0
        life = (self.ended or time.time()) - self.started
        out["idle"] = max(life - sum(out[k] for k in KINDS), 0.0)
        return out

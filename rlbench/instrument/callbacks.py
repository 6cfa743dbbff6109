"""The callback protocol training loops call at coarse boundaries (never per env step).

Callbacks see what the phase timers measured, per iteration, without adding cost to the hot loops:
the loop times its phases with :class:`~rlbench.instrument.timers.PhaseTimer` and hands each callback
an :class:`IterationInfo` once per rollout+update. Returning ``False`` from
:meth:`Callback.on_iteration_end` stops training early (as in Stable-Baselines3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class IterationInfo:
    """What one training iteration (one rollout and its update) did.

    Attributes:
        iteration: 0-based iteration index.
        env_steps: Agent steps (env transitions, summed over envs) collected so far.
        total_steps: The step budget of the run.
        elapsed_s: Training wall time so far (init excluded).
        phase_s: Seconds per phase spent in this iteration.
        diagnostics: Update diagnostics (losses, approx-KL, clip fraction, ...).
        recent_return: Mean return of the last finished training episodes (NaN before any).
    """

    iteration: int
    env_steps: int
    total_steps: int
    elapsed_s: float
    phase_s: dict[str, float]
    diagnostics: dict[str, float] = field(default_factory=dict)
    recent_return: float = float("nan")


class Callback:
    """Base class: override the hooks you need; each default does nothing."""

    def on_train_start(self, info: dict[str, Any]) -> None:
        """Called once after init, before the first rollout; ``info`` holds the config and sizes."""

    def on_iteration_end(self, it: IterationInfo) -> bool | None:
        """Called after each rollout+update; return ``False`` to stop training."""
        return None

    def on_train_end(self, summary: dict[str, Any]) -> None:
        """Called once after training and evaluation (also when a callback stopped training early)."""


class CallbackList(Callback):
    """Calls several callbacks in order; training stops if any ``on_iteration_end`` returns ``False``."""

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self.callbacks = [cb for cb in callbacks if cb is not None]

    def on_train_start(self, info: dict[str, Any]) -> None:
        """Forward to every callback."""
        for cb in self.callbacks:
            cb.on_train_start(info)

    def on_iteration_end(self, it: IterationInfo) -> bool | None:
        """Forward to every callback; ``False`` if any asked to stop."""
        keep_going = True
        for cb in self.callbacks:
            if cb.on_iteration_end(it) is False:
                keep_going = False
        return None if keep_going else False

    def on_train_end(self, summary: dict[str, Any]) -> None:
        """Forward to every callback."""
        for cb in self.callbacks:
            cb.on_train_end(summary)

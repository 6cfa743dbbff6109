"""The vectorized-environment interface every rlbench collector steps.

rlbench's envs follow gymnasium's vector API closely, with one deliberate choice made explicit:
**same-step autoreset**. When sub-env ``i`` terminates or is truncated at a step, that same
``step`` call returns the *reset* observation in ``obs[i]`` and the true last observation of the
finished episode in ``final_obs[i]`` (gymnasium's ``AutoresetMode.SAME_STEP``). Collectors need the
final observation to bootstrap the value of truncated episodes; they never see a "dead" step.

Arrays returned by :meth:`VecEnv.step` and :meth:`VecEnv.reset` may be views of buffers the env
reuses on its next call (no per-step allocations): copy what you keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class ActionSpec:
    """What a single sub-env accepts as an action.

    Attributes:
        kind: ``"discrete"`` (integer actions ``0..n-1``) or ``"box"`` (continuous vectors).
        n: Number of discrete actions (``kind == "discrete"``), else 0.
        shape: Shape of one continuous action (``kind == "box"``), else ``()``.
        low: Lower bounds of a box action, else ``None``.
        high: Upper bounds of a box action, else ``None``.
    """

    kind: str
    n: int = 0
    shape: tuple[int, ...] = ()
    low: np.ndarray | None = None
    high: np.ndarray | None = None


class StepResult(NamedTuple):
    """One batched transition, all arrays with leading dimension ``num_envs``.

    Attributes:
        obs: Next observations, float32; the reset observation where an episode just ended.
        reward: Rewards, float32, shape ``(N,)``.
        terminated: True where the episode reached a terminal state (no bootstrap).
        truncated: True where the episode was cut by a time limit (bootstrap from ``final_obs``).
        final_obs: Last observation of each episode that ended at this step; rows where neither
            ``terminated`` nor ``truncated`` is set hold unspecified values.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray


@runtime_checkable
class VecEnv(Protocol):
    """A batch of ``num_envs`` environments stepped together with same-step autoreset."""

    num_envs: int
    obs_shape: tuple[int, ...]
    action_spec: ActionSpec

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every sub-env.

        Args:
            seed: Sub-env ``i`` is seeded with ``seed + i`` (gymnasium's vector convention);
                ``None`` keeps the current random streams.

        Returns:
            Observations, float32, shape ``(num_envs, *obs_shape)``.
        """
        ...

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every sub-env by one step (autoresetting finished ones in the same call)."""
        ...

    def close(self) -> None:
        """Release resources (worker processes, files)."""
        ...

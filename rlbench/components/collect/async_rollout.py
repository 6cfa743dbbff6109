"""PPO's view of the async collector: the :class:`~rlbench.components.collect.rollout.OnPolicyCollector` interface.

:class:`AsyncOnPolicyCollector` offers ``reset(seed)``, ``collect() -> RolloutStorage``, ``episodes``,
``env_steps`` and ``close()`` like the synchronous collector, so the PPO loop takes either. Rollouts have
the same ``(T, N)`` layout (N = workers), episode accounting and truncation bootstrapping.

Timing: ``collect`` is the wall time of the rollout; ``collect/policy`` the server's model time in it;
``collect/env`` the rest (env steps, transport and recording, overlapping across workers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlbench.components.collect.batched import AsyncBatchedCollector
from rlbench.components.collect.episodes import EpisodeTracker
from rlbench.components.collect.rollout import RolloutStorage
from rlbench.instrument.timers import NullTimer, PhaseTimer


class AsyncOnPolicyCollector:
    """Rollouts from :class:`AsyncBatchedCollector` workers, in :class:`OnPolicyCollector`'s interface.

    Args:
        env_id: Gymnasium id (each worker steps one env).
        num_workers: Env workers (``N`` of the rollout).
        policy: Object with ``act(obs) -> (actions, logprobs, values)`` and ``value(obs)``; it may be swapped
            or reloaded between ``collect`` calls (workers are parked then).
        steps: Rollout length ``T`` per worker.
        gamma: Discount, for bootstrapping truncated episodes.
        transport: ``slot``, ``lock``, ``direct`` or ``multiprocess``.
        timer: Phase timer (a :class:`NullTimer` when omitted).
        action_low: Lower bounds box actions are clipped to before the env.
        action_high: Upper bounds, likewise.
        max_wait_s: Server batching delay.
    """

    def __init__(
        self,
        env_id: str,
        num_workers: int,
        policy: Any,
        steps: int,
        gamma: float,
        transport: str = "slot",
        timer: PhaseTimer | None = None,
        action_low: np.ndarray | None = None,
        action_high: np.ndarray | None = None,
        max_wait_s: float = 0.0,
    ) -> None:
        self.policy = policy
        self.steps = steps
        self.timer = timer if timer is not None else NullTimer()
        self.inner = AsyncBatchedCollector(
            env_id,
            num_workers,
            lambda obs: self.policy.act(obs),
            transport=transport,
            value_fn=lambda obs: self.policy.value(obs),
            gamma=gamma,
            max_wait_s=max_wait_s,
            action_low=action_low,
            action_high=action_high,
        )
        self.episodes = EpisodeTracker(num_workers)
        self.env_steps = 0
        self.storage: RolloutStorage | None = None

    def reset(self, seed: int | None) -> None:
        """Start the workers (worker ``i``'s env seeded ``seed + i``) and the server."""
        if self.inner._workers:
            raise RuntimeError("AsyncOnPolicyCollector.reset() starts the workers once; build a new collector to restart")
        self.inner.start(seed)

    def collect(self) -> RolloutStorage:
        """One rollout of ``T`` steps per worker (storage reused by the next call)."""
        timer = self.timer
        now = timer.now
        start_steps = self.env_steps
        forward0 = self.inner.server.forward_seconds()
        t0 = now()
        st = self.inner.rollout(self.steps, bootstrap=False)
        self.episodes.add_rollout(st.rewards, st.dones, start_steps)
        self.inner.bootstrap_truncations(st)
        t1 = now()
        self.env_steps += self.steps * self.inner.num_workers
        policy_s = self.inner.server.forward_seconds() - forward0
        timer.add("collect/policy", policy_s, self.steps + 1)
        timer.add("collect/env", max(0.0, t1 - t0 - policy_s), self.steps)
        timer.add("collect", t1 - t0, 1)
        self.storage = st
        return st

    def close(self) -> None:
        """Stop and join the workers and the server."""
        self.inner.close()

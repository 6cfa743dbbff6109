"""Step collection for off-policy methods: N envs stepped together, every transition written to a replay buffer.

Per vector step: actions for all N envs (uniform random during the warm-up frames, else the policy, plus
exploration noise if any), one env step, one buffer ``add`` of N rows. ``next_obs`` is the true next
observation: where an episode ended, the env's ``final_obs`` (not the autoreset observation). ``done`` stores
*terminated* only: a time-limit truncation still bootstraps from ``next_obs``. With an episode-aware buffer
(:class:`~rlbench.components.replay.TrajectoryReplayBuffer`) each row also gets its env's episode id.

Timing: ``collect/policy``, ``collect/env`` and ``collect/store`` are booked with the timer's boundary clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlbench.components.collect.episodes import EpisodeTracker
from rlbench.components.envs.base import VecEnv
from rlbench.components.replay import TrajectoryReplayBuffer
from rlbench.instrument.timers import NullTimer, PhaseTimer


class OffPolicyCollector:
    """Steps a vector env with a policy (or random actions) and stores every transition.

    Args:
        env: The vectorized env (box actions).
        buffer: Replay buffer with ``add(batch)``.
        policy: ``policy(obs) -> actions`` (NumPy in and out) for the N envs.
        timer: Phase timer for ``collect/*``.
        noise: Exploration noise ``noise(actions, step) -> actions`` with ``reset(done)``, optional.
        seed: Seed of the warm-up action generator.
    """

    def __init__(
        self,
        env: VecEnv,
        buffer: Any,
        policy: Callable[[np.ndarray], np.ndarray],
        timer: PhaseTimer | None = None,
        noise: Any = None,
        seed: int | None = None,
    ) -> None:
        spec = env.action_spec
        if spec.kind != "box":
            raise ValueError(f"off-policy actor-critics here need continuous (box) actions, got {spec.kind} actions")
        self.env, self.buffer, self.policy, self.noise = env, buffer, policy, noise
        self.timer = timer if timer is not None else NullTimer()
        self.low, self.high = np.asarray(spec.low, np.float32), np.asarray(spec.high, np.float32)
        self.rng = np.random.default_rng(seed)
        n = env.num_envs
        self.episodes = EpisodeTracker(n)
        self.env_steps = 0
        self._episode_ids = np.arange(n, dtype=np.int64) if isinstance(buffer, TrajectoryReplayBuffer) else None
        self._next_id = n
        self.obs = np.zeros((n, *env.obs_shape), np.float32)

    def reset(self, seed: int | None = None) -> None:
        """Reset every env (sub-env ``i`` seeded ``seed + i``)."""
        self.obs = np.asarray(self.env.reset(seed=seed), np.float32)

    def step(self, random: bool = False) -> None:
        """One vector step of N transitions into the buffer.

        Args:
            random: Uniform random actions in the box (warm-up frames) instead of the policy.
        """
        now, timer = self.timer.now, self.timer
        t0 = now()
        if random:
            actions = self.rng.uniform(self.low, self.high, (self.env.num_envs, *self.low.shape)).astype(np.float32)
        else:
            actions = self.policy(self.obs)
            if self.noise is not None:
                actions = self.noise(actions, self.env_steps)
        t1 = now()
        res = self.env.step(actions)
        t2 = now()
        ended = res.terminated | res.truncated
        next_obs = res.obs
        batch = {"obs": self.obs, "action": actions, "reward": res.reward, "done": res.terminated}
        if ended.any():
            next_obs = next_obs.copy()
            next_obs[ended] = res.final_obs[ended]
            if self.noise is not None:
                self.noise.reset(ended)
        batch["next_obs"] = next_obs
        if self._episode_ids is not None:
            batch["episode"] = self._episode_ids.copy()
            k = int(ended.sum())
            if k:
                self._episode_ids[ended] = np.arange(self._next_id, self._next_id + k)
                self._next_id += k
        self.buffer.add(batch)
        self.env_steps += self.env.num_envs
        self.episodes.add_step(res.reward, ended, self.env_steps)
        self.obs = res.obs.copy()
        t3 = now()
        timer.add("collect/policy", t1 - t0)
        timer.add("collect/env", t2 - t1)
        timer.add("collect/store", t3 - t2)


class AsyncOffPolicyCollector:
    """:class:`OffPolicyCollector`'s interface over an :class:`~rlbench.components.inference.AsyncBatchedCollector`.

    ``num_envs`` env workers (threads, or processes with the ``multiprocess`` transport) each step their own env and
    get actions from one batched inference server; :meth:`step` collects ``num_envs`` transitions (in completion
    order, not one per env) and stores them. Workers are parked between calls, so the update may change the actor.
    Timing: ``collect/policy`` is the server's model time, ``collect/env`` the rest of the collection (env steps,
    transport), ``collect/store`` the buffer write.

    Args:
        env_id: Gymnasium id (each worker builds its own single env).
        num_envs: Env workers.
        buffer: Replay buffer with ``add(batch)``.
        policy: ``policy(obs) -> actions`` on a batch of observations (runs in the server thread).
        transport: ``slot``, ``lock``, ``direct`` or ``multiprocess``.
        low: Lower action bounds.
        high: Upper action bounds.
        timer: Phase timer.
        noise: Exploration noise ``noise(actions, step)`` working on any batch size (Gaussian), optional.
        seed: Seed of the warm-up action generator.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        buffer: Any,
        policy: Callable[[np.ndarray], np.ndarray],
        transport: str,
        low: np.ndarray,
        high: np.ndarray,
        timer: PhaseTimer | None = None,
        noise: Any = None,
        seed: int | None = None,
    ) -> None:
        from rlbench.components.collect.batched import AsyncBatchedCollector

        self.buffer, self.policy, self.noise, self.num_envs = buffer, policy, noise, num_envs
        self.timer = timer if timer is not None else NullTimer()
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.rng = np.random.default_rng(seed)
        self.random = False
        self.episodes = EpisodeTracker(num_envs)
        self.env_steps = 0
        self.inner = AsyncBatchedCollector(
            env_id, num_envs, self._act, transport=transport, action_low=self.low, action_high=self.high
        )

    def _act(self, obs: np.ndarray) -> np.ndarray:
        if self.random:
            return self.rng.uniform(self.low, self.high, (obs.shape[0], *self.low.shape)).astype(np.float32)
        actions = self.policy(obs)
        return self.noise(actions, self.env_steps) if self.noise is not None else actions

    def reset(self, seed: int | None = None) -> None:
        """Start the workers (worker ``i``'s env seeded ``seed + i``) and the server."""
        self.inner.start(seed)

    def step(self, random: bool = False) -> None:
        """Collect ``num_envs`` transitions from the workers into the buffer.

        Args:
            random: Uniform random actions in the box (warm-up frames) instead of the policy.
        """
        now, timer = self.timer.now, self.timer
        self.random = random
        forward0 = self.inner.server.forward_seconds()
        t0 = now()
        d = self.inner.collect(self.num_envs)
        t1 = now()
        self.buffer.add(
            {"obs": d["obs"], "action": d["action"], "reward": d["reward"], "next_obs": d["next_obs"], "done": d["terminated"]}
        )
        self.env_steps += self.num_envs
        self.episodes.add_step(d["reward"], d["terminated"] | d["truncated"], self.env_steps, envs=d["worker"])
        t2 = now()
        policy_s = self.inner.server.forward_seconds() - forward0
        timer.add("collect/policy", policy_s)
        timer.add("collect/env", max(0.0, t1 - t0 - policy_s))
        timer.add("collect/store", t2 - t1)

    def close(self) -> None:
        """Stop and join the workers and the server."""
        self.inner.close()

"""Step collection for off-policy methods: N envs stepped together, every transition written to a replay buffer.

Per vector step: actions for all N envs (uniform random during the warm-up frames, else the policy, plus
exploration noise if any), one env step, one buffer ``add`` of N rows. ``next_obs`` is the true next
observation: where an episode ended, the env's ``final_obs`` (not the autoreset observation). ``done`` stores
*terminated* only: a time-limit truncation still bootstraps from ``next_obs``. With an episode-aware buffer
(:class:`~rlbench.components.buffers.TrajectoryReplayBuffer`) each row also gets its env's episode id.

Timing: ``collect/policy``, ``collect/env`` and ``collect/store`` are booked with the timer's boundary clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlbench.components.buffers import TrajectoryReplayBuffer
from rlbench.components.collectors import EpisodeTracker
from rlbench.components.envs.base import VecEnv
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

    def __init__(self, env: VecEnv, buffer: Any, policy: Callable[[np.ndarray], np.ndarray], timer: PhaseTimer | None = None,
                 noise: Any = None, seed: int | None = None) -> None:  # fmt: skip
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
        ep = self.episodes
        ep.running_return += res.reward
        ep.running_length += 1
        if ended.any():  # rare: book finished episodes (stamped with the step count after this step)
            for i in np.flatnonzero(ended).tolist():
                ep.returns.append(float(ep.running_return[i]))
                ep.lengths.append(int(ep.running_length[i]))
                ep.end_steps.append(self.env_steps)
            ep.running_return[ended] = 0.0
            ep.running_length[ended] = 0
        self.obs = res.obs.copy()
        t3 = now()
        timer.add("collect/policy", t1 - t0)
        timer.add("collect/env", t2 - t1)
        timer.add("collect/store", t3 - t2)

"""On-policy rollout collection into preallocated ``(T, N, ...)`` storage.

One policy call per step yields action, log-prob and value for all N envs; the env is stepped once;
results are copied into storage rows allocated once. Truncated episodes are bootstrapped here: the
reward at a truncation step gets ``gamma * V(final_obs)`` added and the step counts as done (see
:mod:`rlbench.components.returns.gae`), so advantage estimators only need ``dones``.

Timing: ``collect/policy`` and ``collect/env`` are booked per step with the timer's boundary clock
(one clock read per event); episode bookkeeping and storage copies land in ``collect`` self time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlbench.components.collect.episodes import EpisodeTracker
from rlbench.components.envs.base import VecEnv
from rlbench.instrument.timers import NullTimer, PhaseTimer


@dataclass
class RolloutStorage:
    """Preallocated arrays for one rollout of ``T`` steps from ``N`` envs.

    Attributes:
        obs: Observation each action was taken from, ``(T, N, *obs_shape)``.
        actions: ``(T, N)`` int64 for discrete actions, ``(T, N, *action_shape)`` float32 otherwise.
        logprobs: Log-probability of each action under the collecting policy, ``(T, N)``.
        values: Value estimates at ``obs``, ``(T, N)``.
        rewards: Rewards, with ``gamma * V(final_obs)`` added at truncation steps, ``(T, N)``.
        dones: True where an episode ended (terminated or truncated) at that step, ``(T, N)``.
        last_obs: Observation after the final step, ``(N, *obs_shape)``.
        last_value: Value at ``last_obs``, ``(N,)``.
    """

    obs: np.ndarray
    actions: np.ndarray
    logprobs: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    last_obs: np.ndarray
    last_value: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    @classmethod
    def allocate(cls, steps: int, num_envs: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...]) -> RolloutStorage:
        """Allocate storage; ``action_shape == ()`` means discrete (int64) actions."""
        tn = (steps, num_envs)
        return cls(
            obs=np.zeros(tn + obs_shape, dtype=np.float32),
            actions=np.zeros(tn + action_shape, dtype=np.int64 if action_shape == () else np.float32),
            logprobs=np.zeros(tn, dtype=np.float32),
            values=np.zeros(tn, dtype=np.float32),
            rewards=np.zeros(tn, dtype=np.float32),
            dones=np.zeros(tn, dtype=bool),
            last_obs=np.zeros((num_envs, *obs_shape), dtype=np.float32),
            last_value=np.zeros(num_envs, dtype=np.float32),
        )


class OnPolicyCollector:
    """Steps a :class:`VecEnv` with a policy and fills a :class:`RolloutStorage`.

    Args:
        env: The vectorized env (same-step autoreset).
        policy: Object with ``act(obs) -> (actions, logprobs, values)`` and ``value(obs)``.
        steps: Rollout length ``T`` per env.
        gamma: Discount, for bootstrapping truncated episodes.
        timer: Phase timer (a :class:`NullTimer` when omitted).
        action_low: Lower bounds actions are clipped to before reaching the env (box actions only;
            storage keeps the unclipped sample, whose log-prob the update needs).
        action_high: Upper bounds, likewise.
    """

    def __init__(
        self,
        env: VecEnv,
        policy,
        steps: int,
        gamma: float,
        timer: PhaseTimer | None = None,
        action_low: np.ndarray | None = None,
        action_high: np.ndarray | None = None,
    ) -> None:
        self.env = env
        self.policy = policy
        self.steps = steps
        self.gamma = np.float32(gamma)
        self.timer = timer if timer is not None else NullTimer()
        spec = env.action_spec
        self.storage = RolloutStorage.allocate(steps, env.num_envs, tuple(env.obs_shape), tuple(spec.shape))
        self.clip = None if spec.kind == "discrete" or action_low is None else (action_low, action_high)
        self.episodes = EpisodeTracker(env.num_envs)
        self.env_steps = 0
        self._obs: np.ndarray | None = None

    def reset(self, seed: int | None) -> None:
        """Reset the envs (sub-env ``i`` seeded with ``seed + i``)."""
        self._obs = np.array(self.env.reset(seed=seed), dtype=np.float32)

    def collect(self) -> RolloutStorage:
        """Run ``T`` steps of every env and return the filled storage (reused on the next call)."""
        if self._obs is None:
            raise RuntimeError("call reset(seed) before collect()")
        st = self.storage
        env, policy, episodes, timer = self.env, self.policy, self.episodes, self.timer
        clip = self.clip
        now = timer.now
        n = env.num_envs
        t_policy = t_env = 0.0
        start_steps = self.env_steps
        truncations = []  # (t, env indices, final observations): bootstrapped after episode accounting
        obs = self._obs
        t_start = now()
        for t in range(self.steps):
            st.obs[t] = obs
            t0 = now()
            actions, logp, value = policy.act(obs)
            t1 = now()
            result = env.step(actions if clip is None else np.clip(actions, clip[0], clip[1]))
            t2 = now()
            t_policy += t1 - t0
            t_env += t2 - t1
            st.actions[t] = actions
            st.logprobs[t] = logp
            st.values[t] = value
            st.rewards[t] = result.reward
            np.logical_or(result.terminated, result.truncated, out=st.dones[t])
            if result.truncated.any():
                idx = np.flatnonzero(result.truncated & ~result.terminated)
                if idx.size:
                    t0 = now()
                    truncations.append((t, idx, policy.value(result.final_obs[idx])))
                    t_policy += now() - t0
            obs = result.obs
        self.env_steps += self.steps * n
        episodes.add_rollout(st.rewards, st.dones, start_steps)
        for t, idx, final_values in truncations:
            st.rewards[t, idx] += self.gamma * final_values
        st.last_obs[:] = obs
        self._obs = st.last_obs.copy()
        t0 = now()
        st.last_value[:] = policy.value(st.last_obs)
        t_end = now()
        t_policy += t_end - t0
        timer.add("collect/policy", t_policy, self.steps + 1)
        timer.add("collect/env", t_env, self.steps)
        timer.add("collect", t_end - t_start, 1)
        return st

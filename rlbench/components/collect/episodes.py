"""Episode accounting shared by every collector: returns and lengths of finished episodes, per agent step."""

from __future__ import annotations

import numpy as np


class EpisodeTracker:
    """Running returns and lengths per env; finished episodes land in ``returns``/``lengths``/``end_steps``.

    Updated once per rollout from the stored rewards and done flags (not per step), so the per-step
    loop carries no bookkeeping.
    """

    def __init__(self, num_envs: int) -> None:
        self.running_return = np.zeros(num_envs, dtype=np.float64)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.end_steps: list[int] = []

    def add_rollout(self, rewards: np.ndarray, dones: np.ndarray, start_steps: int) -> None:
        """Account a rollout of raw ``rewards`` and ``dones``, both ``(T, N)``, that began at global step ``start_steps``.

        An episode ending at step ``t`` is stamped with the global step count after that step,
        ``start_steps + (t + 1) * N``; episodes ending at the same step are listed in env order.
        """
        steps, n = rewards.shape
        cum = np.cumsum(rewards, axis=0, dtype=np.float64)
        ends_t, ends_i = np.nonzero(dones)
        carry_ret, carry_len = self.running_return, self.running_length
        prev_cum = np.zeros(n)
        prev_t = np.full(n, -1, dtype=np.int64)
        for t, i in zip(ends_t.tolist(), ends_i.tolist()):
            c = float(cum[t, i])
            self.returns.append(float(carry_ret[i]) + c - float(prev_cum[i]))
            self.lengths.append(int(carry_len[i]) + t - int(prev_t[i]))
            self.end_steps.append(start_steps + (t + 1) * n)
            carry_ret[i] = 0.0
            carry_len[i] = 0
            prev_cum[i] = c
            prev_t[i] = t
        carry_ret += cum[-1] - prev_cum
        carry_len += steps - 1 - prev_t

    def add_step(self, rewards: np.ndarray, ended: np.ndarray, end_step: int, envs: np.ndarray | None = None) -> None:
        """Account one step's transitions (off-policy collectors: per step, not per rollout).

        Args:
            rewards: Reward of each transition.
            ended: True where that transition ended its env's episode (terminated or truncated).
            end_step: Global agent-step count to stamp finished episodes with.
            envs: Env index of each transition (``None``: transition ``i`` is env ``i``, one per env).
        """
        if envs is None:
            self.running_return += rewards
            self.running_length += 1
            finished = np.flatnonzero(ended)
        else:
            np.add.at(self.running_return, envs, rewards)
            np.add.at(self.running_length, envs, 1)
            finished = envs[ended]
        for i in finished.tolist():  # rare: book finished episodes
            self.returns.append(float(self.running_return[i]))
            self.lengths.append(int(self.running_length[i]))
            self.end_steps.append(end_step)
            self.running_return[i] = 0.0
            self.running_length[i] = 0

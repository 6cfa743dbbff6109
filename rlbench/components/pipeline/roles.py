"""The three roles of the pipeline: Generator (samples G actions per state), Scorer (rewards them), Learner (GRPO).

The Learner's update is group-relative PPO: advantages are each reward minus its group's mean over its group's std
(:func:`~rlbench.components.returns.group.group_advantages_torch`), the policy ratio against the sampling policy is
clipped, and a KL penalty (the k3 estimator, :func:`~rlbench.components.returns.kl.kl_torch`) keeps the policy near
a frozen copy of its initial weights.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from rlbench.components.pipeline.policy import FlatPolicy
from rlbench.components.pipeline.slices import TrajectorySlice
from rlbench.components.pipeline.task import BanditTask
from rlbench.components.returns.group import group_advantages_torch
from rlbench.components.returns.kl import kl_torch


class Generator:
    """Samples ``group_size`` actions for each of ``batch_states`` fresh states with its copy of the policy.

    Args:
        task: The bandit.
        policy: This generator's policy copy (weights arrive through :meth:`load`).
        group_size: G, actions sampled per state.
        batch_states: States per slice.
        index: This generator's number (recorded in its slices).
        seed: Seed of its states and samples.
    """

    def __init__(
        self, task: BanditTask, policy: FlatPolicy, group_size: int, batch_states: int, index: int = 0, seed: int = 0
    ) -> None:
        if group_size < 2 or batch_states < 1:
            raise ValueError(
                f"need group_size >= 2 (a group needs a spread) and batch_states >= 1, got {group_size}, {batch_states}"
            )
        self.task, self.policy, self.group_size, self.batch_states, self.index = task, policy, group_size, batch_states, index
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.version = 0

    def load(self, weights: np.ndarray, version: int) -> None:
        """Take the learner's weights of ``version``."""
        self.policy.load(weights)
        self.version = version

    def generate(self) -> TrajectorySlice:
        """One slice: fresh states, G sampled actions each, and their log-probabilities."""
        states = self.task.states(self.batch_states, self.rng)
        with torch.no_grad():
            logp_all = self.policy.log_probs(torch.from_numpy(states))
            actions = torch.multinomial(logp_all.exp(), self.group_size, replacement=True, generator=self.gen)
            logps = logp_all.gather(1, actions)
        return TrajectorySlice(
            version=self.version,
            states=states,
            actions=actions.numpy(),
            logps=logps.numpy(),
            rewards=np.zeros(actions.shape, np.float32),
            generator=self.index,
        )


def burn(seconds: float) -> None:
    """Busy the CPU for ``seconds`` (a stand-in for a reward model's compute), in small matrix products."""
    if seconds <= 0:
        return
    deadline = time.perf_counter() + seconds
    a = np.ones((32, 32), np.float32)
    while time.perf_counter() < deadline:
        a = np.tanh(a @ a * np.float32(1e-3))


class Scorer:
    """Rewards a slice's actions (the task knows the best action), spending ``cost_s`` of compute per slice.

    Args:
        task: The bandit.
        cost_s: Extra busy time per slice, to model an expensive reward model.
    """

    def __init__(self, task: BanditTask, cost_s: float = 0.0) -> None:
        self.task, self.cost_s = task, cost_s

    def score(self, s: TrajectorySlice) -> TrajectorySlice:
        """Fill ``s.rewards`` and return the slice."""
        s.rewards = self.task.rewards(s.states, s.actions)
        burn(self.cost_s)
        return s


class Learner:
    """Group-relative PPO with a KL penalty to a frozen reference (the initial weights).

    Args:
        task: The bandit (for the greedy evaluation).
        policy: The policy being trained.
        lr: Adam learning rate.
        clip: PPO clipping range of the ratio.
        kl_coef: Weight of the KL penalty to the reference.
        seed: Seed of the evaluation states.
    """

    def __init__(
        self, task: BanditTask, policy: FlatPolicy, lr: float = 3e-3, clip: float = 0.2, kl_coef: float = 0.01, seed: int = 0
    ) -> None:
        self.task, self.policy, self.clip, self.kl_coef = task, policy, clip, kl_coef
        self.reference = FlatPolicy.__new__(FlatPolicy)
        self.reference.net = _frozen_copy(policy.net)
        self.optimizer = torch.optim.Adam(policy.net.parameters(), lr=lr)
        self.version = 0
        self.eval_rng = np.random.default_rng(seed + 10_007)

    def update(self, slices: list[TrajectorySlice]) -> dict[str, Any]:
        """One gradient step on ``slices``; the policy version goes up by one.

        Returns:
            ``loss``, ``kl``, ``reward`` (mean reward of the batch), ``samples`` and ``lags`` (versions behind the
            learner of each slice, before this update).
        """
        states = torch.from_numpy(np.concatenate([s.states for s in slices]))
        actions = torch.from_numpy(np.concatenate([s.actions for s in slices]))
        old_logps = torch.from_numpy(np.concatenate([s.logps for s in slices]))
        rewards = torch.from_numpy(np.concatenate([s.rewards for s in slices]))
        adv = group_advantages_torch(rewards)
        logps = self.policy.log_probs(states).gather(1, actions)
        ratio = torch.exp(logps - old_logps)
        pg = -torch.min(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv).mean()
        with torch.no_grad():
            ref_logps = torch.log_softmax(self.reference.net(states), dim=-1).gather(1, actions)
        kl = kl_torch(logps, ref_logps, torch.ones_like(logps, dtype=torch.bool), "k3").batch_mean
        loss = pg + self.kl_coef * kl
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        lags = [self.version - s.version for s in slices]
        self.version += 1
        return {
            "loss": float(loss.detach()),
            "kl": float(kl.detach()),
            "reward": float(rewards.mean()),
            "samples": int(actions.numel()),
            "lags": lags,
        }

    def greedy_reward(self, n: int = 2048) -> float:
        """Mean reward of the greedy policy (argmax) on ``n`` fresh states."""
        states = self.task.states(n, self.eval_rng)
        with torch.no_grad():
            greedy = self.policy.net(torch.from_numpy(states)).argmax(dim=1).numpy()
        return float(self.task.rewards(states, greedy).mean())


def _frozen_copy(net: torch.nn.Module) -> torch.nn.Module:
    import copy

    ref = copy.deepcopy(net)
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref.eval()

"""SAC and DDPG actually learn Pendulum: fixed seeds, seconds, an eval return far above a random policy's."""

from __future__ import annotations

import numpy as np
import pytest

from rlbench.algos.offpolicy.config import DDPGConfig, SACConfig
from rlbench.algos.offpolicy.train import train_offpolicy
from rlbench.algos.scaffold import evaluate_policy

# small and quick: 64-unit MLPs, batch 64, learning rate 3e-3, 2,500 steps (2,200 updates)
QUICK = {
    "total_steps": 2_500,
    "learning_starts": 300,
    "batch_size": 64,
    "hidden": (64, 64),
    "actor_lr": 3e-3,
    "critic_lr": 3e-3,
    "eval_episodes": 5,
    "threads": 1,
}


def _random_return() -> float:
    class RandomPolicy:
        rng = np.random.default_rng(0)

        def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
            return self.rng.uniform(-2.0, 2.0, (obs.shape[0], 1)).astype(np.float32)

    return float(np.mean(evaluate_policy(RandomPolicy(), "Pendulum-v1", 5, seed=10_000)))


def test_random_baseline_is_low() -> None:
    assert _random_return() < -1000  # uniform random torques never swing the pendulum up


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "note"),
    [
        # measured on the reference machine with these settings: SAC seeds 0-2 reached -584, -244, -380;
        # DDPG seeds 0-2 -626, -293, -352; the random policy scores -1,122 on the same evaluation episodes
        (SACConfig(**QUICK, alpha_lr=3e-3, seed=2), "sac"),
        (DDPGConfig(**QUICK, anneal_steps=2_500, seed=1), "ddpg"),
    ],
)
def test_offpolicy_learns_pendulum_in_seconds(config, note: str) -> None:
    result = train_offpolicy(config)
    evals, random = float(np.mean(result.eval_returns)), _random_return()
    assert evals > random + 300, f"{note}: eval return {evals:.0f} vs random policy {random:.0f}"
    assert result.env_steps == 2_500 and result.updates == 2_200 and result.completed


@pytest.mark.slow
def test_sac_learns_the_same_through_the_async_collector() -> None:
    """Four env workers behind the slot transport feed SAC, and it learns (thread timing makes runs differ, not bitwise).

    At 4,000 steps, seeds 0-4 measured -127, -345, -174, -152, -150 on the reference machine, but a CI run on a loaded
    2-core VM ended at -832 (the threads' timing changes what the actors collect); at 2,500 steps they were -359 to
    -926. At 6,000 steps seed 2 scored -148 in 14 s here. The random policy scores -1,122.
    """
    config = SACConfig(**{**QUICK, "total_steps": 6_000}, alpha_lr=3e-3, seed=2, num_envs=4, collector="async")
    result = train_offpolicy(config)
    evals, random = float(np.mean(result.eval_returns)), _random_return()
    assert evals > random + 400, f"async sac: eval return {evals:.0f} vs random policy {random:.0f}"
    assert result.env_steps == 6_000 and len(result.episode_returns) >= 24

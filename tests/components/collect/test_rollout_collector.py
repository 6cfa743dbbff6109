"""The on-policy collector fills (T, N) storage correctly and bootstraps truncated episodes."""

from __future__ import annotations

import numpy as np
import pytest

from rlbench.components.collect.rollout import OnPolicyCollector
from rlbench.components.envs.base import ActionSpec, StepResult
from rlbench.instrument.timers import PhaseTimer


class CountingEnv:
    """obs = [step count of the env]; episodes last `length[i]` steps, ended by truncation or termination."""

    def __init__(self, lengths: list[int], truncate: list[bool]) -> None:
        self.num_envs = len(lengths)
        self.obs_shape = (1,)
        self.action_spec = ActionSpec("discrete", n=2)
        self.lengths = np.array(lengths)
        self.truncate = np.array(truncate)
        self.t = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.t[:] = 0
        return self.t[:, None].astype(np.float32)

    def step(self, actions: np.ndarray) -> StepResult:
        self.t += 1
        ended = self.t >= self.lengths
        final = self.t[:, None].astype(np.float32)
        self.t[ended] = 0
        return StepResult(
            self.t[:, None].astype(np.float32),
            np.ones(self.num_envs, np.float32) * (actions + 1),
            ended & ~self.truncate,
            ended & self.truncate,
            final,
        )

    def close(self) -> None:
        pass


class LinearValuePolicy:
    """Deterministic stand-in: action 1 always, log-prob -0.5, value = 10 * obs."""

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = obs.shape[0]
        return np.ones(n, np.int64), np.full(n, -0.5, np.float32), 10 * obs[:, 0]

    def value(self, obs: np.ndarray) -> np.ndarray:
        return 10 * obs[:, 0]


def test_storage_layout_and_truncation_bootstrap() -> None:
    env = CountingEnv([3, 4], truncate=[True, False])
    timer = PhaseTimer()
    c = OnPolicyCollector(env, LinearValuePolicy(), steps=6, gamma=0.5, timer=timer)
    c.reset(seed=0)
    st = c.collect()
    np.testing.assert_array_equal(st.obs[:, 0, 0], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(st.obs[:, 1, 0], [0, 1, 2, 3, 0, 1])
    np.testing.assert_array_equal(st.dones[:, 0], [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(st.dones[:, 1], [0, 0, 0, 1, 0, 0])
    # env 0 truncates at t=2 and 5 with final obs 3: reward 2 + gamma * V(3) = 2 + 0.5 * 30
    np.testing.assert_allclose(st.rewards[:, 0], [2, 2, 17, 2, 2, 17])
    # env 1 terminates: no bootstrap
    np.testing.assert_allclose(st.rewards[:, 1], [2, 2, 2, 2, 2, 2])
    np.testing.assert_allclose(st.values[:, 1], 10 * st.obs[:, 1, 0])
    np.testing.assert_array_equal(st.last_obs[:, 0], [0, 2])
    np.testing.assert_allclose(st.last_value, [0, 20])
    assert c.env_steps == 12
    assert c.episodes.returns == [6.0, 8.0, 6.0]  # raw rewards, bootstrap excluded
    assert c.episodes.end_steps == [6, 8, 12]
    assert timer.counts["collect/env"] == 6 and timer.counts["collect/policy"] == 7
    assert timer.seconds["collect"] >= timer.seconds["collect/env"] + timer.seconds["collect/policy"]


def test_collect_requires_reset() -> None:
    c = OnPolicyCollector(CountingEnv([2], [False]), LinearValuePolicy(), steps=2, gamma=0.9)
    with pytest.raises(RuntimeError, match="reset"):
        c.collect()


def test_episode_tracker_matches_per_step_reference() -> None:
    """Rollout-at-once accounting equals stepping through rewards one step at a time, across rollouts."""
    from rlbench.components.collect.episodes import EpisodeTracker

    rng = np.random.default_rng(0)
    n, steps = 5, 40
    tracker = EpisodeTracker(n)
    ref_running, ref_len = np.zeros(n), np.zeros(n, dtype=int)
    ref: list[tuple[float, int, int]] = []
    total = 0
    for _ in range(4):
        rewards = rng.standard_normal((steps, n)).astype(np.float32)
        dones = rng.random((steps, n)) < 0.08
        tracker.add_rollout(rewards, dones, total)
        for t in range(steps):
            total += n
            ref_running += rewards[t]
            ref_len += 1
            for i in np.flatnonzero(dones[t]):
                ref.append((ref_running[i], ref_len[i], total))
                ref_running[i], ref_len[i] = 0.0, 0
    assert len(ref) > 20
    np.testing.assert_allclose(tracker.returns, [r[0] for r in ref], rtol=1e-5, atol=1e-5)
    assert tracker.lengths == [r[1] for r in ref]
    assert tracker.end_steps == [r[2] for r in ref]
    np.testing.assert_allclose(tracker.running_return, ref_running, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(tracker.running_length, ref_len)

"""Off-policy collection: true next observations at episode ends, terminated-only done flags, episode ids, noise."""

from __future__ import annotations

import numpy as np
import pytest

from rlbench.components.collect.exploration import GaussianNoise, OrnsteinUhlenbeckNoise
from rlbench.components.collect.steps import OffPolicyCollector
from rlbench.components.envs import make_vec_env
from rlbench.components.replay import TrajectoryReplayBuffer, UniformReplayBuffer


def _zero_policy(obs: np.ndarray) -> np.ndarray:
    return np.zeros((obs.shape[0], 1), np.float32)


def test_next_obs_is_the_final_observation_and_done_means_terminated() -> None:
    env = make_vec_env("Pendulum-v1", 3)  # 200-step time limit: truncation, never termination
    buf = UniformReplayBuffer(1000, env.obs_shape, (1,), seed=0)
    col = OffPolicyCollector(env, buf, _zero_policy, seed=0)
    col.reset(seed=0)
    for _ in range(205):
        col.step(random=False)
    assert col.env_steps == 615 and len(buf) == 615
    obs, nxt, done = (np.asarray(buf.storage[k][:615]) for k in ("obs", "next_obs", "done"))
    assert not done.any()  # truncation bootstraps: not stored as done
    # within an episode, next_obs of step t is obs of step t+1 (rows are step-major: row = 3 * t + env)
    same = nxt.reshape(205, 3, -1)[:-1] == obs.reshape(205, 3, -1)[1:]
    boundary = same.all(-1)
    assert boundary[:199].all() and not boundary[199].any()  # step 199 ended every episode: reset obs differs
    assert len(col.episodes.returns) == 3 and all(r < 0 for r in col.episodes.returns)
    # the stored final observation continues the dynamics: cos^2 + sin^2 = 1 and it is not the reset observation
    final = nxt.reshape(205, 3, -1)[199]
    np.testing.assert_allclose(final[:, 0] ** 2 + final[:, 1] ** 2, 1.0, rtol=1e-5)


def test_trajectory_buffer_gets_one_episode_id_per_env_episode() -> None:
    env = make_vec_env("Pendulum-v1", 1)
    buf = TrajectoryReplayBuffer(1000, env.obs_shape, (1,), seed=0)
    col = OffPolicyCollector(env, buf, _zero_policy, seed=0)
    col.reset(seed=1)
    for _ in range(450):
        col.step(random=True)
    ids = buf.episodes[:450]
    assert list(np.unique(ids)) == [0, 1, 2]
    assert (ids[:200] == 0).all() and (ids[200:400] == 1).all() and (ids[400:] == 2).all()
    crops = buf.sample_slices(64, 8)
    assert (crops["episode"] == crops["episode"][:, :1]).all()


def test_random_warmup_actions_cover_the_box() -> None:
    env = make_vec_env("Pendulum-v1", 4)
    buf = UniformReplayBuffer(2000, env.obs_shape, (1,), seed=0)
    col = OffPolicyCollector(env, buf, _zero_policy, seed=3)
    col.reset(seed=0)
    for _ in range(250):
        col.step(random=True)
    a = np.asarray(buf.storage["action"][:1000])
    assert a.min() >= -2.0 and a.max() <= 2.0 and a.min() < -1.9 and a.max() > 1.9
    assert abs(a.mean()) < 0.15


def test_discrete_envs_are_refused() -> None:
    env = make_vec_env("CartPole-v1", 2)
    with pytest.raises(ValueError, match="continuous"):
        OffPolicyCollector(env, UniformReplayBuffer(10, env.obs_shape, (), seed=0), _zero_policy)


def test_gaussian_noise_anneals_linearly_and_stays_in_the_box() -> None:
    low, high = np.array([-2.0], np.float32), np.array([2.0], np.float32)
    noise = GaussianNoise(1000, low, high, sigma_init=0.5, sigma_end=0.1, anneal_steps=100, seed=0)
    assert noise.sigma(0) == 0.5 and noise.sigma(50) == pytest.approx(0.3) and noise.sigma(10_000) == pytest.approx(0.1)
    zeros = np.zeros((1000, 1), np.float32)
    early, late = noise(zeros, 0), noise(zeros, 200)
    assert early.std() == pytest.approx(0.5 * 2.0, rel=0.1)  # scale times the half-range
    assert late.std() == pytest.approx(0.1 * 2.0, rel=0.1)
    big = noise(np.full((1000, 1), 1.9, np.float32), 0)
    assert big.max() <= 2.0 and big.min() >= -2.0


def test_ou_noise_is_correlated_and_resets_per_env() -> None:
    low, high = np.array([-1.0], np.float32), np.array([1.0], np.float32)
    noise = OrnsteinUhlenbeckNoise(2, low, high, sigma_init=0.3, seed=0)
    xs = np.array([noise(np.zeros((2, 1), np.float32), t)[:, 0] for t in range(2000)])
    lag1 = np.corrcoef(xs[:-1, 0], xs[1:, 0])[0, 1]
    assert lag1 > 0.9  # temporally correlated, unlike independent Gaussian noise
    noise.reset(np.array([True, False]))
    assert noise.state[0, 0] == 0.0 and noise.state[1, 0] != 0.0

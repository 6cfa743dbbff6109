"""NumpyPendulumVecEnv reproduces gymnasium's Pendulum-v1 (sync vector env, same-step autoreset) bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlbench.components.envs import make_vec_env
from rlbench.components.envs import pendulum as pendulum_module
from rlbench.components.envs.base import VecEnv
from rlbench.components.envs.pendulum import NumpyPendulumVecEnv


def gym_pendulum(num_envs: int, **kwargs: object) -> gym.vector.VectorEnv:
    return gym.make_vec(
        "Pendulum-v1",
        num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **kwargs,
    )


def gym_state(ref: gym.vector.VectorEnv) -> np.ndarray:
    return np.stack([e.unwrapped.state for e in ref.envs])


def run_lockstep(num_envs: int, steps: int, seed: int, dtypes: tuple[type, ...], **kwargs: object) -> int:
    """Step both implementations with the same random torques (a third of them out of [-2, 2], so clipped),
    cycling through ``dtypes``, asserting identical outputs at every step; returns the number of truncation steps.
    Mid-run resets, unseeded then seeded, are compared too."""
    ref = gym_pendulum(num_envs, **kwargs)
    env = NumpyPendulumVecEnv(num_envs, **kwargs)
    rng = np.random.default_rng(seed)
    ref_obs, _ = ref.reset(seed=seed)
    obs = env.reset(seed=seed)
    assert obs.dtype == np.float32 and obs.shape == (num_envs, 3) and np.array_equal(obs, ref_obs)
    assert np.array_equal(env.state, gym_state(ref))
    truncations = 0
    for t in range(steps):
        if t in (steps // 3, 2 * steps // 3):  # unseeded: both continue their per-env generators; then reseeded
            reseed = None if t == steps // 3 else seed + 1
            ref_obs, _ = ref.reset(seed=reseed)
            assert np.array_equal(env.reset(seed=reseed), ref_obs)
        actions = rng.uniform(-3.0, 3.0, (num_envs, 1)).astype(dtypes[t % len(dtypes)])
        ref_obs, ref_rew, ref_term, ref_trunc, info = ref.step(actions)
        res = env.step(actions)
        assert np.array_equal(res.obs, ref_obs), t
        assert np.array_equal(env.state, gym_state(ref)), t  # the float64 state too
        assert res.reward.dtype == np.float32 and np.array_equal(res.reward, ref_rew.astype(np.float32)), t
        assert np.array_equal(env.reward_float64, ref_rew), t  # before rounding: catches last-bit differences
        assert np.array_equal(res.terminated, ref_term) and not res.terminated.any()
        assert np.array_equal(res.truncated, ref_trunc), t
        if ref_trunc.any():
            assert ref_trunc.all() and np.array_equal(info["_final_obs"], ref_trunc)
            assert np.array_equal(res.final_obs, np.stack(list(info["final_obs"]))), t
            truncations += 1
    ref.close()
    return truncations


def test_matches_gymnasium_over_several_truncations() -> None:
    # 8 envs x 1300 steps = 10400 random torques; the mid-run resets restart the 200-step clock.
    assert run_lockstep(8, 1300, seed=3, dtypes=(np.float32, np.float64)) >= 4


def test_matches_gymnasium_with_short_episodes_and_integer_torques() -> None:
    assert run_lockstep(5, 120, seed=11, dtypes=(np.float32, np.int64, np.float64), max_episode_steps=9) >= 10


def test_scalar_fallbacks_match_gymnasium(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a vectorized shortcut is not exact on some machine, the env applies gymnasium's scalar operations."""
    monkeypatch.setattr(pendulum_module, "_exact_paths", lambda: pendulum_module._Exact(False, False, False, False))
    monkeypatch.setattr(pendulum_module, "_fused_step", lambda: None)
    assert run_lockstep(3, 230, seed=5, dtypes=(np.float32, np.float64), max_episode_steps=30) == 6


def test_fast_paths_are_exact_here() -> None:
    # Not required for correctness (there are fallbacks), but the speed of the env depends on them.
    assert all(pendulum_module._exact_paths()) and pendulum_module._fused_step() is not None


def test_protocol_spaces_and_make_vec_env() -> None:
    env = make_vec_env("Pendulum-v1", 4)
    assert isinstance(env, NumpyPendulumVecEnv) and isinstance(env, VecEnv)
    assert isinstance(make_vec_env("Pendulum-v1", 2, backend="numpy"), NumpyPendulumVecEnv)
    assert env.num_envs == 4 and env.obs_shape == (3,) and env.max_episode_steps == 200
    spec = env.action_spec
    assert spec.kind == "box" and spec.shape == (1,)
    assert np.array_equal(spec.low, [-2.0]) and np.array_equal(spec.high, [2.0]) and spec.low.dtype == np.float32
    space = gym.make("Pendulum-v1").action_space
    assert np.array_equal(space.low, spec.low) and np.array_equal(space.high, spec.high)
    assert "num_envs=4" in repr(env)
    env.close()


def test_flat_actions_and_validation() -> None:
    a, b = NumpyPendulumVecEnv(3), NumpyPendulumVecEnv(3)
    with pytest.raises(RuntimeError, match="reset"):
        a.step(np.zeros((3, 1), dtype=np.float32))
    a.reset(seed=0)
    b.reset(seed=0)
    torques = np.array([0.5, -2.5, 1.0], dtype=np.float32)
    assert np.array_equal(a.step(torques).obs, b.step(torques[:, None]).obs)  # (N,) is accepted as (N, 1)
    with pytest.raises(ValueError, match="shape"):
        a.step(np.zeros((2, 1), dtype=np.float32))
    with pytest.raises(ValueError, match="numeric"):
        a.step(np.array([["x"], ["y"], ["z"]]))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            NumpyPendulumVecEnv(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        a.reset(seed=-1)

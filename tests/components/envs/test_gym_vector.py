"""GymnasiumVecEnv adapts any gymnasium id to the VecEnv protocol; make_vec_env picks the backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlbench.components.envs import GymnasiumVecEnv, NumpyCartPoleVecEnv, VecEnv, make_vec_env
from rlbench.components.envs.gym_vector import action_spec_from_space, obs_shape_from_space


def test_cartpole_adapter_agrees_with_numpy_cartpole() -> None:
    env = GymnasiumVecEnv("CartPole-v1", 4)
    fast = NumpyCartPoleVecEnv(4)
    assert isinstance(env, VecEnv)
    assert env.obs_shape == (4,) and env.action_spec.kind == "discrete" and env.action_spec.n == 2
    obs = env.reset(seed=7)
    assert obs.dtype == np.float32 and np.array_equal(obs, fast.reset(seed=7))
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(150):
        actions = rng.integers(0, 2, 4)
        a, b = env.step(actions), fast.step(actions)
        for name in ("obs", "reward", "terminated", "truncated"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        done = a.terminated | a.truncated
        assert np.array_equal(a.final_obs[done], b.final_obs[done])
        ended += int(done.sum())
    assert ended > 10
    env.close()


def test_pendulum_box_actions_and_final_obs_on_truncation() -> None:
    env = GymnasiumVecEnv("Pendulum-v1", 2, max_episode_steps=50)
    spec = env.action_spec
    assert spec.kind == "box" and spec.shape == (1,) and env.obs_shape == (3,)
    assert np.array_equal(spec.low, [-2.0]) and np.array_equal(spec.high, [2.0])
    singles = [gym.make("Pendulum-v1", max_episode_steps=50) for _ in range(2)]
    obs = env.reset(seed=3)
    assert obs.dtype == np.float32
    assert np.allclose(obs, [s.reset(seed=3 + i)[0] for i, s in enumerate(singles)])
    actions = np.linspace(-2, 2, 2 * 50, dtype=np.float32).reshape(50, 2, 1)
    for t in range(50):
        res = env.step(actions[t])
        steps = [s.step(actions[t, i]) for i, s in enumerate(singles)]
        assert res.obs.dtype == np.float32 and res.reward.dtype == np.float32
        assert not res.terminated.any()
        assert res.truncated.all() == (t == 49)
        assert np.allclose(res.reward, [s[1] for s in steps])
    # Truncated at step 50: final_obs is the last observation, obs the reset one (continuing generator).
    assert np.allclose(res.final_obs, [s[0] for s in steps])
    assert np.allclose(res.obs, [s.reset()[0] for s in singles])
    env.close()


@pytest.mark.slow
def test_async_vectorization() -> None:
    env = GymnasiumVecEnv("CartPole-v1", 2, vectorization="async")
    try:
        fast = NumpyCartPoleVecEnv(2)
        assert np.array_equal(env.reset(seed=1), fast.reset(seed=1))
        for t in range(40):
            actions = np.array([t % 2, 1])
            assert np.array_equal(env.step(actions).obs, fast.step(actions).obs)
    finally:
        env.close()


def test_unknown_id_suggests_close_registered_ids() -> None:
    with pytest.raises(ValueError, match=r"unknown gymnasium env id 'CartPol-v1'.*Did you mean: CartPole-v1"):
        GymnasiumVecEnv("CartPol-v1", 2)
    with pytest.raises(ValueError, match="Did you mean: Pendulum-v1"):
        make_vec_env("pendulum-v1", 2)
    with pytest.raises(ValueError, match="unknown gymnasium env id 'NoSuchThing-v9'"):
        GymnasiumVecEnv("NoSuchThing-v9", 1)


def test_unsupported_spaces_are_rejected_with_what_is_supported() -> None:
    with pytest.raises(ValueError, match=r"MultiDiscrete.*Discrete and Box"):
        action_spec_from_space(gym.spaces.MultiDiscrete([2, 3]))
    with pytest.raises(ValueError, match=r"observation space Discrete\(16\).*Box"):
        obs_shape_from_space(gym.spaces.Discrete(16))
    with pytest.raises(ValueError, match=r"observation space Discrete\(16\).*Box"):
        GymnasiumVecEnv("FrozenLake-v1", 1)


def test_invalid_arguments_and_actions() -> None:
    with pytest.raises(ValueError, match="vectorization"):
        GymnasiumVecEnv("CartPole-v1", 2, vectorization="threads")
    with pytest.raises(ValueError, match="num_envs"):
        GymnasiumVecEnv("CartPole-v1", 0)
    env = GymnasiumVecEnv("CartPole-v1", 2)
    env.reset(seed=0)
    for bad, match in ((np.array([0, 2]), r"0\.\.1"), (np.array([0]), "shape"), (np.array([0.0, 1.0]), "integers")):
        with pytest.raises(ValueError, match=match):
            env.step(bad)
    env.close()


def test_make_vec_env_backends() -> None:
    assert isinstance(make_vec_env("CartPole-v1", 2), NumpyCartPoleVecEnv)
    assert isinstance(make_vec_env("CartPole-v1", 2, backend="numpy"), NumpyCartPoleVecEnv)
    sync = make_vec_env("CartPole-v1", 2, backend="sync")
    assert isinstance(sync, GymnasiumVecEnv) and sync.vectorization == "sync"
    sync.close()
    other = make_vec_env("Acrobot-v1", 2)
    assert isinstance(other, GymnasiumVecEnv) and other.action_spec.n == 3
    other.close()
    with pytest.raises(ValueError, match="'numpy' env backend implements only"):
        make_vec_env("Acrobot-v1", 2, backend="numpy")
    with pytest.raises(ValueError, match="unknown env backend 'jax'"):
        make_vec_env("CartPole-v1", 2, backend="jax")


@pytest.mark.slow
def test_importing_the_env_package_does_not_import_gymnasium() -> None:
    code = (
        "import sys\n"
        "import rlbench.components.envs as envs\n"
        "envs.make_vec_env('CartPole-v1', 2).reset(seed=0)\n"
        "assert 'gymnasium' not in sys.modules, 'gymnasium imported eagerly'\n"
        "envs.GymnasiumVecEnv('Pendulum-v1', 1).close()\n"
        "assert 'gymnasium' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])

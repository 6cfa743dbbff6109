"""NumpyCartPoleVecEnv reproduces gymnasium's CartPole-v1 (sync vector env, same-step autoreset) bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlbench.components.envs import cartpole, cartpole_kernels
from rlbench.components.envs.base import ActionSpec, VecEnv
from rlbench.components.envs.cartpole import NumpyCartPoleVecEnv


def gym_cartpole(num_envs: int, **kwargs: object) -> gym.vector.VectorEnv:
    return gym.make_vec(
        "CartPole-v1",
        num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        **kwargs,
    )


def balancing_actions(obs: np.ndarray) -> np.ndarray:
    """A linear controller on (x_dot, theta, theta_dot) that keeps the pole up for 500+ steps."""
    return (0.1 * obs[:, 1] + 10.0 * obs[:, 2] + 2.0 * obs[:, 3] > 0).astype(np.int64)


def run_lockstep(
    num_envs: int, steps: int, seed: int, controlled: np.ndarray, kernel: str = "numpy", **kwargs: object
) -> dict[str, int]:
    """Step both implementations with the same actions, asserting identical outputs at every step.

    Sub-envs where ``controlled`` is set follow the balancing controller (with 1% random actions),
    the others act uniformly at random. Mid-run resets (seeded and unseeded) are compared too.
    """
    ref = gym_cartpole(num_envs, **kwargs)
    env = NumpyCartPoleVecEnv(num_envs, kernel=kernel, **kwargs)  # type: ignore[arg-type]
    assert env.kernel == kernel
    rng = np.random.default_rng(seed)
    ref_obs, _ = ref.reset(seed=seed)
    obs = env.reset(seed=seed)
    assert obs.dtype == np.float32 and np.array_equal(obs, ref_obs)
    assert np.array_equal(env.state, np.stack([e.unwrapped.state for e in ref.envs]))
    counts = {"terminated": 0, "truncated": 0, "both": 0}
    for t in range(steps):
        if t == steps // 2:  # unseeded reset: both continue their per-env generators
            ref_obs, _ = ref.reset()
            assert np.array_equal(env.reset(), ref_obs)
        actions = np.where(
            controlled & (rng.random(num_envs) > 0.01), balancing_actions(ref_obs), rng.integers(0, 2, num_envs)
        )
        ref_obs, ref_rew, ref_term, ref_trunc, info = ref.step(actions)
        res = env.step(actions)
        assert np.array_equal(res.obs, ref_obs), t
        assert np.array_equal(env.state, np.stack([e.unwrapped.state for e in ref.envs])), t  # float64 too
        assert np.array_equal(res.reward, ref_rew) and res.reward.dtype == np.float32
        assert np.array_equal(res.terminated, ref_term), t
        assert np.array_equal(res.truncated, ref_trunc), t
        ended = ref_term | ref_trunc
        if ended.any():
            assert np.array_equal(info["_final_obs"], ended)
            expected_final = np.stack([info["final_obs"][i] for i in np.flatnonzero(ended)])
            assert np.array_equal(res.final_obs[ended], expected_final), t
        counts["terminated"] += int(ref_term.sum())
        counts["truncated"] += int(ref_trunc.sum())
        counts["both"] += int((ref_term & ref_trunc).sum())
    ref.close()
    return counts


def test_matches_gymnasium_with_terminations_and_truncations_at_500() -> None:
    controlled = np.arange(8) % 2 == 0
    counts = run_lockstep(8, 2200, seed=3, controlled=controlled)
    assert counts["terminated"] > 200
    assert counts["truncated"] >= 4  # controlled episodes reach the 500-step limit


def test_matches_gymnasium_when_termination_and_truncation_coincide() -> None:
    # With a 20-step limit some random episodes terminate exactly at step 20: TimeLimit sets both flags.
    counts = run_lockstep(16, 600, seed=11, controlled=np.zeros(16, dtype=bool), max_episode_steps=20)
    assert counts["both"] > 0 and counts["truncated"] > counts["both"] and counts["terminated"] > 100


def test_exact_without_the_vectorized_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fallbacks used where array trig or the affine uniform draw would not be bit-exact.
    monkeypatch.setattr(cartpole_kernels, "_fast_paths", (False, False))
    counts = run_lockstep(4, 300, seed=5, controlled=np.array([True, False, False, False]))
    assert counts["terminated"] > 10


def test_vectorized_shortcuts_are_exact_here() -> None:
    assert cartpole_kernels._fast_paths_are_exact() == (True, True)


def test_reset_matches_gymnasium_seeding_per_sub_env() -> None:
    env = NumpyCartPoleVecEnv(3)
    obs = env.reset(seed=42)
    for i in range(3):
        single, _ = gym.make("CartPole-v1").reset(seed=42 + i)
        assert np.array_equal(obs[i], single)
    assert np.all(np.abs(obs) <= 0.05)


def test_protocol_and_specs() -> None:
    env = NumpyCartPoleVecEnv(5)
    assert isinstance(env, VecEnv)
    assert env.num_envs == 5 and env.obs_shape == (4,)
    assert env.action_spec == ActionSpec("discrete", n=2)
    obs = env.reset(seed=0)
    assert obs.shape == (5, 4) and obs.dtype == np.float32 and obs.flags.c_contiguous
    res = env.step(np.ones(5, dtype=np.int64))
    assert res.obs.shape == (5, 4) and res.final_obs.shape == (5, 4)
    assert res.reward.dtype == np.float32 and res.terminated.dtype == np.bool_ and res.truncated.dtype == np.bool_


def test_other_integer_dtypes_and_array_likes_give_the_same_transitions() -> None:
    a, b = NumpyCartPoleVecEnv(4), NumpyCartPoleVecEnv(4)
    a.reset(seed=1)
    b.reset(seed=1)
    for t in range(100):
        actions = np.array([t % 2, 1, 0, (t // 3) % 2])
        ra = a.step(actions.astype(np.int64))
        rb = b.step(actions.astype(np.uint8) if t % 2 else actions.tolist())
        assert np.array_equal(ra.obs, rb.obs) and np.array_equal(ra.terminated, rb.terminated)


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        (np.array([0, 1, 2]), "0 or 1"),
        (np.array([0, -1, 1]), "0 or 1"),
        (np.array([0, 1, 1 << 40]), "0 or 1"),
        (np.array([0, 1], dtype=np.int64), "shape"),
        (np.zeros((3, 1), dtype=np.int64), "shape"),
        (np.array([0.0, 1.0, 0.0]), "integers"),
        (np.array([True, False, True]), "integers"),
    ],
)
def test_invalid_actions_raise_value_error(actions: np.ndarray, match: str) -> None:
    env = NumpyCartPoleVecEnv(3)
    env.reset(seed=0)
    before = env.step(np.zeros(3, dtype=np.int64)).obs.copy()
    with pytest.raises(ValueError, match=match):
        env.step(actions)
    assert np.array_equal(env._obs, before)  # nothing was stepped


def test_step_before_reset_and_bad_arguments() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        NumpyCartPoleVecEnv(2).step(np.zeros(2, dtype=np.int64))
    for kwargs in ({"num_envs": 0}, {"num_envs": 2, "max_episode_steps": 0}, {"num_envs": 2.0}):
        with pytest.raises(ValueError, match="positive integer"):
            NumpyCartPoleVecEnv(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        NumpyCartPoleVecEnv(2).reset(seed=-1)


numba_only = pytest.mark.skipif(cartpole._numba_kernel() is None, reason="numba missing or not bit-exact here")


@numba_only
def test_numba_kernel_matches_gymnasium_with_terminations_and_truncations_at_500() -> None:
    # 2200 steps of 8 envs: over 200 resets, so some sub-envs use up their pre-drawn states and refill.
    counts = run_lockstep(8, 2200, seed=3, controlled=np.arange(8) % 2 == 0, kernel="numba")
    assert counts["terminated"] > 200 and counts["truncated"] >= 4


@numba_only
def test_numba_kernel_matches_gymnasium_when_termination_and_truncation_coincide() -> None:
    counts = run_lockstep(16, 600, seed=11, controlled=np.zeros(16, dtype=bool), kernel="numba", max_episode_steps=20)
    assert counts["both"] > 0 and counts["truncated"] > counts["both"] and counts["terminated"] > 100


@numba_only
def test_numba_kernel_exact_without_the_affine_uniform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cartpole_kernels, "_fast_paths", (False, False))
    counts = run_lockstep(4, 300, seed=5, controlled=np.array([True, False, False, False]), kernel="numba")
    assert counts["terminated"] > 10


@numba_only
def test_numba_kernel_same_as_numpy_kernel_with_many_resets() -> None:
    # 64 envs stepped at random: about 3 resets per step, every sub-env refills its pre-drawn states several times.
    a, b = NumpyCartPoleVecEnv(64, kernel="numpy"), NumpyCartPoleVecEnv(64, kernel="auto")
    assert b.kernel == "numba" and "numba" in repr(b)
    assert np.array_equal(a.reset(seed=9), b.reset(seed=9))
    rng = np.random.default_rng(0)
    for t in range(3000):
        if t == 1500:
            assert np.array_equal(a.reset(), b.reset())
        actions = rng.integers(0, 2, 64)
        ra, rb = a.step(actions), b.step(actions)
        for field in ("obs", "reward", "terminated", "truncated"):
            assert np.array_equal(getattr(ra, field), getattr(rb, field)), (t, field)
        ended = ra.terminated | ra.truncated
        assert np.array_equal(ra.final_obs[ended], rb.final_obs[ended]), t
        assert np.array_equal(a.state, b.state), t


@numba_only
def test_numba_kernel_validates_actions() -> None:
    env = NumpyCartPoleVecEnv(3, kernel="numba")
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(3, dtype=np.int64))
    env.reset(seed=0)
    before = env.step(np.zeros(3, dtype=np.int64)).obs.copy()
    for bad, match in ((np.array([0, 1, 2]), "0 or 1"), (np.array([0, -1, 1]), "0 or 1"), (np.zeros(2, np.int64), "shape")):
        with pytest.raises(ValueError, match=match):
            env.step(bad)
        assert np.array_equal(env._obs, before)
    strided = np.zeros(6, dtype=np.int64)[::2]
    assert env.step(strided).obs.shape == (3, 4) and env.step([1, 0, 1]).obs.shape == (3, 4)


def test_unknown_kernel_raises() -> None:
    with pytest.raises(ValueError, match="kernel"):
        NumpyCartPoleVecEnv(2, kernel="cuda")

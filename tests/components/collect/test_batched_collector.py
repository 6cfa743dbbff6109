"""AsyncBatchedCollector: the same rollouts as the synchronous collector, exact transitions, PPO still learns."""

from __future__ import annotations

import faulthandler
import threading

import numpy as np
import pytest

from rlbench.components.collect.batched import AsyncBatchedCollector
from rlbench.components.collect.rollout import OnPolicyCollector
from rlbench.components.envs import make_vec_env


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


class DeterministicPolicy:
    """Actions, log-probs and values that depend only on the observation (so thread timing cannot matter)."""

    def __init__(self, box: bool = False) -> None:
        self.box = box

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.box:
            actions = np.clip(-2.0 * obs[:, 2:3], -2.0, 2.0).astype(np.float32)
        else:
            actions = (obs[:, 2] + 0.3 * obs[:, 3] > 0).astype(np.int64)
        return actions, -np.abs(obs[:, 0]).astype(np.float32), self.value(obs)

    def value(self, obs: np.ndarray) -> np.ndarray:
        return obs.sum(axis=1).astype(np.float32)


CASES = [
    ("CartPole-v1", "slot", 64),
    pytest.param("CartPole-v1", "multiprocess", 64, marks=pytest.mark.slow),  # forks worker processes
    ("CartPole-v1", "lock", 32),
    ("Pendulum-v1", "slot", 230),
]


@pytest.mark.parametrize(("env_id", "transport", "steps"), CASES)
def test_async_rollout_equals_sync_rollout(env_id: str, transport: str, steps: int) -> None:
    """Worker i's env is seeded like sub-env i of the vector env: same storage, truncation bootstrap included."""
    n, gamma = 3, 0.97
    policy = DeterministicPolicy(box=env_id == "Pendulum-v1")
    env = make_vec_env(env_id, n)
    spec = env.action_spec
    sync = OnPolicyCollector(env, policy, steps, gamma, action_low=spec.low, action_high=spec.high)
    sync.reset(5)
    with AsyncBatchedCollector(
        env_id, n, policy.act, transport, value_fn=policy.value, gamma=gamma, action_low=spec.low, action_high=spec.high
    ) as coll:
        coll.start(5)
        for _ in range(2):  # the second rollout continues from where the first stopped
            a = sync.collect()
            b = coll.rollout(steps)
            for field in ("obs", "actions", "logprobs", "values", "rewards", "dones", "last_obs", "last_value"):
                np.testing.assert_allclose(getattr(b, field), getattr(a, field), rtol=1e-6, atol=1e-6, err_msg=field)
    env.close()
    if env_id == "Pendulum-v1":
        assert a.dones.any()  # truncation at 200 steps was bootstrapped identically


def test_off_policy_collect_returns_exact_consistent_transitions() -> None:
    policy = DeterministicPolicy()
    before = threading.active_count()
    with AsyncBatchedCollector("CartPole-v1", 4, lambda o: policy.act(o)[0], "slot") as coll:
        coll.start(0)
        first = coll.collect(1001)
        second = coll.collect(400)
        assert coll.env_steps == 1401
    assert threading.active_count() <= before
    for d, n in ((first, 1001), (second, 400)):
        assert {k: v.shape[0] for k, v in d.items()} == dict.fromkeys(d, n)
        assert d["obs"].shape == (n, 4) and d["action"].dtype == np.int64 and d["reward"].dtype == np.float32
        assert np.bincount(d["worker"], minlength=4).tolist() == [n // 4 + (i < n % 4) for i in range(4)]
        for w in range(4):  # a worker's transitions chain: next_obs is the next obs unless the episode ended
            rows = np.flatnonzero(d["worker"] == w)
            ended = d["terminated"][rows] | d["truncated"][rows]
            same = np.all(d["next_obs"][rows[:-1]] == d["obs"][rows[1:]], axis=1)
            assert same[~ended[:-1]].all() and not same[ended[:-1]].any()
            np.testing.assert_array_equal(d["action"][rows], policy.act(d["obs"][rows])[0])
    assert len(coll.episode_returns) == int(first["terminated"].sum() + second["terminated"].sum())
    # the second collect continues each worker's chain from where the first stopped
    for w in range(4):
        last = np.flatnonzero(first["worker"] == w)[-1]
        nxt = np.flatnonzero(second["worker"] == w)[0]
        if not (first["terminated"][last] or first["truncated"][last]):
            np.testing.assert_array_equal(first["next_obs"][last], second["obs"][nxt])


def test_worker_failure_is_reported_not_hung() -> None:
    calls = {"n": 0}

    def bad_policy(obs: np.ndarray) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] > 3:
            return np.full(len(obs), 7, dtype=np.int64)  # an invalid CartPole action: the env raises in the worker
        return np.zeros(len(obs), dtype=np.int64)

    coll = AsyncBatchedCollector("CartPole-v1", 2, bad_policy, "slot", timeout_s=10)
    coll.start(0)
    try:
        with pytest.raises(RuntimeError, match="worker"):
            coll.collect(200)
    finally:
        coll.close()
    assert not coll._workers


@pytest.mark.slow
def test_ppo_with_async_collector_learns() -> None:
    """Same budget as the sync learning test (tests/test_learning.py: eval 211 / 144 there), seeds 0-2 pooled.

    Which worker's steps land first depends on thread scheduling, so a seed's outcome varies from run to run: seed 0
    alone evaluated at 98 to 226 (mean of 10 episodes) over six runs on the 2-core machine, and a CI run failed the
    old one-seed bar of 100 at 98.1. The mean over the three seeds' 30 eval episodes ranged 164-189 in two rounds. A
    collector that fed the learner wrong transitions would stay near CartPole's random-policy returns (about 20)."""
    from rlbench.algos.ppo.config import PPOConfig
    from rlbench.algos.ppo.train import train_ppo

    before = threading.active_count()
    evals = []
    for seed in (0, 1, 2):
        result = train_ppo(PPOConfig(total_steps=24_576, seed=seed, collector="async", transport="slot"))
        evals += list(result.eval_returns)
        first, last = np.mean(result.episode_returns[:20]), np.mean(result.episode_returns[-20:])
        assert last > 1.5 * first and result.env_steps == 24_576, (seed, first, last)
    assert np.mean(evals) >= 100, evals
    assert threading.active_count() <= before


@pytest.mark.slow
def test_ppo_async_multiprocess_runs() -> None:
    from rlbench.algos.ppo.config import PPOConfig
    from rlbench.algos.ppo.train import train_ppo

    result = train_ppo(PPOConfig(total_steps=2048, num_envs=4, collector="async", transport="multiprocess", eval_episodes=2))
    assert result.env_steps == 2048 and len(result.eval_returns) == 2
    assert result.phase_s["collect"] > 0 and "collect/policy" in result.phase_s

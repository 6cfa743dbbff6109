"""Other libraries' replay-buffer and vector-env rows time a correct operation.

Buffers: every sampled row is one of the transitions added, whole (its fields belong together), and ``add`` wraps
around a full buffer, overwriting the oldest rows. Envs: a step returns ``(n, obs_dim)`` observations and ended envs
are reset in the same step.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from rlbench.suites.micro import peer_envs, peer_replay
from rlbench.suites.micro.user_checks import env_actions

CAPACITY = 1_000


def test_every_peer_library_is_installed_for_ci() -> None:
    for module in ("rlox", "torchrl", "stable_baselines3"):  # the test extra installs all three
        assert importlib.util.find_spec(module) is not None, module
    assert set(peer_replay.installed()) == set(peer_replay.PEERS)
    assert set(peer_envs.installed()) == set(peer_envs.PEERS)


def transitions(ids: np.ndarray) -> dict[str, np.ndarray]:
    """The group's fields (8-float obs and next obs, 2-float action), each encoding the row id so rows can be traced."""
    f = ids.astype(np.float32)
    obs = f[:, None] + np.arange(8, dtype=np.float32) * 1e-3
    return {
        "obs": obs,
        "action": -f[:, None] - np.arange(2, dtype=np.float32) * 1e-3,
        "reward": f * 0.5,
        "next_obs": obs + 0.25,
        "done": ids % 3 == 0,
    }


def _ids(rows: dict[str, np.ndarray]) -> np.ndarray:
    """The row id each sampled transition encodes, after checking that all its fields encode that same id."""
    ids = np.rint(rows["obs"][:, 0]).astype(np.int64)
    expected = transitions(ids)
    for field, want in expected.items():
        got = rows[field]
        assert got.shape == want.shape, (field, got.shape)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-3, err_msg=field)
    return ids


@pytest.mark.parametrize("peer", sorted(peer_replay.PEERS))
@pytest.mark.parametrize("batch", [8, 40])
def test_peer_buffer_samples_added_rows_and_wraps(peer: str, batch: int) -> None:
    p = peer_replay.PEERS[peer]
    buf = p.make(CAPACITY, batch)
    p.fill(buf, transitions(np.arange(CAPACITY)))
    assert p.size(buf) == CAPACITY
    ids = _ids(p.to_rows(p.sample(buf, 256)))
    assert ids.shape == (256,) and ids.min() >= 0 and ids.max() < CAPACITY
    assert len(np.unique(ids)) > 128  # random draws over 1,000 rows, not one row repeated

    new = np.arange(CAPACITY, CAPACITY + batch)
    p.add(buf, *p.prepare(transitions(new)))  # a full buffer: the oldest `batch` rows give way
    assert p.size(buf) == CAPACITY
    seen = np.concatenate([_ids(p.to_rows(p.sample(buf, 512))) for _ in range(40)])  # rlox: batch <= rows held
    assert set(seen.tolist()) <= set(range(batch, CAPACITY + batch))
    assert set(new.tolist()) & set(seen.tolist())


@pytest.mark.parametrize("peer", sorted(peer_replay.PEERS))
def test_peer_sample_shapes(peer: str) -> None:
    p = peer_replay.PEERS[peer]
    buf = p.make(CAPACITY, 1)
    p.fill(buf, transitions(np.arange(CAPACITY)))
    rows = p.to_rows(p.sample(buf, 512))
    assert rows["obs"].shape == rows["next_obs"].shape == (512, 8)
    assert rows["action"].shape == (512, 2)
    assert rows["reward"].shape == rows["done"].shape == (512,) and rows["done"].dtype == bool


ENV_CASES = [(peer, env_id) for peer, p in sorted(peer_envs.PEERS.items()) for env_id in p.env_ids]
OBS_DIM = {"CartPole-v1": 4, "Pendulum-v1": 3}


def _is_reset_state(env_id: str, obs: np.ndarray) -> np.ndarray:
    """Whether each observation is one that the env's ``reset`` draws."""
    if env_id == "CartPole-v1":
        return np.all(np.abs(obs) <= 0.05 + 1e-6, axis=1)  # all four components uniform in [-0.05, 0.05]
    cos, sin, thetadot = obs.T  # Pendulum: theta uniform in [-pi, pi], thetadot in [-1, 1]
    return (np.abs(cos**2 + sin**2 - 1) < 1e-4) & (np.abs(thetadot) <= 1 + 1e-6)


@pytest.mark.parametrize("peer, env_id", ENV_CASES)
def test_peer_env_steps_and_autoresets(peer: str, env_id: str) -> None:
    p = peer_envs.PEERS[peer]
    n = 4
    env, close = p.make(env_id, n)
    try:
        batches = [p.prepare(env_id, a) for a in env_actions(env_id, n, 64, seed=n)]
        ended = 0
        for t in range(230):  # CartPole episodes end within tens of random steps, Pendulum's at step 200
            result = p.step(env, batches[t % len(batches)])
            obs, done = np.asarray(p.obs(result)), np.asarray(p.done(result))
            assert obs.shape == (n, OBS_DIM[env_id]) and done.shape == (n,) and done.dtype == bool
            assert np.all(np.isfinite(obs))
            if done.any():
                assert _is_reset_state(env_id, obs[done]).all(), (t, obs[done])  # reset in the same step
                ended += int(done.sum())
        assert ended >= n
    finally:
        close()

"""Trajectory crops: slices stay in one episode and cover every eligible start; episode step counting."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbench.components.replay import (
    TrajectoryReplayBuffer,
)
from rlbench.components.replay.uniform import episode_steps
from tests.components.replay.replay_helpers import (
    chronological,
    make_batch,
)


def eligible_starts(steps: np.ndarray, episodes: np.ndarray, length: int) -> set[int]:
    """Reference: step numbers that start ``length`` chronologically consecutive stored steps of one episode."""
    return {int(steps[i]) for i in range(len(steps) - length + 1) if len(set(episodes[i : i + length].tolist())) == 1}


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20), min_size=1, max_size=12),
    capacity=st.integers(4, 30),
    chunk=st.integers(1, 120),  # > 64: the vectorized episode bookkeeping
    length=st.integers(1, 6),
    explicit_ids=st.booleans(),
)
def test_slices_stay_in_one_episode_and_cover_eligible_starts(
    lengths: list[int], capacity: int, chunk: int, length: int, explicit_ids: bool
) -> None:
    episode = np.repeat(np.arange(len(lengths)) * 3 + 100, lengths)  # arbitrary distinct ids
    total, done = len(episode), np.isin(np.arange(len(episode)), np.cumsum(lengths) - 1)  # episode ends
    buf = TrajectoryReplayBuffer(capacity, (2,), seed=7)
    for s in range(0, total, chunk):
        batch = make_batch(s, min(chunk, total - s))
        batch["done"] = done[s : s + chunk]
        if explicit_ids:
            batch["episode"] = episode[s : s + chunk]
        buf.add(batch)
    steps = chronological(buf, "reward").astype(int)
    np.testing.assert_array_equal(steps, np.arange(total)[-capacity:])
    kept_ids = episode[steps] if explicit_ids else np.cumsum(done)[steps] - done[steps]
    expected = eligible_starts(steps, kept_ids, length)
    if not expected:
        with pytest.raises(ValueError, match="no episode has"):
            buf.sample_slices(4, length)
        return
    out = buf.sample_slices(3000, length)
    obs = out["obs"][..., 0].astype(int)
    assert out["obs"].shape == (3000, length, 2)
    np.testing.assert_array_equal(np.diff(obs, axis=1), 1)  # consecutive steps
    assert np.all(episode[obs] == episode[obs[:, :1]])  # never mixing episodes
    assert np.all(out["episode"] == out["episode"][:, :1]) and obs.min() >= total - len(buf)
    assert set(obs[:, 0].tolist()) == expected  # every eligible start is drawn (at most 30 of them in 3000 draws)


@pytest.mark.parametrize("n", [50, 300], ids=["loop", "vectorized"])
@pytest.mark.parametrize("explicit", [False, True], ids=["from-done", "explicit-ids"])
def test_episode_steps_matches_plain_loop(n: int, explicit: bool) -> None:
    rng = np.random.default_rng(n)
    labels = np.repeat(rng.integers(0, 4, n), rng.integers(1, 9, n))[:n] if explicit else rng.random(n) < 0.1
    for prev_id, prev_back in [(None, -1), (int(labels[0]) if explicit else 7, 3)]:
        ids, back, nxt = episode_steps(labels, explicit, 7, prev_id, prev_back)
        ref_ids, ref_back, b, p = labels if explicit else 7 + np.cumsum(labels) - labels, [], prev_back, prev_id
        for i in ref_ids.tolist():
            b, p = (b + 1 if i == p else 0), i
            ref_back.append(b)
        assert isinstance(ids, list) == (n <= 64)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(back, ref_back)
        assert nxt == (7 if explicit else 7 + int(labels.sum()))


def test_slices_torch_backend_and_bad_arguments() -> None:
    buf = TrajectoryReplayBuffer(20, (2,), backend="torch", seed=0)
    with pytest.raises(ValueError, match="empty"):
        buf.sample_slices(2, 3)
    buf.add(make_batch(0, 12))
    out = buf.sample_slices(5, 4)
    assert isinstance(out["obs"], torch.Tensor) and out["obs"].shape == (5, 4, 2) and out["episode"].shape == (5, 4)
    with pytest.raises(ValueError, match="length must be a positive integer"):
        buf.sample_slices(2, 0)
    with pytest.raises(ValueError, match=r"no episode has 6 consecutive stored steps \(longest run stored: 5\)"):
        buf.sample_slices(2, 6)
    with pytest.raises(ValueError, match="integer 'episode' ids, got 2"):
        buf.add({**make_batch(0, 3), "episode": np.zeros(2, dtype=np.int64)})

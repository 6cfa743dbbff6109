"""Prioritized replay: draws follow priorities (chi-square), importance weights follow the formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.components.replay import (
    PrioritizedReplayBuffer,
)
from tests.components.replay.replay_helpers import (
    KERNELS,
    P_MIN,
    chi_square_p,
    make_batch,
)


def prioritized(kernel: str, size: int = 24, seed: int = 0) -> tuple[PrioritizedReplayBuffer, np.ndarray]:
    """A buffer of ``size`` rows (capacity 32) with random priorities; returns it and the raw priorities."""
    buf = PrioritizedReplayBuffer(32, (2,), seed=seed, alpha=0.7, beta=0.5, kernel=kernel)
    buf.add(make_batch(0, size))
    pri = np.random.default_rng(seed).uniform(0.0, 3.0, size)
    pri[3] = 0.0  # eps keeps it reachable
    buf.update_priorities(np.arange(size), pri)
    return buf, pri


@pytest.mark.parametrize("kernel", KERNELS)
def test_prioritized_sampling_follows_priorities(kernel: str) -> None:
    buf, pri = prioritized(kernel)
    counts = np.zeros(buf.capacity)
    for _ in range(200):
        out = buf.sample(100)
        np.add.at(counts, out["indices"], 1)
        np.testing.assert_array_equal(out["reward"], out["indices"])  # row i holds step i (no wrap)
    mass = (pri + buf.eps) ** buf.alpha
    assert counts[len(pri) :].sum() == 0
    assert chi_square_p(counts[: len(pri)], 20000 * mass / mass.sum()) > P_MIN


@pytest.mark.parametrize("kernel", KERNELS)
def test_importance_weights_follow_formula(kernel: str) -> None:
    buf, pri = prioritized(kernel)
    out = buf.sample(64)
    prob = (pri + buf.eps) ** buf.alpha / ((pri + buf.eps) ** buf.alpha).sum()
    w = (len(buf) * prob[out["indices"]]) ** -buf.beta
    np.testing.assert_allclose(out["weights"], w / w.max(), rtol=1e-5)
    assert out["weights"].dtype == np.float32 and out["indices"].dtype == np.int64


def test_prioritized_new_rows_get_max_priority_and_duplicates_last_wins() -> None:
    buf, _ = prioritized("numpy")
    buf.update_priorities(np.array([5, 5, 5, 6]), np.array([9.0, 0.5, 2.0, 7.0]))
    leaves = buf.tree.leaves
    np.testing.assert_allclose(leaves[5:7], (np.array([2.0, 7.0]) + buf.eps) ** buf.alpha)
    buf.add(make_batch(24, 3))
    np.testing.assert_allclose(leaves[24:27], (9.0 + buf.eps) ** buf.alpha)  # max ever seen, including the overwritten 9
    buf.tree.check()


def test_prioritized_sample_torch_follows_priorities() -> None:
    buf, pri = prioritized("numba")
    out, mass = buf.sample_torch(4000), (pri + buf.eps) ** buf.alpha
    counts = np.bincount(out["indices"].numpy(), minlength=len(pri))
    assert torch.equal(out["reward"].long(), out["indices"]) and out["weights"].dtype == torch.float32
    assert chi_square_p(counts, 4000 * mass / mass.sum()) > P_MIN


def test_prioritized_torch_backend() -> None:
    buf = PrioritizedReplayBuffer(16, (2,), backend="torch", seed=0)
    buf.add(make_batch(0, 10))
    out = buf.sample(8)
    assert isinstance(out["weights"], torch.Tensor) and torch.equal(out["reward"].long(), out["indices"])
    buf.update_priorities(out["indices"], torch.rand(8))
    buf.tree.check()

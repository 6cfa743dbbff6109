"""The sum tree: invariants under random updates (hypothesis), NumPy and numba kernels against a reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbench.components.replay.sumtree import SumTree
from tests.components.replay.replay_helpers import (
    KERNELS,
)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 40),
    updates=st.lists(st.lists(st.tuples(st.integers(0, 39), st.integers(0, 1000)), max_size=30), min_size=1, max_size=6),
    kernel=st.sampled_from(KERNELS),
)
def test_sumtree_invariants_under_random_updates(capacity: int, updates: list[list[tuple[int, int]]], kernel: str) -> None:
    tree, ref = SumTree(capacity, kernel=kernel), np.zeros(capacity)
    for batch in updates:
        batch = [(i % capacity, float(v)) for i, v in batch]
        for i, v in batch:
            ref[i] = v  # last write wins
        tree.update(np.array([i for i, _ in batch], dtype=np.int64), np.array([v for _, v in batch]))
        tree.check()
        np.testing.assert_array_equal(tree.leaves, ref)
    assert tree.total == ref.sum()  # integer-valued leaves: every sum is exact
    queries = np.concatenate([np.arange(0, tree.total, max(1.0, tree.total // 40)), np.arange(0.5, tree.total, 97.0)])
    idx, p = tree.find(queries)
    np.testing.assert_array_equal(idx, np.searchsorted(np.cumsum(ref), queries, side="right"))  # prefix <= q < prefix + leaf
    np.testing.assert_array_equal(p, ref[idx])
    assert np.all(p > 0)


@pytest.mark.parametrize("capacity", [1000, 5000])  # 5000: deeper than the NumPy kernel's searchsorted level
def test_sumtree_kernels_agree_with_reference(capacity: int) -> None:
    rng, ref = np.random.default_rng(capacity), np.zeros(capacity)
    trees = [SumTree(capacity, kernel=k) for k in KERNELS]
    for step in range(6):
        idx, val = rng.integers(0, capacity, 300), rng.integers(0, 100, 300).astype(float)  # integers: exact sums
        start, count, fill = int(rng.integers(0, capacity)), int(rng.integers(0, 40)), float(step)
        for i, v in zip(idx, val):
            ref[i] = v
        ref[(start + np.arange(count)) % capacity] = fill
        for tree in trees:
            tree.update(idx, val)
            tree.fill(start, count, fill)
            tree.check()
            np.testing.assert_array_equal(tree.leaves, ref)
    queries = rng.uniform(0, ref.sum(), 500)
    expected = np.searchsorted(np.cumsum(ref), queries, side="right")
    for tree in trees:
        np.testing.assert_array_equal(tree.find(queries)[0], expected)
        idx, p = tree.sample_stratified(64, np.random.default_rng(1))
        np.testing.assert_array_equal(p, ref[idx])
        assert np.all(np.diff(idx) >= 0) and np.all(p > 0)  # stratified masses ascend

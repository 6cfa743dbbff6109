"""Tests for rlbench.components.buffers / ringbuffer / sumtree: every buffer against a plain deque-based reference."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbench.components.replay import (
    BUFFERS,
    FIELDS,
    MemmapReplayBuffer,
    PrioritizedReplayBuffer,
    TrajectoryReplayBuffer,
    UniformReplayBuffer,
)
from rlbench.components.replay.sumtree import SumTree
from rlbench.components.replay.uniform import episode_steps

P_MIN = 1e-3  # chi-square tests fail below this p-value (all RNGs are seeded: the outcomes are fixed)
KERNELS = ["numpy", "numba"]


def make_batch(start: int, n: int, episode_len: int = 5) -> dict[str, np.ndarray]:
    """N transitions numbered ``start, start + 1, ...``: every field encodes the step, ``done`` ends episodes."""
    step = np.arange(start, start + n)
    obs = np.stack([step, -step], axis=1).astype(np.float32)
    reward, done = step.astype(np.float32), step % episode_len == episode_len - 1
    return {"obs": obs, "action": reward * 2, "reward": reward, "next_obs": obs + 1, "done": done}


class ReferenceRing:
    """The plain definition: a deque of per-step rows that forgets the oldest beyond ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.rows, self.added = capacity, deque(maxlen=capacity), 0

    def add(self, batch: dict[str, np.ndarray]) -> None:
        for i in range(len(batch["obs"])):
            self.rows.append({k: np.asarray(batch[k][i]) for k in FIELDS})
        self.added += len(batch["obs"])

    def field(self, name: str) -> np.ndarray:
        return np.array([row[name] for row in self.rows])


def chronological(buf: UniformReplayBuffer, name: str) -> np.ndarray:
    """Field ``name`` of ``buf`` from the oldest to the newest row, as NumPy."""
    data = buf.storage[name]
    data = data.cpu().numpy() if isinstance(data, torch.Tensor) else np.asarray(data)
    oldest = buf.cursor if len(buf) == buf.capacity else 0
    return data[(oldest + np.arange(len(buf))) % buf.capacity]


def chi_square_p(counts: np.ndarray, expected: np.ndarray) -> float:
    """Upper-tail p-value of Pearson's chi-square statistic (df = len - 1), via the regularized gamma function."""
    stat = float(((counts - expected) ** 2 / expected).sum())
    return float(torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2, dtype=torch.float64), torch.tensor(stat / 2)))


def new_buffer(variant: str, capacity: int, tmp_path: Path, **kwargs: Any) -> UniformReplayBuffer:
    """Builds one buffer variant with 2-float observations."""
    if variant.startswith("memmap"):
        return MemmapReplayBuffer(tmp_path / "mm", capacity, (2,), **kwargs)
    if variant == "uniform-torch":
        return UniformReplayBuffer(capacity, (2,), backend="torch", **kwargs)
    if "numpy" in variant:
        kwargs["kernel"] = "numpy"
    return BUFFERS[variant.split("-")[0]](capacity, (2,), **kwargs)


VARIANTS = ["uniform", "uniform-torch", "prioritized", "trajectory", "memmap"]
ROWS_VARIANTS = ["uniform-rows", "uniform-numpy-rows", "prioritized-rows", "trajectory-rows", "memmap-rows"]


def push(buf: UniformReplayBuffer, batch: dict[str, np.ndarray], rows: bool, staging: dict[int, np.ndarray]) -> None:
    """``add(batch)``, or ``add_rows`` of the batch packed into a reused staging record array (one per size)."""
    if not rows:
        buf.add(batch)
        return
    n = len(batch["obs"])
    packed = staging.setdefault(n, buf.new_rows(n)) if n % 2 else np.zeros(n, buf.record_dtype)  # also foreign arrays
    for name in FIELDS:
        packed[name] = batch[name]
    buf.add_rows(packed)


@pytest.mark.parametrize("variant", VARIANTS + ROWS_VARIANTS)
def test_add_and_wraparound_match_reference(variant: str, tmp_path: Path) -> None:
    buf, ref, step, staging = new_buffer(variant, 7, tmp_path, seed=0), ReferenceRing(7), 0, {}
    for n in [3, 0, 5, 6, 1, 7, 20, 2, 13, 3, 3]:  # partial fill, exact fit, wrap, whole-capacity and oversized batches
        batch = make_batch(step, n)
        push(buf, batch, variant.endswith("-rows"), staging)
        ref.add(batch)
        step += n
        assert len(buf) == len(ref.rows) and buf.cursor == ref.added % 7
        for name in FIELDS:
            np.testing.assert_array_equal(chronological(buf, name), ref.field(name), err_msg=name)


def test_torch_backend_accepts_tensors_and_returns_tensors() -> None:
    buf = UniformReplayBuffer(10, (2,), backend="torch", seed=1)
    buf.add({k: torch.as_tensor(v) for k, v in make_batch(0, 4).items()})
    out = buf.sample(6)
    assert all(isinstance(out[k], torch.Tensor) for k in FIELDS) and out["obs"].shape == (6, 2)
    assert out["done"].dtype == torch.bool
    assert set(out["reward"].tolist()) <= {0.0, 1.0, 2.0, 3.0}
    with pytest.raises(ValueError, match="NumPy backend"):
        buf.sample_torch(4)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("method", ["sample", "sample_torch", "torch-backend"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["partial", "wrapped"])
def test_uniform_sampling_is_uniform(method: str, wrapped: bool, kernel: str) -> None:
    if method == "torch-backend" and kernel == "numba":
        pytest.skip("the torch backend has no kernels")
    buf = UniformReplayBuffer(40, (2,), backend="torch" if method == "torch-backend" else "numpy", seed=123, kernel=kernel)
    buf.add(make_batch(0, 95 if wrapped else 29))
    counts = np.zeros(buf.capacity)
    for _ in range(100):
        out = buf.sample_torch(128) if method == "sample_torch" else buf.sample(128)
        reward = out["reward"].numpy() if isinstance(out["reward"], torch.Tensor) else out["reward"]
        np.add.at(counts, reward.astype(int) % buf.capacity, 1)
        np.testing.assert_array_equal(np.asarray(out["obs"])[:, 0], reward)  # rows stay aligned across fields
    filled = counts[np.unique(chronological(buf, "reward").astype(int) % buf.capacity)]
    assert filled.sum() == counts.sum() == 12800  # never an unfilled row
    assert chi_square_p(filled, np.full(len(buf), 12800 / len(buf))) > P_MIN


def test_numba_kernel_draws_the_documented_splitmix_stream() -> None:
    from rlbench.components.replay import kernels as replay_kernels

    buf = UniformReplayBuffer(1000, (2,), seed=5, kernel="numba")
    buf.add(make_batch(0, 700))
    state = buf._kstate.copy()
    out = buf.sample(300)
    want = np.minimum((replay_kernels.splitmix_uniforms(state, 300) * 700).astype(np.int64), 699)
    np.testing.assert_array_equal(out["reward"], want)  # row i holds step i
    assert state[0] == buf._kstate[0]


def test_add_rows_rejects_other_arrays_and_seeds_reproduce() -> None:
    buf = UniformReplayBuffer(10, (2,), seed=1)
    for bad in (np.zeros(3, np.float32), np.zeros((3, 1), buf.record_dtype), make_batch(0, 3)):
        with pytest.raises(ValueError, match="record_dtype"):
            buf.add_rows(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown replay-buffer kernel"):
        UniformReplayBuffer(10, (2,), kernel="fast")
    a, b = (UniformReplayBuffer(64, (2,), seed=9) for _ in range(2))
    for x in (a, b):
        x.add(make_batch(0, 64))
    np.testing.assert_array_equal(a.sample(32)["reward"], b.sample(32)["reward"])


def test_sample_torch_reuses_buffers_and_matches_rows() -> None:
    buf = UniformReplayBuffer(50, (2,), seed=3)
    buf.add(make_batch(0, 50))
    ptr, b, weight = buf.sample_torch(16)["obs"].data_ptr(), buf.sample_torch(16), torch.randn(3, 2)
    torch.testing.assert_close(torch.nn.functional.linear(b["obs"], weight), b["obs"].contiguous() @ weight.T)  # strided ok
    assert b["obs"].data_ptr() == ptr and torch.equal(b["next_obs"], b["obs"] + 1)
    assert torch.equal(b["action"], b["reward"] * 2)


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


def test_memmap_reopens_intact(tmp_path: Path) -> None:
    path, ref = tmp_path / "buf", ReferenceRing(9)
    with MemmapReplayBuffer(path, 9, (2,), obs_dtype=np.float64, seed=0) as buf:
        for s, n in [(0, 4), (4, 8)]:
            buf.add(make_batch(s, n))
            ref.add(make_batch(s, n))
        cursor = buf.cursor
    again = MemmapReplayBuffer.open(path, seed=1)
    assert (again.cursor, len(again), again.capacity, again.specs["obs"][1]) == (cursor, 9, 9, np.float64)
    for name in FIELDS:
        np.testing.assert_array_equal(chronological(again, name), ref.field(name))
    again.add(make_batch(12, 5))
    ref.add(make_batch(12, 5))
    again.flush()  # also done by close(), as below
    again.close()
    reopened = MemmapReplayBuffer.open(path)
    np.testing.assert_array_equal(chronological(reopened, "reward"), ref.field("reward"))
    assert reopened.sample_torch(4)["obs"].dtype == torch.float64
    with pytest.raises(ValueError, match="already holds a replay buffer"):
        MemmapReplayBuffer(path, 9, (2,))
    reopened.close()
    with pytest.raises(ValueError, match="closed"):
        reopened.sample(2)


def test_memmap_rejects_foreign_or_mismatching_directories(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a MemmapReplayBuffer directory"):
        MemmapReplayBuffer.open(tmp_path)
    (tmp_path / "header.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="is not a rlbench-memmap-replay-buffer header"):
        MemmapReplayBuffer.open(tmp_path)
    path = tmp_path / "buf"
    MemmapReplayBuffer(path, 5, (3,)).close()
    header = json.loads((path / "header.json").read_text())
    (path / "header.json").write_text(json.dumps({**header, "capacity": 6}))
    with pytest.raises(ValueError, match="bytes, the header implies"):
        MemmapReplayBuffer.open(path)
    (path / "header.json").write_text(json.dumps({**header, "cursor": 3, "size": 1}))
    with pytest.raises(ValueError, match="inconsistent"):
        MemmapReplayBuffer.open(path)
    (path / "header.json").write_text(json.dumps({**header, "fields": {}}))
    with pytest.raises(ValueError, match="does not describe"):
        MemmapReplayBuffer.open(path)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: UniformReplayBuffer(0, (2,)), "capacity must be a positive integer"),
        (lambda: UniformReplayBuffer(2.5, (2,)), "capacity must be a positive integer"),
        (lambda: UniformReplayBuffer(4, "ab"), "obs_shape and action_shape must be tuples of ints"),
        (lambda: UniformReplayBuffer(4, (-1,)), "negative dimension"),
        (lambda: UniformReplayBuffer(4, (2,), backend="jax"), "backend must be 'numpy' or 'torch'"),
        (lambda: UniformReplayBuffer(4, (2,), device="cuda"), "needs backend='torch'"),
        (lambda: PrioritizedReplayBuffer(4, (2,), alpha=-1.0), "need alpha >= 0"),
        (lambda: PrioritizedReplayBuffer(4, (2,), eps=0.0), "eps > 0"),
        (lambda: PrioritizedReplayBuffer(4, (2,), kernel="cuda"), "unknown .*kernel"),
        (lambda: UniformReplayBuffer(4, (2,)).sample(3), "cannot sample from an empty UniformReplayBuffer"),
        (lambda: UniformReplayBuffer(4, (2,)).sample_torch(3), "cannot sample from an empty"),
    ],
)
def test_bad_constructor_arguments(make: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_call_arguments() -> None:
    buf = PrioritizedReplayBuffer(8, (2,), seed=0)
    with pytest.raises(ValueError, match="missing field 'reward'"):
        buf.add({k: v for k, v in make_batch(0, 3).items() if k != "reward"})
    buf.add(make_batch(0, 3))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        buf.sample(0)
    with pytest.raises(ValueError, match="same length"):
        buf.update_priorities([0, 1], [1.0])
    with pytest.raises(ValueError, match=r"integers in \[0, 3\)"):
        buf.update_priorities([3], [1.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        buf.update_priorities([0, 1], [1.0, float("nan")])
    with pytest.raises(ValueError, match="finite and non-negative"):
        buf.update_priorities([0], [-1.0])
    uniform = UniformReplayBuffer(8, (2,))
    with pytest.raises(ValueError, match="missing field 'obs'"):
        uniform.add({})
    with pytest.raises(ValueError, match="could not broadcast"):
        uniform.add({**make_batch(0, 3), "obs": np.zeros((3, 5))})


def test_registry() -> None:
    assert set(BUFFERS) == {"uniform", "prioritized", "trajectory", "memmap"} and all(map(callable, BUFFERS.values()))

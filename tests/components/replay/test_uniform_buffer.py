"""Uniform ring storage (NumPy and torch, numba kernels) against a deque reference; argument checks; the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlbench.components.replay import (
    BUFFERS,
    FIELDS,
    PrioritizedReplayBuffer,
    UniformReplayBuffer,
)
from tests.components.replay.replay_helpers import (
    KERNELS,
    P_MIN,
    ROWS_VARIANTS,
    VARIANTS,
    ReferenceRing,
    chi_square_p,
    chronological,
    make_batch,
    new_buffer,
    push,
)


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

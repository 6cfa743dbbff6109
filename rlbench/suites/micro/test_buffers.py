"""Micro-benchmark: replay buffers, ``sample`` and ``add`` across capacities and batch sizes.

Run with ``pytest rlbench/suites/micro/test_buffers.py --benchmark-only``. Buffers hold 8-float observations and
2-float actions (about 80 MB per 1e6 rows) and are filled once per (variant, capacity), then shared by the benchmarks
of that pair (``add`` keeps wrapping around a full buffer). Variants:

* ``uniform-numpy``: ``sample`` into fresh NumPy arrays; ``uniform-numpy-to-torch``: ``sample_torch`` (reused
  buffers, tensors out); ``uniform-torch``: torch storage and ``sample`` (tensors in, tensors out);
* ``prioritized-numba`` / ``prioritized-numpy``: stratified sampling on the sum tree with the numba / NumPy kernels;
* ``trajectory-slices``: ``sample_slices(batch // 8, 8)`` (200-step episodes), elements = rows returned;
* ``memmap``: the uniform buffer on ``np.memmap`` files in a temporary directory (page-cache warm), ``sample``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlbench.components.buffers import (
    MemmapReplayBuffer,
    PrioritizedReplayBuffer,
    TrajectoryReplayBuffer,
    UniformReplayBuffer,
)

OBS_SHAPE, ACTION_SHAPE, EPISODE_LEN, SLICE_LEN = (8,), (2,), 200, 8
CAPACITIES = {"1e5": 100_000, "1e6": 1_000_000}
SAMPLE_BATCHES, ADD_BATCHES = [256, 4096], [8, 256]


def _uniform(backend: str) -> Callable[[int, Path], UniformReplayBuffer]:
    return lambda cap, _: UniformReplayBuffer(cap, OBS_SHAPE, ACTION_SHAPE, backend=backend, seed=0)


def _prioritized(kernel: str) -> Callable[[int, Path], UniformReplayBuffer]:
    return lambda cap, _: PrioritizedReplayBuffer(cap, OBS_SHAPE, ACTION_SHAPE, seed=0, kernel=kernel)


# variant -> (buffer type built on, factory(capacity, tmp dir), sample call(buffer, batch))
VARIANTS: dict[str, tuple[str, Callable[[int, Path], UniformReplayBuffer], Callable[[Any, int], Any]]] = {
    "uniform-numpy": ("uniform-numpy", _uniform("numpy"), lambda b, n: b.sample(n)),
    "uniform-numpy-to-torch": ("uniform-numpy", _uniform("numpy"), lambda b, n: b.sample_torch(n)),
    "uniform-torch": ("uniform-torch", _uniform("torch"), lambda b, n: b.sample(n)),
    "prioritized-numba": ("prioritized-numba", _prioritized("numba"), lambda b, n: b.sample(n)),
    "prioritized-numpy": ("prioritized-numpy", _prioritized("numpy"), lambda b, n: b.sample(n)),
    "trajectory-slices": (
        "trajectory",
        lambda cap, _: TrajectoryReplayBuffer(cap, OBS_SHAPE, ACTION_SHAPE, seed=0),
        lambda b, n: b.sample_slices(n // SLICE_LEN, SLICE_LEN),
    ),
    "memmap": ("memmap", lambda cap, tmp: MemmapReplayBuffer(tmp / f"mm-{cap}", cap, OBS_SHAPE, ACTION_SHAPE, seed=0),
               lambda b, n: b.sample(n)),
}  # fmt: skip
ADD_VARIANTS = ["uniform-numpy", "uniform-torch", "prioritized-numba", "prioritized-numpy", "trajectory-slices", "memmap"]


def transitions(start: int, n: int, as_torch: bool = False) -> dict[str, Any]:
    """Deterministic transitions; ``done`` every :data:`EPISODE_LEN` steps."""
    rng = np.random.default_rng(start)
    obs = rng.standard_normal((n, *OBS_SHAPE), dtype=np.float32)
    batch = {
        "obs": obs,
        "action": rng.standard_normal((n, *ACTION_SHAPE), dtype=np.float32),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "next_obs": obs + 1.0,
        "done": np.arange(start, start + n) % EPISODE_LEN == EPISODE_LEN - 1,
    }
    return {k: torch.from_numpy(v) for k, v in batch.items()} if as_torch else batch


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], Any]:
    """``get(variant, capacity)``: a full buffer, built once per (buffer type, capacity) and reused."""
    cache: dict[tuple[str, int], Any] = {}
    tmp = tmp_path_factory.mktemp("buffers")

    def get(variant: str, capacity: int) -> Any:
        kind, factory, _ = VARIANTS[variant]
        if (kind, capacity) not in cache:
            buf = factory(capacity, tmp)
            chunk = 100_000
            for start in range(0, capacity, chunk):
                buf.add(transitions(start, min(chunk, capacity - start), as_torch=kind == "uniform-torch"))
            cache[kind, capacity] = buf
        return cache[kind, capacity]

    yield get
    for buf in cache.values():
        if isinstance(buf, MemmapReplayBuffer):
            buf.close()


@pytest.mark.parametrize("batch", SAMPLE_BATCHES, ids=[f"b{b}" for b in SAMPLE_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("variant", VARIANTS)
def test_sample(benchmark: Any, filled: Callable[[str, int], Any], variant: str, cap: str, batch: int) -> None:
    """Times one ``sample`` (or ``sample_torch`` / ``sample_slices``) call of ``batch`` rows from a full buffer."""
    buf, sample = filled(variant, CAPACITIES[cap]), VARIANTS[variant][2]
    sample(buf, batch)  # warm-up: numba JIT / cache load, scratch and output buffers
    benchmark.group = f"buffers sample cap={cap} batch={batch}"
    benchmark.extra_info.update(group="buffers", impl=variant, size=f"cap{cap}-b{batch}", elements=batch, op="sample")
    out = benchmark(sample, buf, batch)
    assert tuple(out["obs"].shape[-1:]) == OBS_SHAPE and math.prod(out["obs"].shape[:-1]) == batch


@pytest.mark.parametrize("batch", ADD_BATCHES, ids=[f"b{b}" for b in ADD_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("variant", ADD_VARIANTS)
def test_add(benchmark: Any, filled: Callable[[str, int], Any], variant: str, cap: str, batch: int) -> None:
    """Times one ``add`` of ``batch`` transitions to a full buffer (wrapping around every ``capacity / batch`` calls)."""
    buf = filled(variant, CAPACITIES[cap])
    rows = transitions(7, batch, as_torch=variant == "uniform-torch")
    buf.add(rows)
    benchmark.group = f"buffers add cap={cap} batch={batch}"
    benchmark.extra_info.update(group="buffers", impl=variant, size=f"cap{cap}-b{batch}", elements=batch, op="add")
    benchmark(buf.add, rows)
    assert len(buf) == CAPACITIES[cap]

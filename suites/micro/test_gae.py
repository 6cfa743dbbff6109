"""Micro-benchmark: GAE implementations (NumPy in / NumPy out) across rollout sizes.

Run with ``pytest suites/micro/test_gae.py --benchmark-only``. The pure-Python reference is skipped at the
big sizes (seconds per call at 2048 x 64 and 1024 x 1024). numba is jitted (or loaded from its on-disk cache) by a
warm-up call before timing, so its import and compile cost are not part of these numbers.

``test_gae_torch_device`` times :func:`gae_torch` on tensors already on each device of the matrix
(:mod:`rlbench.suites.micro.devices`), synchronized inside the timed call; rows ``torch-tensors`` (CPU) and
``torch-tensors@cuda:N``. Absent devices are skipped with a note that the report shows.

``test_gae_peer`` adds rows for other libraries' GAE where they are installed (rlox, TorchRL, Stable-Baselines3),
each timed on inputs in its own layout (:mod:`rlbench.suites.micro.peer_gae`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import pytest
from rlbench.suites.micro.devices import device_params, impl_label, timed_on
from rlbench.suites.micro.peer_gae import installed as installed_peers
from rlbench.suites.micro.user_impls import user_cases

from rlbench.components.returns.gae import GAE_IMPLEMENTATIONS, gae_torch

SIZES = [(128, 8), (2048, 64), (1024, 1024)]
SLOW_REFERENCE = pytest.mark.skip(reason="pure-Python reference is too slow at this size (seconds per call)")
GAMMA, LAM = 0.99, 0.95

# users' implementations (rlbench run gae --impl pkg.mod:fn), already checked against the reference by the runner
IMPLEMENTATIONS = {**GAE_IMPLEMENTATIONS, **user_cases(os.environ.get("RLBENCH_USER_IMPLS"))}

CASES = [
    pytest.param(name, T, N, id=f"{name}-T{T}xN{N}", marks=SLOW_REFERENCE if name == "reference" and T * N > 4096 else ())
    for T, N in SIZES
    for name in IMPLEMENTATIONS
]


@functools.cache
def rollout(T: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic float32 rollout with about 1% episode ends, shared by all implementations of one size."""
    rng = np.random.default_rng(T * 7919 + N)
    rewards = rng.standard_normal((T, N)).astype(np.float32)
    values = rng.standard_normal((T, N)).astype(np.float32)
    dones = rng.random((T, N)) < 0.01
    last_value = rng.standard_normal(N).astype(np.float32)
    return rewards, values, dones, last_value


@pytest.mark.parametrize("name, T, N", CASES)
def test_gae(benchmark: Any, name: str, T: int, N: int) -> None:
    """Times one NumPy-in/NumPy-out GAE call on a precomputed (T, N) rollout."""
    fn = IMPLEMENTATIONS[name]
    inputs = rollout(T, N)
    fn(*inputs, GAMMA, LAM)  # warm-up: numba JIT / cache load, torch lazy init, NumPy constant caches
    benchmark.group = f"gae T={T} N={N}"
    benchmark.extra_info.update(group="gae", impl=name, size=f"{T}x{N}", elements=T * N, T=T, N=N)
    result = benchmark(fn, *inputs, GAMMA, LAM)
    assert result.shape == (T, N) and result.dtype == np.float32


@pytest.mark.parametrize("device", device_params())
@pytest.mark.parametrize("T, N", SIZES, ids=[f"T{T}xN{N}" for T, N in SIZES])
def test_gae_torch_device(benchmark: Any, device: str, T: int, N: int) -> None:
    """Times :func:`gae_torch` on tensors resident on ``device`` (tensor in, tensor out, synchronized)."""
    import torch

    r, v, d, lv = (torch.from_numpy(x).to(device) for x in rollout(T, N))
    call = timed_on(device, gae_torch)
    call(r, v, d, lv, GAMMA, LAM)  # warm-up: lazy init, kernels, allocator
    benchmark.group = f"gae T={T} N={N}"
    name = impl_label("torch-tensors", device)
    benchmark.extra_info.update(group="gae", impl=name, size=f"{T}x{N}", elements=T * N, T=T, N=N, device=device)
    result = benchmark(call, r, v, d, lv, GAMMA, LAM)
    assert tuple(result.shape) == (T, N)


@pytest.mark.parametrize("peer", sorted(installed_peers()))
@pytest.mark.parametrize("T, N", SIZES, ids=[f"T{T}xN{N}" for T, N in SIZES])
def test_gae_peer(benchmark: Any, peer: str, T: int, N: int) -> None:
    """Times another library's GAE on inputs already in its own layout (rlox, TorchRL, SB3; see ``peer_gae``)."""
    p = installed_peers()[peer]
    args = p.prepare(*rollout(T, N), GAMMA, LAM)
    p.call(*args)  # warm-up: imports, lazy init
    benchmark.group = f"gae T={T} N={N}"
    benchmark.extra_info.update(group="gae", impl=peer, size=f"{T}x{N}", elements=T * N, T=T, N=N, peer=True)
    result = benchmark(p.call, *args)
    assert p.to_tn(result, args, T, N).shape == (T, N)

"""Micro-benchmark: TD(lambda) returns, GRPO group-relative advantages and the k3 KL estimator (NumPy in / NumPy out).

Run with ``pytest suites/micro/test_estimators.py --benchmark-only``. Every benchmark reports
``extra_info`` ``group="estimators"``, ``op`` (``td_lambda``, ``group_advantages`` or ``kl_k3``), ``impl``, ``size``
and ``elements`` (T*N, prompts*G or batch*tokens). The pure-Python references are skipped where one call takes
seconds. numba is jitted (or loaded from its on-disk cache) and torch initialized by a warm-up call before timing.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from rlbench.components.returns.group import GROUP_ADVANTAGE_IMPLEMENTATIONS
from rlbench.components.returns.kl import KL_IMPLEMENTATIONS
from rlbench.components.returns.td import TD_LAMBDA_IMPLEMENTATIONS

TD_SIZES = [(128, 8), (2048, 64), (1024, 1024)]
GROUP_SIZES = [(64, 8), (1024, 16)]
KL_SIZES = [(32, 2048), (256, 2048)]
GAMMA, LAM = 0.99, 0.95


def _slow(name: str, elements: int, limit: int) -> Any:
    """A skip mark for the pure-Python reference above ``limit`` elements (seconds per call), else no mark."""
    if name == "reference" and elements > limit:
        return pytest.mark.skip(reason="pure-Python reference is too slow at this size (seconds per call)")
    return ()


def _cases(impls: dict[str, Any], sizes: list[tuple[int, int]], limit: int, prefix: str) -> list[Any]:
    """Parameter sets ``(name, a, b)`` for every implementation and size."""
    return [
        pytest.param(name, a, b, id=f"{name}-{prefix}{a}x{b}", marks=_slow(name, a * b, limit))
        for a, b in sizes
        for name in impls
    ]


def _label(benchmark: Any, op: str, name: str, a: int, b: int) -> None:
    """Sets the benchmark's group and extra_info."""
    benchmark.group = f"{op} {a}x{b}"
    benchmark.extra_info.update(group="estimators", op=op, impl=name, size=f"{a}x{b}", elements=a * b)


@functools.cache
def rollout(T: int, N: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic float32 rollout with about 1% episode ends."""
    rng = np.random.default_rng(T * 7919 + N)
    rewards = rng.standard_normal((T, N)).astype(np.float32)
    values = rng.standard_normal((T, N)).astype(np.float32)
    return rewards, values, rng.random((T, N)) < 0.01, rng.standard_normal(N).astype(np.float32)


@functools.cache
def group_rewards(prompts: int, G: int) -> np.ndarray:
    """Binary (verifier-style) rewards with a little noise, shaped (prompts, G)."""
    rng = np.random.default_rng(prompts * 31 + G)
    return ((rng.random((prompts, G)) < 0.4) + 0.01 * rng.standard_normal((prompts, G))).astype(np.float32)


@functools.cache
def token_logprobs(batch: int, tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Policy and reference log-probs of sampled tokens, and a right-padding mask (lengths uniform in [1, tokens])."""
    rng = np.random.default_rng(batch * 13 + tokens)
    logp = np.log(rng.uniform(0.01, 1.0, (batch, tokens))).astype(np.float32)
    ref = np.minimum(logp + 0.2 * rng.standard_normal((batch, tokens)), 0.0).astype(np.float32)
    mask = np.arange(tokens)[None, :] < rng.integers(1, tokens + 1, batch)[:, None]
    return logp, ref, mask


@pytest.mark.parametrize("name, T, N", _cases(TD_LAMBDA_IMPLEMENTATIONS, TD_SIZES, 4096, "T"))
def test_td_lambda(benchmark: Any, name: str, T: int, N: int) -> None:
    """Times one TD(lambda) call on a precomputed (T, N) rollout."""
    fn, inputs = TD_LAMBDA_IMPLEMENTATIONS[name], rollout(T, N)
    fn(*inputs, GAMMA, LAM)  # warm-up: numba JIT / cache load
    _label(benchmark, "td_lambda", name, T, N)
    result = benchmark(fn, *inputs, GAMMA, LAM)
    assert result.shape == (T, N) and result.dtype == np.float32


@pytest.mark.parametrize("name, P, G", _cases(GROUP_ADVANTAGE_IMPLEMENTATIONS, GROUP_SIZES, 1 << 15, "P"))
def test_group_advantages(benchmark: Any, name: str, P: int, G: int) -> None:
    """Times one group-relative advantage call (mean and std normalization) on (prompts, G) rewards."""
    fn, rewards = GROUP_ADVANTAGE_IMPLEMENTATIONS[name], group_rewards(P, G)
    fn(rewards)  # warm-up: torch lazy init
    _label(benchmark, "group_advantages", name, P, G)
    result = benchmark(fn, rewards)
    assert result.shape == (P, G) and result.dtype == np.float32


@pytest.mark.parametrize("name, B, L", _cases(KL_IMPLEMENTATIONS, KL_SIZES, 1 << 17, "B"))
def test_kl_k3(benchmark: Any, name: str, B: int, L: int) -> None:
    """Times one masked k3 KL estimate (per-sequence means and batch mean) on [batch, tokens] log-probs."""
    fn, inputs = KL_IMPLEMENTATIONS[name], token_logprobs(B, L)
    fn(*inputs, "k3")  # warm-up
    _label(benchmark, "kl_k3", name, B, L)
    result = benchmark(fn, *inputs, "k3")
    assert result.per_sequence.shape == (B,) and result.batch_mean >= 0.0

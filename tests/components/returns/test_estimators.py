"""Tests for rlbench.components.estimators: every variant against its reference, and hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlbench.components.returns.gae import gae_reference
from rlbench.components.returns.group import (
    GROUP_ADVANTAGE_IMPLEMENTATIONS,
    group_advantages_reference,
    group_advantages_torch,
)
from rlbench.components.returns.kl import KL_ESTIMATORS, KL_IMPLEMENTATIONS, kl_reference, kl_torch
from rlbench.components.returns.td import TD0_IMPLEMENTATIONS, TD_LAMBDA_IMPLEMENTATIONS, td0_reference, td_lambda_reference

TOL = {"rtol": 1e-5, "atol": 1e-5}
SHAPES = [(1, 1), (5, 3), (64, 9), (33, 70)]


def rollout(T: int, N: int, seed: int = 0, float_dones: bool = False) -> tuple[np.ndarray, ...]:
    """Random float32 rewards/values/last_value and episode ends at about 20% of the steps."""
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((T, N)).astype(np.float32)
    values = rng.standard_normal((T, N)).astype(np.float32)
    dones = rng.random((T, N)) < 0.2
    last_value = rng.standard_normal(N).astype(np.float32)
    return rewards, values, dones.astype(np.float32) if float_dones else dones, last_value


def tiny(dones: list[bool]) -> tuple[np.ndarray, ...]:
    """T=3, N=1: rewards 1, 2, 3; values 0.5, 1.0, 1.5; last value 2.0."""
    col = lambda xs: np.array(xs, dtype=np.float32)[:, None]
    return col([1.0, 2.0, 3.0]), col([0.5, 1.0, 1.5]), np.array(dones)[:, None], np.array([2.0], dtype=np.float32)


@pytest.mark.parametrize("float_dones", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"T{t}xN{n}" for t, n in SHAPES])
@pytest.mark.parametrize("name", list(TD0_IMPLEMENTATIONS))
def test_td0_variants_match_reference(name: str, shape: tuple[int, int], float_dones: bool) -> None:
    inputs = rollout(*shape, seed=shape[0] + 7 * shape[1], float_dones=float_dones)
    want_y, want_a = td0_reference(*inputs, 0.97)
    got_y, got_a = TD0_IMPLEMENTATIONS[name](*inputs, 0.97)
    assert got_y.dtype == got_a.dtype == np.float32 and got_y.shape == got_a.shape == shape
    np.testing.assert_allclose(got_y, want_y, **TOL)
    np.testing.assert_allclose(got_a, want_a, **TOL)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("float_dones", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"T{t}xN{n}" for t, n in SHAPES])
@pytest.mark.parametrize("name", list(TD_LAMBDA_IMPLEMENTATIONS))
def test_td_lambda_variants_match_reference(name: str, shape: tuple[int, int], float_dones: bool, lam: float) -> None:
    inputs = rollout(*shape, seed=shape[0] * 3 + shape[1], float_dones=float_dones)
    got = TD_LAMBDA_IMPLEMENTATIONS[name](*inputs, 0.99, lam)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_allclose(got, td_lambda_reference(*inputs, 0.99, lam), **TOL)


def test_td_lambda_is_gae_plus_values() -> None:
    r, v, d, lv = rollout(40, 6, seed=5)
    np.testing.assert_allclose(td_lambda_reference(r, v, d, lv, 0.99, 0.9), gae_reference(r, v, d, lv, 0.99, 0.9) + v, **TOL)


@pytest.mark.parametrize("name", list(TD_LAMBDA_IMPLEMENTATIONS))
def test_td_lambda_zero_is_td0_by_hand(name: str) -> None:
    gamma = 0.5
    for dones, want in (([False, False, False], [1.5, 2.75, 4.0]), ([False, True, False], [1.5, 2.0, 4.0])):
        inputs = tiny(dones)
        np.testing.assert_allclose(TD_LAMBDA_IMPLEMENTATIONS[name](*inputs, gamma, 0.0)[:, 0], want, rtol=1e-6)
        for td0 in TD0_IMPLEMENTATIONS.values():
            targets, advantages = td0(*inputs, gamma)
            np.testing.assert_allclose(targets[:, 0], want, rtol=1e-6)
            np.testing.assert_allclose(advantages[:, 0], np.array(want) - [0.5, 1.0, 1.5], rtol=1e-6)


@pytest.mark.parametrize("name", list(TD_LAMBDA_IMPLEMENTATIONS))
def test_td_lambda_one_is_monte_carlo_by_hand(name: str) -> None:
    gamma = 0.5
    # G2 = 3 + 0.5 * 2 (bootstrap) = 4, G1 = 2 + 0.5 * 4 = 4, G0 = 1 + 0.5 * 4 = 3
    np.testing.assert_allclose(TD_LAMBDA_IMPLEMENTATIONS[name](*tiny([False] * 3), gamma, 1.0)[:, 0], [3.0, 4.0, 4.0])
    # episode ends at t=1: G1 = 2, G0 = 1 + 0.5 * 2 = 2; a new episode at t=2 bootstraps: G2 = 4
    np.testing.assert_allclose(TD_LAMBDA_IMPLEMENTATIONS[name](*tiny([False, True, False]), gamma, 1.0)[:, 0], [2.0, 2.0, 4.0])
    # without a bootstrap value it is the plain discounted sum of rewards
    r, v, d, _ = tiny([False] * 3)
    got = TD_LAMBDA_IMPLEMENTATIONS[name](r, v, d, np.zeros(1, dtype=np.float32), 0.9, 1.0)[:, 0]
    np.testing.assert_allclose(got, [1 + 0.9 * 2 + 0.81 * 3, 2 + 0.9 * 3, 3.0], rtol=1e-6)


def test_td_rejects_bad_shapes() -> None:
    r, v, d, lv = rollout(4, 3)
    for fn in (*TD_LAMBDA_IMPLEMENTATIONS.values(), *TD0_IMPLEMENTATIONS.values()):
        args = (0.9, 0.5) if fn in TD_LAMBDA_IMPLEMENTATIONS.values() else (0.9,)
        with pytest.raises(ValueError, match="need rewards/values/dones"):
            fn(r, v, d, lv[:2], *args)


@pytest.mark.parametrize("scale, ddof", [(True, 1), (True, 0), (False, 1)])
@pytest.mark.parametrize("name", list(GROUP_ADVANTAGE_IMPLEMENTATIONS))
def test_group_variants_match_reference(name: str, scale: bool, ddof: int) -> None:
    rng = np.random.default_rng(1)
    rewards = rng.standard_normal((37, 8)).astype(np.float32)
    rewards[3] = 1.0  # a group of equal rewards: std 0, advantages 0
    rewards[4] = (rng.random(8) < 0.5).astype(np.float32)  # binary (verifier) rewards
    fn = GROUP_ADVANTAGE_IMPLEMENTATIONS[name]
    want = group_advantages_reference(rewards, scale=scale, ddof=ddof)
    got = fn(rewards, scale=scale, ddof=ddof)
    assert got.dtype == np.float32 and got.shape == rewards.shape
    np.testing.assert_allclose(got, want, **TOL)
    assert np.all(got[3] == 0.0)
    flat = fn(rewards.ravel(), group_size=8, scale=scale, ddof=ddof)
    assert flat.shape == (37 * 8,)
    np.testing.assert_allclose(flat, want.ravel(), **TOL)


@pytest.mark.parametrize("name", list(GROUP_ADVANTAGE_IMPLEMENTATIONS))
def test_group_advantages_by_hand(name: str) -> None:
    fn = GROUP_ADVANTAGE_IMPLEMENTATIONS[name]
    rewards = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [5.0, 5.0, 8.0]], dtype=np.float32)
    # group 0: mean 2, deviations -1 0 1, unbiased std 1; group 2: mean 6, deviations -1 -1 2, unbiased std sqrt(3)
    want = np.array([[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [-1.0, -1.0, 2.0]])
    np.testing.assert_allclose(fn(rewards, scale=False), want, rtol=1e-6)
    std = np.array([[1.0], [0.0], [math.sqrt(3.0)]])
    np.testing.assert_allclose(fn(rewards, eps=0.1), want / (std + 0.1), rtol=1e-6)
    pop_std = np.array([[math.sqrt(2 / 3)], [0.0], [math.sqrt(2.0)]])
    np.testing.assert_allclose(fn(rewards[0], group_size=3, ddof=0, eps=0.0), [-(1.5**0.5), 0.0, 1.5**0.5], rtol=1e-6)
    np.testing.assert_allclose(fn(rewards, ddof=0, eps=1e-6), want / (pop_std + 1e-6), rtol=1e-5)


def test_group_advantages_reject_bad_shapes() -> None:
    for fn in GROUP_ADVANTAGE_IMPLEMENTATIONS.values():
        with pytest.raises(ValueError, match="need rewards"):
            fn(np.zeros(10, dtype=np.float32))  # flat without a group size
        with pytest.raises(ValueError, match="need rewards"):
            fn(np.zeros(10, dtype=np.float32), group_size=3)
        with pytest.raises(ValueError, match="need rewards"):
            fn(np.zeros((4, 3), dtype=np.float32), group_size=4)
        with pytest.raises(ValueError, match="too small"):
            fn(np.zeros((4, 1), dtype=np.float32))  # unbiased std of one sample
    assert np.array_equal(group_advantages_reference(np.ones((2, 1)), scale=False), np.zeros((2, 1)))


def test_group_advantages_torch_keeps_tensor_type() -> None:
    t = torch.arange(8, dtype=torch.float64).reshape(2, 4)
    got = group_advantages_torch(t)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), group_advantages_reference(t.numpy()), rtol=1e-6)


def kl_inputs(B: int, L: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-probs of sampled tokens under two nearby distributions and a padding mask (row 1 fully padded)."""
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.01, 1.0, (B, L))).astype(np.float32)
    ref = (logp + 0.3 * rng.standard_normal((B, L))).clip(max=0.0).astype(np.float32)
    lengths = rng.integers(1, L + 1, B)
    mask = np.arange(L)[None, :] < lengths[:, None]
    if B > 1:
        mask[1] = False
    return logp, ref, mask


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("name", list(KL_IMPLEMENTATIONS))
def test_kl_variants_match_reference(name: str, estimator: str) -> None:
    logp, ref, mask = kl_inputs(17, 50, seed=3)
    want = kl_reference(logp, ref, mask, estimator)
    for m in (mask, mask.astype(np.float32), mask.astype(np.int64)):
        got = KL_IMPLEMENTATIONS[name](logp, ref, m, estimator)
        assert got.per_sequence.dtype == np.float32 and got.per_sequence.shape == (17,)
        assert isinstance(got.batch_mean, float)
        np.testing.assert_allclose(got.per_sequence, want.per_sequence, **TOL)
        assert got.batch_mean == pytest.approx(want.batch_mean, rel=1e-5, abs=1e-6)
    assert want.per_sequence[1] == 0.0
    assert want.batch_mean == pytest.approx(np.delete(want.per_sequence, 1).mean(), rel=1e-6)


@pytest.mark.parametrize("name", list(KL_IMPLEMENTATIONS))
def test_kl_by_hand(name: str) -> None:
    fn = KL_IMPLEMENTATIONS[name]
    # p = (1/2, 1/4), q = (1/4, 1/2) on two tokens; a second sequence has only its first token unmasked.
    logp = np.log(np.array([[0.5, 0.25], [0.5, 0.25]], dtype=np.float32))
    ref = np.log(np.array([[0.25, 0.5], [0.25, 0.5]], dtype=np.float32))
    mask = np.array([[1, 1], [1, 0]])
    ln2 = math.log(2.0)
    k1 = fn(logp, ref, mask, "k1")
    np.testing.assert_allclose(k1.per_sequence, [0.0, ln2], atol=1e-6)
    assert k1.batch_mean == pytest.approx(ln2 / 2, abs=1e-6)
    k2 = fn(logp, ref, mask, "k2")
    np.testing.assert_allclose(k2.per_sequence, [0.5 * ln2**2] * 2, rtol=1e-5)
    # k3: r = q/p = 1/2 gives -1/2 + ln 2, r = 2 gives 1 - ln 2; their mean is exactly 1/4
    k3 = fn(logp, ref, mask, "k3")
    np.testing.assert_allclose(k3.per_sequence, [0.25, ln2 - 0.5], rtol=1e-5)
    assert k3.batch_mean == pytest.approx((0.25 + ln2 - 0.5) / 2, rel=1e-5)
    same = fn(logp, logp, mask, "k3")  # identical distributions: every estimator is 0
    assert np.all(same.per_sequence == 0.0) and same.batch_mean == 0.0


@pytest.mark.parametrize("name", list(KL_IMPLEMENTATIONS))
def test_kl_masks_are_respected(name: str) -> None:
    logp, ref, mask = kl_inputs(6, 20, seed=8)
    garbage_logp, garbage_ref = logp.copy(), ref.copy()
    garbage_logp[~mask] = np.nan
    garbage_ref[~mask] = -np.inf
    for est in KL_ESTIMATORS:
        clean, dirty = (KL_IMPLEMENTATIONS[name](lp, rf, mask, est) for lp, rf in ((logp, ref), (garbage_logp, garbage_ref)))
        np.testing.assert_allclose(dirty.per_sequence, clean.per_sequence, rtol=1e-6)
        assert dirty.batch_mean == pytest.approx(clean.batch_mean, rel=1e-6)
    empty = KL_IMPLEMENTATIONS[name](logp, ref, np.zeros_like(mask), "k3")
    assert np.all(empty.per_sequence == 0.0) and empty.batch_mean == 0.0


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(np.float32, (3, 7), elements=st.floats(-30, 0, width=32)),
    hnp.arrays(np.float32, (3, 7), elements=st.floats(-30, 0, width=32)),
)
def test_k3_is_non_negative(logp: np.ndarray, ref: np.ndarray) -> None:
    mask = np.ones_like(logp, dtype=bool)
    for fn in KL_IMPLEMENTATIONS.values():
        res = fn(logp, ref, mask, "k3")
        assert np.all(res.per_sequence >= 0.0) and res.batch_mean >= 0.0


def test_kl_torch_is_differentiable_and_validates() -> None:
    logp, ref, mask = (torch.from_numpy(x) for x in kl_inputs(4, 9, seed=2))
    logp.requires_grad_(True)
    res = kl_torch(logp, ref, mask, "k3")
    res.batch_mean.backward()
    assert logp.grad is not None and torch.all(logp.grad[~mask] == 0)
    for fn in KL_IMPLEMENTATIONS.values():
        with pytest.raises(ValueError, match="unknown KL estimator"):
            fn(logp.detach().numpy(), ref.numpy(), mask.numpy(), "k4")
        with pytest.raises(ValueError, match="one shape"):
            fn(logp.detach().numpy(), ref.numpy()[:, :3], mask.numpy(), "k1")

"""Tests for rlbench.components.returns.gae: every GAE variant against the plain reference and hand-computed values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlbench.components.returns import gae as adv
from rlbench.components.returns.gae import (
    GAE_IMPLEMENTATIONS,
    bootstrap_truncated,
    gae_reference,
    gae_returns,
    gae_torch,
    get_gae,
)

FAST = ["numpy", "torch", "numba"]
SHAPES = [(1, 1), (5, 3), (128, 8), (64, 33)]
TOL = {"rtol": 1e-5, "atol": 1e-5}


def make_inputs(T: int, N: int, seed: int = 0, done_p: float = 0.2, float_dones: bool = False) -> tuple[np.ndarray, ...]:
    """Random float32 rewards/values/last_value and dones at random places (about ``done_p`` of the steps)."""
    rng = np.random.default_rng(seed)
    rewards = rng.standard_normal((T, N)).astype(np.float32)
    values = rng.standard_normal((T, N)).astype(np.float32)
    dones = rng.random((T, N)) < done_p
    last_value = rng.standard_normal(N).astype(np.float32)
    return rewards, values, dones.astype(np.float32) if float_dones else dones, last_value


@pytest.fixture(params=[False, True], ids=["fast-path", "scan-path"])
def force_scan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Runs a test once as configured and once with the closed forms disabled (reverse-scan fallbacks)."""
    if request.param:
        monkeypatch.setattr(adv, "_NUMPY_CLOSED_FORM_MAX_N", -1)
        monkeypatch.setattr(adv, "_TORCH_CPU_CLOSED_FORM_MAX_N", -1)
    return request.param


@pytest.mark.parametrize("float_dones", [False, True], ids=["bool-dones", "float-dones"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"T{t}xN{n}" for t, n in SHAPES])
@pytest.mark.parametrize("name", FAST)
def test_variant_matches_reference(name: str, shape: tuple[int, int], float_dones: bool, force_scan: bool) -> None:
    inputs = make_inputs(*shape, seed=shape[0] * 100 + shape[1], float_dones=float_dones)
    expected = gae_reference(*inputs, 0.99, 0.95)
    got = GAE_IMPLEMENTATIONS[name](*inputs, 0.99, 0.95)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_allclose(got, expected, **TOL)


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.0), (0.0, 0.95), (1.0, 1.0), (0.5, 0.5)])
@pytest.mark.parametrize("name", FAST)
def test_edge_discounts_match_reference(name: str, gamma: float, lam: float) -> None:
    inputs = make_inputs(64, 5, seed=3)
    np.testing.assert_allclose(GAE_IMPLEMENTATIONS[name](*inputs, gamma, lam), gae_reference(*inputs, gamma, lam), **TOL)


@pytest.mark.parametrize("name", FAST)
def test_long_rollout_beyond_closed_form_range(name: str) -> None:
    inputs = make_inputs(3000, 4, seed=4, done_p=0.001)  # (T - 1) * |ln(0.5 * 0.9)| > 500: falls back to the scan
    np.testing.assert_allclose(GAE_IMPLEMENTATIONS[name](*inputs, 0.5, 0.9), gae_reference(*inputs, 0.5, 0.9), **TOL)


@pytest.mark.parametrize("name", list(GAE_IMPLEMENTATIONS))
def test_hand_computed_values(name: str) -> None:
    # gamma = 0.9, lam = 0.8 (gamma * lam = 0.72). Env 0: done at t=1; env 1: no done.
    rewards = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]], dtype=np.float32)
    values = np.array([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0]], dtype=np.float32)
    dones = np.array([[False, False], [True, False], [False, False]])
    last_value = np.array([2.0, 1.0], dtype=np.float32)
    # env 0: delta2 = 3 + 0.9 * 2.0 - 1.5 = 3.3                       A2 = 3.3
    #        delta1 = 2 + 0 (done: no bootstrap) - 1.0 = 1.0           A1 = 1.0 (no propagation from t=2)
    #        delta0 = 1 + 0.9 * 1.0 - 0.5 = 1.4                        A0 = 1.4 + 0.72 * 1.0 = 2.12
    # env 1: delta = [1, 1, 1 + 0.9 * 1.0] = [1, 1, 1.9]              A2 = 1.9
    #        A1 = 1 + 0.72 * 1.9 = 2.368                               A0 = 1 + 0.72 * 2.368 = 2.70496
    expected = np.array([[2.12, 2.70496], [1.0, 2.368], [3.3, 1.9]], dtype=np.float32)
    got = get_gae(name)(rewards, values, dones, last_value, 0.9, 0.8)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gae_returns(got, values), expected + values, rtol=1e-6)


def episodewise_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    final_values: np.ndarray,
    last_value: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Independent reference: GAE per episode, bootstrapping with V(final_obs) on truncation, 0 on termination."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for i in range(N):
        start = 0
        for t in range(T):
            if not (terminated[t, i] or truncated[t, i] or t == T - 1):
                continue
            if terminated[t, i]:
                bootstrap = 0.0
            elif truncated[t, i]:
                bootstrap = float(final_values[t, i])
            else:  # the rollout ends mid-episode
                bootstrap = float(last_value[i])
            next_value, a = bootstrap, 0.0
            for k in range(t, start - 1, -1):
                a = rewards[k, i] + gamma * next_value - values[k, i] + gamma * lam * a
                out[k, i] = a
                next_value = float(values[k, i])
            start = t + 1
    return out


@pytest.mark.parametrize("name", list(GAE_IMPLEMENTATIONS))
def test_truncation_bootstrap(name: str) -> None:
    T, N, gamma, lam = 40, 6, 0.97, 0.9
    rng = np.random.default_rng(7)
    rewards, values, _, last_value = make_inputs(T, N, seed=8)
    terminated = rng.random((T, N)) < 0.1
    truncated = rng.random((T, N)) < 0.1  # some steps are both: termination wins (no bootstrap)
    final_values = np.where(truncated, rng.standard_normal((T, N)), np.nan).astype(np.float32)  # garbage elsewhere
    expected = episodewise_gae(rewards, values, terminated, truncated, final_values, last_value, gamma, lam)
    rewards_before = rewards.copy()
    boot = bootstrap_truncated(rewards, truncated & ~terminated, final_values, gamma)
    np.testing.assert_array_equal(rewards, rewards_before)  # a copy, input untouched
    got = get_gae(name)(boot, values, terminated | truncated, last_value, gamma, lam)
    np.testing.assert_allclose(got, expected, **TOL)


def test_gae_torch_takes_and_returns_tensors() -> None:
    r, v, d, lv = (torch.from_numpy(x) for x in make_inputs(32, 4, seed=9))
    v.requires_grad_(True)
    got = gae_torch(r, v, d, lv, 0.99, 0.95)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and not got.requires_grad
    expected = gae_reference(r.numpy(), v.detach().numpy(), d.numpy(), lv.numpy(), 0.99, 0.95)
    np.testing.assert_allclose(got.numpy(), expected, **TOL)


def test_gae_numpy_out_buffer_is_reused(force_scan: bool) -> None:
    inputs = make_inputs(128, 8, seed=10)
    out = np.full((128, 8), np.nan, dtype=np.float32)
    assert adv.gae_numpy(*inputs, 0.99, 0.95, out=out) is out
    np.testing.assert_allclose(out, gae_reference(*inputs, 0.99, 0.95), **TOL)


def test_shape_mismatch_raises() -> None:
    r, v, d, lv = make_inputs(4, 3)
    with pytest.raises(ValueError, match="last_value"):
        adv.gae_numpy(r, v, d, lv[:2], 0.99, 0.95)


def test_get_gae_unknown_name_suggests() -> None:
    assert get_gae("numpy") is adv.gae_numpy
    with pytest.raises(ValueError, match="Did you mean 'numpy'"):
        get_gae("nump")


@pytest.mark.slow
def test_import_does_not_import_numba_or_torch() -> None:
    root = Path(__file__).resolve().parents[3]
    code = "import sys, rlbench.components.returns.gae; print('numba' in sys.modules, 'torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_gae_numba_without_numba_raises_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    adv._numba_kernel.cache_clear()
    monkeypatch.setitem(sys.modules, "numba", None)  # makes `import numba` raise ImportError
    try:
        with pytest.raises(ImportError, match="gae_numba needs numba"):
            adv.gae_numba(*make_inputs(3, 2), 0.99, 0.95)
    finally:
        adv._numba_kernel.cache_clear()


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    T=st.integers(1, 40),
    N=st.integers(1, 5),
    gamma=st.floats(0.0, 1.0),
    lam=st.floats(0.0, 1.0),
)
def test_property_fast_variants_match_reference(data: st.DataObject, T: int, N: int, gamma: float, lam: float) -> None:
    elements = st.floats(-10.0, 10.0, width=32)
    rewards = data.draw(hnp.arrays(np.float32, (T, N), elements=elements))
    values = data.draw(hnp.arrays(np.float32, (T, N), elements=elements))
    dones = data.draw(hnp.arrays(np.bool_, (T, N)))
    last_value = data.draw(hnp.arrays(np.float32, (N,), elements=elements))
    expected = gae_reference(rewards, values, dones, last_value, gamma, lam)
    for name in FAST:
        got = GAE_IMPLEMENTATIONS[name](rewards, values, dones, last_value, gamma, lam)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4, err_msg=name)

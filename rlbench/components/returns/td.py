"""TD(0) and TD(lambda) targets: a plain float64 reference and fast NumPy / numba variants.

Same contract as GAE (:mod:`rlbench.components.returns.gae`): ``(T, N)`` arrays, ``d_t`` ends the episode at
``t``, truncation folded into the rewards by the caller::

    TD(0):      y_t = r_t + gamma * (1 - d_t) * V[t+1],    advantage y_t - V[t]             (V[T] = last_value)
    TD(lambda): G_t = r_t + gamma * (1 - d_t) * ((1 - lam) * V[t+1] + lam * G[t+1])         (G[T] = last_value)

so ``lam = 0`` is TD(0), ``lam = 1`` the Monte-Carlo return (bootstrapped with ``last_value``), and ``G = A_GAE + V``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from rlbench.components.returns.gae import _as_inputs

if TYPE_CHECKING:
    import torch

    _ArrayOrTensor = torch.Tensor | np.ndarray


def td0_reference(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Plain-Python TD(0) targets and advantages (float64 arithmetic, float32 results).

    Args:
        rewards: Rewards, shape (T, N).
        values: ``V(s_t)``, shape (T, N).
        dones: True where the episode ended at step t (bool or float), shape (T, N).
        last_value: ``V(s_T)`` of the observation after the last step, shape (N,).
        gamma: Discount factor.

    Returns:
        ``(targets, advantages)``: ``y_t`` and ``y_t - V[t]``, float32 arrays of shape (T, N).
    """
    r, v, d, lv = (x.tolist() for x in _as_inputs(rewards, values, dones, last_value))
    T, N = len(r), len(lv)
    targets, advantages = np.empty((T, N)), np.empty((T, N))
    for t in range(T):
        for i in range(N):
            next_value = 0.0 if d[t][i] else (lv[i] if t == T - 1 else v[t + 1][i])
            targets[t, i] = r[t][i] + gamma * next_value
            advantages[t, i] = targets[t, i] - v[t][i]
    return targets.astype(np.float32), advantages.astype(np.float32)


def td0_numpy(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized TD(0) targets and advantages (float32, a handful of whole-array ufunc calls).

    Args:
        rewards: Rewards, shape (T, N).
        values: ``V(s_t)``, shape (T, N).
        dones: True where the episode ended at step t (bool or float), shape (T, N).
        last_value: ``V(s_T)`` of the observation after the last step, shape (N,).
        gamma: Discount factor.

    Returns:
        ``(targets, advantages)``, float32 arrays of shape (T, N).
    """
    r, v, d, lv = _as_inputs(rewards, values, dones, last_value)
    targets = np.concatenate((v[1:], lv[None])) * np.where(d, np.float32(0.0), np.float32(gamma))
    targets += r
    return targets, targets - v


def td_lambda_reference(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray, gamma: float, lam: float
) -> np.ndarray:
    """Plain-Python TD(lambda) returns (the recursive definition, float64 arithmetic, float32 result).

    Args:
        rewards: Rewards, shape (T, N).
        values: ``V(s_t)``, shape (T, N).
        dones: True where the episode ended at step t (bool or float), shape (T, N).
        last_value: ``V(s_T)`` of the observation after the last step, shape (N,).
        gamma: Discount factor.
        lam: Lambda in [0, 1].

    Returns:
        Lambda-returns, float32 array of shape (T, N).
    """
    r, v, d, lv = (x.tolist() for x in _as_inputs(rewards, values, dones, last_value))
    T, N = len(r), len(lv)
    out = np.empty((T, N))
    for i in range(N):
        next_value = next_return = float(lv[i])
        for t in reversed(range(T)):
            not_done = 0.0 if d[t][i] else 1.0
            next_return = r[t][i] + gamma * not_done * ((1.0 - lam) * next_value + lam * next_return)
            out[t, i] = next_return
            next_value = v[t][i]
    return out.astype(np.float32)


def td_lambda_numpy(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray, gamma: float, lam: float
) -> np.ndarray:
    """TD(lambda) returns vectorized over N: whole-array coefficients, then a reverse scan of two ufunc calls per row.

    Args:
        rewards: Rewards, shape (T, N).
        values: ``V(s_t)``, shape (T, N).
        dones: True where the episode ended at step t (bool or float), shape (T, N).
        last_value: ``V(s_T)`` of the observation after the last step, shape (N,).
        gamma: Discount factor.
        lam: Lambda in [0, 1].

    Returns:
        Lambda-returns, float32 array of shape (T, N).
    """
    r, v, d, lv = _as_inputs(rewards, values, dones, last_value)
    gamma_nd = np.where(d, np.float32(0.0), np.float32(gamma))  # gamma * (1 - d_t)
    out = np.concatenate((v[1:], lv[None])) * gamma_nd  # becomes b_t = r_t + gamma_nd_t * (1 - lam) * V[t+1]
    out[:-1] *= np.float32(1.0 - lam)
    out += r
    gamma_nd *= np.float32(lam)  # a_t; G_t = b_t + a_t * G[t+1], last row: b = r + gamma_nd * V[T] = G[T-1]
    rows, coef_rows, tmp = list(out), list(gamma_nd), np.empty(r.shape[1], dtype=np.float32)
    for t in range(r.shape[0] - 2, -1, -1):
        np.multiply(coef_rows[t], rows[t + 1], out=tmp)
        np.add(rows[t], tmp, out=rows[t])
    return out


def _td_lambda_kernel(r: np.ndarray, v: np.ndarray, d: np.ndarray, lv: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Reverse scan, t outer and envs inner, float64 carries; jitted lazily by :func:`_numba_td_lambda`."""
    T, N = r.shape
    next_value, next_return = lv.astype(np.float64), lv.astype(np.float64)
    out = np.empty((T, N), dtype=np.float32)
    for t in range(T - 1, -1, -1):
        for i in range(N):
            not_done = 0.0 if d[t, i] else 1.0
            next_return[i] = r[t, i] + gamma * not_done * ((1.0 - lam) * next_value[i] + lam * next_return[i])
            out[t, i] = next_return[i]
            next_value[i] = v[t, i]
    return out


@functools.cache
def _numba_td_lambda() -> Callable[..., np.ndarray]:
    """Imports numba (ImportError if missing) and jits :func:`_td_lambda_kernel`, cached on disk
    (:func:`rlbench.core.jit.njit`)."""
    from rlbench.core.jit import njit

    return njit(_td_lambda_kernel, nogil=True)


def td_lambda_numba(
    rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray, gamma: float, lam: float
) -> np.ndarray:
    """Numba-jitted TD(lambda) returns (float64 carries); numba is imported on the first call.

    Args:
        rewards: Rewards, shape (T, N).
        values: ``V(s_t)``, shape (T, N).
        dones: True where the episode ended at step t (bool or float), shape (T, N).
        last_value: ``V(s_T)`` of the observation after the last step, shape (N,).
        gamma: Discount factor.
        lam: Lambda in [0, 1].

    Returns:
        Lambda-returns, float32 array of shape (T, N).

    Raises:
        ImportError: If numba is not installed.
    """
    return _numba_td_lambda()(*_as_inputs(rewards, values, dones, last_value), float(gamma), float(lam))


_Fn = Callable[..., np.ndarray]
TD0_IMPLEMENTATIONS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {"reference": td0_reference, "numpy": td0_numpy}
TD_LAMBDA_IMPLEMENTATIONS: dict[str, _Fn] = {
    "reference": td_lambda_reference,
    "numpy": td_lambda_numpy,
    "numba": td_lambda_numba,
}

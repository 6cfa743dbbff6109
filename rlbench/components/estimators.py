"""TD(0) / TD(lambda) targets, GRPO group-relative advantages and token-level KL estimators.

Each has a plain-Python reference (float64 arithmetic) and fast variants tested against it; the registries map names to
NumPy-in/NumPy-out callables of one signature. TD targets follow the GAE contract of
:mod:`rlbench.components.advantages` (``(T, N)`` arrays, ``d_t`` ends the episode at ``t``, truncation folded into
the rewards by the caller)::

    TD(0):      y_t = r_t + gamma * (1 - d_t) * V[t+1],    advantage y_t - V[t]             (V[T] = last_value)
    TD(lambda): G_t = r_t + gamma * (1 - d_t) * ((1 - lam) * V[t+1] + lam * G[t+1])         (G[T] = last_value)

so ``lam = 0`` is TD(0), ``lam = 1`` the Monte-Carlo return (bootstrapped with ``last_value``), and ``G = A_GAE + V``.
GRPO advantages: ``(r - group mean) / (group std + eps)``. KL(p || q) per token from ``logp = log p`` (policy) and
``ref_logp = log q`` (reference): ``k1 = log p - log q``, ``k2 = 0.5 (log p - log q)^2``, ``k3 = (r - 1) - log r``
with ``r = q / p`` (Schulman; unbiased, ``>= 0``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rlbench.components.advantages import _as_inputs

if TYPE_CHECKING:
    import torch

    _ArrayOrTensor = torch.Tensor | np.ndarray

KL_ESTIMATORS = ("k1", "k2", "k3")


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
    """Imports numba (ImportError if missing) and jits :func:`_td_lambda_kernel`; ``cache=True`` keeps it on disk."""
    import numba

    return numba.njit(cache=True, nogil=True)(_td_lambda_kernel)


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


def _groups_shape(shape: tuple[int, ...], group_size: int | None, ddof: int, scale: bool) -> tuple[int, int]:
    """Validates a rewards shape and returns ``(num_prompts, G)``."""
    if len(shape) == 2 and group_size in (None, shape[1]):
        P, G = shape
    elif len(shape) == 1 and group_size is not None and group_size > 0 and shape[0] % group_size == 0:
        P, G = shape[0] // group_size, group_size
    else:
        raise ValueError(f"need rewards (num_prompts, G), or flat with a dividing group_size; got {shape}, {group_size}")
    if G < 1 or (scale and ddof >= G):
        raise ValueError(f"group size {G} is too small for a std with ddof={ddof}")
    return P, G


def group_advantages_reference(
    rewards: np.ndarray, group_size: int | None = None, scale: bool = True, eps: float = 1e-6, ddof: int = 1
) -> np.ndarray:
    """Plain-Python GRPO advantages: the reward minus its group's mean, divided by the group's std plus ``eps``.

    Args:
        rewards: Rewards, shape (num_prompts, G), or flat (num_prompts * G,) with ``group_size``.
        group_size: G for flat rewards; for 2-D rewards ``None`` or ``rewards.shape[1]``.
        scale: Divide by ``std + eps``; False only subtracts the mean.
        eps: Added to the std.
        ddof: Delta degrees of freedom of the std (1: unbiased, like ``torch.std``; 0: population std).

    Returns:
        Advantages, float32, same shape as ``rewards``.

    Raises:
        ValueError: On a bad shape or group size.
    """
    r = np.asarray(rewards, dtype=np.float32)
    P, G = _groups_shape(r.shape, group_size, ddof, scale)
    out = []
    for group in r.reshape(P, G).tolist():
        mean = sum(group) / G
        dev = [x - mean for x in group]
        div = math.sqrt(sum(x * x for x in dev) / (G - ddof)) + eps if scale else 1.0
        out.append([x / div for x in dev])
    return np.array(out, dtype=np.float32).reshape(r.shape)


def group_advantages_numpy(
    rewards: np.ndarray, group_size: int | None = None, scale: bool = True, eps: float = 1e-6, ddof: int = 1
) -> np.ndarray:
    """Vectorized GRPO advantages (float32 throughout); same arguments as :func:`group_advantages_reference`.

    Args:
        rewards: Rewards, shape (num_prompts, G), or flat (num_prompts * G,) with ``group_size``.
        group_size: G for flat rewards; for 2-D rewards ``None`` or ``rewards.shape[1]``.
        scale: Divide by ``std + eps``; False only subtracts the mean.
        eps: Added to the std.
        ddof: Delta degrees of freedom of the std.

    Returns:
        Advantages, float32, same shape as ``rewards``.
    """
    r = np.asarray(rewards, dtype=np.float32)
    P, G = _groups_shape(r.shape, group_size, ddof, scale)
    dev = r.reshape(P, G) - r.reshape(P, G).mean(axis=1, keepdims=True)
    if scale:  # sqrt(sum dev^2 / (G - ddof)) + eps
        dev /= np.sqrt(np.einsum("pg,pg->p", dev, dev)[:, None] * np.float32(1.0 / (G - ddof))) + np.float32(eps)
    return dev.reshape(r.shape)


def group_advantages_torch(
    rewards: _ArrayOrTensor, group_size: int | None = None, scale: bool = True, eps: float = 1e-6, ddof: int = 1
) -> _ArrayOrTensor:
    """GRPO advantages with torch (any device, under ``no_grad``); a NumPy input runs on CPU and comes back as NumPy.

    Args:
        rewards: Rewards, shape (num_prompts, G), or flat (num_prompts * G,) with ``group_size``.
        group_size: G for flat rewards; for 2-D rewards ``None`` or ``rewards.shape[1]``.
        scale: Divide by ``std + eps``; False only subtracts the mean.
        eps: Added to the std.
        ddof: Delta degrees of freedom of the std.

    Returns:
        Advantages with the shape, dtype and device of ``rewards`` (float32 NumPy for a NumPy input).
    """
    import torch

    if isinstance(rewards, np.ndarray):
        r = torch.from_numpy(np.ascontiguousarray(rewards, dtype=np.float32))
        return group_advantages_torch(r, group_size, scale, eps, ddof).numpy()
    P, G = _groups_shape(tuple(rewards.shape), group_size, ddof, scale)
    with torch.no_grad():
        grouped = rewards.reshape(P, G)
        dev = grouped - grouped.mean(dim=1, keepdim=True)
        if scale:
            dev /= torch.std(grouped, dim=1, correction=ddof, keepdim=True).add_(eps)
        return dev.reshape(rewards.shape)


class KLResult(NamedTuple):
    """Masked KL estimates: ``per_sequence`` token means, shape (batch,) (0 for a sequence without tokens), and
    ``batch_mean``, their mean over the sequences with at least one token (0.0 if none)."""

    per_sequence: Any
    batch_mean: Any


def _kl_inputs(logp: np.ndarray, ref_logp: np.ndarray, mask: np.ndarray, estimator: str) -> tuple[np.ndarray, ...]:
    """Coerces log-probs to float32 and the mask to bool; checks shapes and the estimator name."""
    lp, rlp, m = np.asarray(logp, dtype=np.float32), np.asarray(ref_logp, dtype=np.float32), np.asarray(mask) != 0
    _check_kl(estimator, lp.shape, rlp.shape, m.shape)
    return lp, rlp, m


def _check_kl(estimator: str, *shapes: tuple[int, ...]) -> None:
    """Raises ValueError for an unknown estimator, or log-probs and mask not all of one [batch, tokens] shape."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose from {KL_ESTIMATORS}")
    if len(shapes[0]) != 2 or any(shape != shapes[0] for shape in shapes):
        raise ValueError(f"need logp, ref_logp, mask of one shape [batch, tokens]; got {[tuple(x) for x in shapes]}")


def kl_reference(logp: np.ndarray, ref_logp: np.ndarray, mask: np.ndarray, estimator: str = "k3") -> KLResult:
    """Plain-Python token-level KL estimate (float64 arithmetic); masked-out tokens are never read.

    Args:
        logp: Log-probabilities of the sampled tokens under the policy ``p``, shape [batch, tokens].
        ref_logp: Their log-probabilities under the reference ``q``, same shape.
        mask: 1 for tokens that count, 0 for padding (bool, int or float), same shape.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        :class:`KLResult` with a float32 (batch,) array and a Python float.

    Raises:
        ValueError: On mismatched shapes or an unknown estimator.
    """
    lp, rlp, m = (x.tolist() for x in _kl_inputs(logp, ref_logp, mask, estimator))
    per_seq, counted = [], []
    for lp_row, rlp_row, m_row in zip(lp, rlp, m):
        ks = []
        for a, b, keep in zip(lp_row, rlp_row, m_row):
            if keep:
                log_r = b - a  # log r = log q - log p
                ks.append(-log_r if estimator == "k1" else 0.5 * log_r**2 if estimator == "k2" else math.expm1(log_r) - log_r)
        per_seq.append(sum(ks) / len(ks) if ks else 0.0)
        counted += per_seq[-1:] if ks else []
    return KLResult(np.array(per_seq, dtype=np.float32), sum(counted) / max(len(counted), 1))


def kl_numpy(logp: np.ndarray, ref_logp: np.ndarray, mask: np.ndarray, estimator: str = "k3") -> KLResult:
    """Vectorized token-level KL estimate (float32; k3 as ``max(expm1(log r) - log r, 0)``).

    Args:
        logp: Log-probabilities of the sampled tokens under the policy ``p``, shape [batch, tokens].
        ref_logp: Their log-probabilities under the reference ``q``, same shape.
        mask: 1 for tokens that count, 0 for padding (bool, int or float), same shape.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        :class:`KLResult` with a float32 (batch,) array and a Python float.

    Raises:
        ValueError: On mismatched shapes or an unknown estimator.
    """
    lp, rlp, m = _kl_inputs(logp, ref_logp, mask, estimator)
    k = np.subtract(lp, rlp)  # log p - log q = -log r
    if estimator == "k2":
        np.multiply(np.square(k, out=k), np.float32(0.5), out=k)
    elif estimator == "k3":
        np.maximum(np.add(k, np.expm1(np.negative(k)), out=k), np.float32(0.0), out=k)
    np.copyto(k, np.float32(0.0), where=~m)  # padding may hold anything (inf, nan)
    per_seq = np.add.reduce(k, axis=1)
    counts = np.count_nonzero(m, axis=1)
    np.divide(per_seq, counts, out=per_seq, where=counts > 0)
    return KLResult(per_seq, float(per_seq.sum(dtype=np.float64)) / max(int(np.count_nonzero(counts)), 1))


def kl_torch(logp: _ArrayOrTensor, ref_logp: _ArrayOrTensor, mask: _ArrayOrTensor, estimator: str = "k3") -> KLResult:
    """Token-level KL estimate with torch (any device; differentiable in ``logp``); NumPy inputs run on CPU.

    Args:
        logp: Log-probabilities of the sampled tokens under the policy ``p``, shape [batch, tokens].
        ref_logp: Their log-probabilities under the reference ``q``, same shape.
        mask: 1 for tokens that count, 0 for padding (bool, int or float), same shape.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        :class:`KLResult` of a (batch,) tensor and a 0-d tensor; for NumPy inputs a float32 array and a Python float.

    Raises:
        ValueError: On mismatched shapes or an unknown estimator.
    """
    import torch

    if isinstance(logp, np.ndarray):
        lp, rlp, m = (torch.from_numpy(np.ascontiguousarray(x)) for x in _kl_inputs(logp, ref_logp, mask, estimator))
        with torch.no_grad():
            res = kl_torch(lp, rlp, m, estimator)
        return KLResult(res.per_sequence.numpy(), float(res.batch_mean))
    _check_kl(estimator, logp.shape, ref_logp.shape, mask.shape)
    diff = logp - ref_logp  # -log r
    k = diff if estimator == "k1" else 0.5 * diff.square() if estimator == "k2" else (torch.expm1(-diff) + diff).clamp_min(0.0)
    keep = mask != 0
    counts = keep.sum(1)
    per_seq = torch.where(keep, k, 0.0).sum(1) / counts.clamp_min(1)
    return KLResult(per_seq, per_seq.sum() / (counts > 0).sum().clamp_min(1))


_Fn = Callable[..., np.ndarray]
TD0_IMPLEMENTATIONS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {"reference": td0_reference, "numpy": td0_numpy}
TD_LAMBDA_IMPLEMENTATIONS: dict[str, _Fn] = {
    "reference": td_lambda_reference,
    "numpy": td_lambda_numpy,
    "numba": td_lambda_numba,
}
GROUP_ADVANTAGE_IMPLEMENTATIONS: dict[str, _Fn] = dict(
    reference=group_advantages_reference, numpy=group_advantages_numpy, torch=group_advantages_torch
)
KL_IMPLEMENTATIONS: dict[str, Callable[..., KLResult]] = {"reference": kl_reference, "numpy": kl_numpy, "torch": kl_torch}

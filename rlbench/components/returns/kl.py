"""Token-level KL(p || q) estimators for a KL penalty to a frozen reference policy.

From ``logp = log p`` (policy) and ``ref_logp = log q`` (reference): ``k1 = log p - log q``,
``k2 = 0.5 (log p - log q)^2``, ``k3 = (r - 1) - log r`` with ``r = q / p`` (Schulman; unbiased, ``>= 0``).
A plain reference, NumPy and torch variants.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import torch

    _ArrayOrTensor = torch.Tensor | np.ndarray


KL_ESTIMATORS = ("k1", "k2", "k3")


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


KL_IMPLEMENTATIONS: dict[str, Callable[..., KLResult]] = {"reference": kl_reference, "numpy": kl_numpy, "torch": kl_torch}

"""GRPO group-relative advantages ``(r - group mean) / (group std + eps)``: a plain reference, NumPy and torch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    _ArrayOrTensor = torch.Tensor | np.ndarray


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


_Fn = Callable[..., np.ndarray]

GROUP_ADVANTAGE_IMPLEMENTATIONS: dict[str, _Fn] = dict(
    reference=group_advantages_reference, numpy=group_advantages_numpy, torch=group_advantages_torch
)

"""Polyak averaging of target networks: ``target <- (1 - tau) * target + tau * online``.

Variants (:data:`POLYAK`): ``"loop"`` updates each target tensor with ``mul_``/``add_`` in a Python loop (SB3);
``"foreach"`` is one ``torch._foreach_lerp_`` over all of them. Both are equal within float rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def polyak_loop(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``t <- (1 - tau) t + tau s`` per tensor, two in-place ops each (the plain variant)."""
    with torch.no_grad():
        for t, s in zip(targets, sources):
            t.mul_(1.0 - tau).add_(s, alpha=tau)


def polyak_foreach(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``t <- t + tau (s - t)`` for every tensor in one ``torch._foreach_lerp_`` call."""
    with torch.no_grad():
        torch._foreach_lerp_(targets, sources, tau)


POLYAK: dict[str, Callable[[list[torch.Tensor], list[torch.Tensor], float], None]] = {
    "loop": polyak_loop,
    "foreach": polyak_foreach,
}

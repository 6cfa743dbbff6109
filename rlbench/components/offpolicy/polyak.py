"""Polyak averaging of target networks: ``target <- (1 - tau) * target + tau * online``.

Variants (:data:`POLYAK`), equal within float rounding:

* ``"copy"``: CleanRL's form, ``t.copy_(tau * s + (1 - tau) * t)`` per tensor (three kernels and two temporaries each);
* ``"loop"``: ``mul_``/``add_`` in place per tensor (SB3's ``polyak_update``, two kernels each);
* ``"lerp"``: one ``lerp_`` per tensor;
* ``"foreach"``: one ``torch._foreach_lerp_`` over all of them (one call; on a GPU, a few fused launches for the lot).

``rlbench run target-update`` times them side by side on every device at an off-policy agent's shapes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def polyak_copy(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``t <- tau s + (1 - tau) t`` per tensor, as a new tensor copied back (the form CleanRL's scripts write)."""
    with torch.no_grad():
        for t, s in zip(targets, sources):
            t.copy_(tau * s + (1.0 - tau) * t)


def polyak_loop(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``t <- (1 - tau) t + tau s`` per tensor, two in-place ops each (the plain variant)."""
    with torch.no_grad():
        for t, s in zip(targets, sources):
            t.mul_(1.0 - tau).add_(s, alpha=tau)


def polyak_lerp(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``t <- t + tau (s - t)`` per tensor, one ``lerp_`` each."""
    with torch.no_grad():
        for t, s in zip(targets, sources):
            t.lerp_(s, tau)


def polyak_foreach(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """``t <- t + tau (s - t)`` for every tensor in one ``torch._foreach_lerp_`` call."""
    with torch.no_grad():
        torch._foreach_lerp_(targets, sources, tau)


POLYAK: dict[str, Callable[[list[torch.Tensor], list[torch.Tensor], float], None]] = {
    "copy": polyak_copy,
    "loop": polyak_loop,
    "lerp": polyak_lerp,
    "foreach": polyak_foreach,
}

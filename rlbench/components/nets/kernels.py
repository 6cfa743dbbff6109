"""Drop-in forms of three torch ops whose CPU kernels measured slow at the shapes of small RL networks.

The hand-written gradient paths (:mod:`rlbench.components.ppo.manual`) call these instead of the plain ops. Each
returns what the plain op returns, to float rounding, and each is tested against it
(``tests/components/nets/test_kernels.py``). Measured on a 1-thread AVX-512 EPYC with torch 2.13 (CPU build), for
a PPO minibatch of 512 rows through the fused 64-64 actor-critic (``(2, 512, 64)`` activations, a 2-wide head):

* ``torch.tanh_`` took about 190 µs where NumPy's ``tanh`` on the same memory took 28 µs;
* a batched product with a narrow output, ``(2, 512, 64) @ (2, 64, 2)``, took 70 µs (as long as the 64-wide one
  that does 32 times the arithmetic); computed transposed, ``((2, 2, 64) @ (2, 64, 512))ᵀ``, it took 14 µs;
* the weight gradient of that head, ``(2, 64, 512) @ (2, 512, 2)``, took 78 µs, and transposed 13 µs.

The transposed forms win for outputs narrower than :data:`NARROW` columns and lose from about 16 up. ``rlbench run
update-ops`` keeps each op and the whole PPO minibatch step measured beside torch's plain form.
"""

from __future__ import annotations

import numpy as np
import torch

NARROW = 16
"""Outputs with fewer columns than this are computed in the transposed form."""


def tanh_(h: torch.Tensor) -> torch.Tensor:
    """``tanh`` in place: NumPy's kernel on the tensor's memory for a contiguous CPU tensor without grad."""
    if h.device.type == "cpu" and h.is_contiguous() and not h.requires_grad and h.dtype in (torch.float32, torch.float64):
        a = h.numpy()
        np.tanh(a, out=a)
        return h
    return torch.tanh_(h)


def baddbmm(bias: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``bias + x @ w`` for batched ``x (E, B, k)`` and ``w (E, k, n)``; a non-contiguous view when ``n`` is narrow."""
    if w.shape[-1] < NARROW:
        return torch.baddbmm(bias.transpose(1, 2), w.transpose(1, 2), x.transpose(1, 2)).transpose(1, 2)
    return torch.baddbmm(bias, x, w)


def weight_grad(x: torch.Tensor, g: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``xᵀ @ g`` (the weight gradient of a layer with input ``x`` and output gradient ``g``), into ``out`` if given.

    ``x`` is ``(B, k)`` (an input shared by every member) or ``(E, B, k)``; ``g`` is ``(E, B, n)``; the result is
    ``(E, k, n)``.
    """
    x_t = x.t() if x.dim() == 2 else x.transpose(1, 2)
    if g.shape[-1] < NARROW:
        res = torch.matmul(g.transpose(1, 2), x).transpose(1, 2)
        return res.contiguous() if out is None else out.copy_(res)  # a gradient laid out like its parameter
    if out is None:
        return torch.matmul(x_t, g)
    return torch.matmul(x_t, g, out=out)

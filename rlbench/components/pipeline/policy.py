"""The pipeline's policy: an MLP whose parameters all live in one flat float32 buffer.

Weight sync then moves one contiguous array (a zero-copy NumPy view of the buffer) instead of a state dict of many
tensors: no packing on the sender, one copy into place on the receiver. :func:`hidden_for_mb` sizes the network for a
payload in megabytes (1 MB to 100 MB in the weight-sync measurements).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def param_count(state_dim: int, n_actions: int, hidden: int, layers: int) -> int:
    """Parameters of the MLP ``state_dim -> hidden x layers -> n_actions`` (weights and biases)."""
    return state_dim * hidden + hidden + (layers - 1) * (hidden * hidden + hidden) + hidden * n_actions + n_actions


def hidden_for_mb(mb: float, state_dim: int, n_actions: int, layers: int = 2) -> int:
    """The hidden width whose float32 parameters come closest to ``mb`` MiB (at least 1)."""
    target = mb * 2**20 / 4
    lo, hi = 1, 1
    while param_count(state_dim, n_actions, hi, layers) < target:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if param_count(state_dim, n_actions, mid, layers) < target:
            lo = mid + 1
        else:
            hi = mid
    below = max(lo - 1, 1)
    return min((below, lo), key=lambda h: abs(param_count(state_dim, n_actions, h, layers) - target))


class FlatPolicy:
    """A categorical policy MLP with its parameters as views into one flat buffer.

    Args:
        state_dim: Input size.
        n_actions: Number of actions (logits).
        hidden: Hidden width.
        layers: Hidden layers (>= 1).
        seed: Seed of the initial weights (every copy built with the same seed starts identical).
    """

    def __init__(self, state_dim: int, n_actions: int, hidden: int = 64, layers: int = 2, seed: int = 0) -> None:
        if hidden < 1 or layers < 1:
            raise ValueError(f"need hidden >= 1 and layers >= 1, got {hidden}, {layers}")
        gen = torch.Generator().manual_seed(seed)
        mods: list[nn.Module] = []
        width = state_dim
        for _ in range(layers):
            mods += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        mods.append(nn.Linear(width, n_actions))
        self.net = nn.Sequential(*mods)
        linears = [m for m in self.net if isinstance(m, nn.Linear)]
        self.flat = torch.empty(sum(p.numel() for p in self.net.parameters()))
        offset = 0
        with torch.no_grad():
            for m in linears:
                bound = 1.0 / m.in_features**0.5  # nn.Linear's default range (weight and bias), from our generator
                for p in (m.weight, m.bias):
                    n = p.numel()
                    self.flat[offset : offset + n].uniform_(-bound, bound, generator=gen)
                    p.data = self.flat[offset : offset + n].view_as(p)
                    offset += n

    @property
    def nbytes(self) -> int:
        """Size of the weights in bytes."""
        return self.flat.numel() * self.flat.element_size()

    def weights(self) -> np.ndarray:
        """The weights as a flat float32 NumPy view (no copy: it changes when the policy is updated)."""
        return self.flat.detach().numpy()

    def load(self, weights: np.ndarray) -> None:
        """Copy a flat weight array (from :meth:`weights` of a policy of the same shape) into this one."""
        src = torch.from_numpy(np.asarray(weights, dtype=np.float32).reshape(-1))
        if src.numel() != self.flat.numel():
            raise ValueError(f"weights of {src.numel()} parameters do not fit a policy of {self.flat.numel()}")
        with torch.no_grad():
            self.flat.copy_(src)

    def log_probs(self, states: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of every action, ``(n, n_actions)``."""
        return torch.log_softmax(self.net(states), dim=-1)

"""Q critics in two layouts behind one interface, ``critic(obs, action) -> (members, batch)`` Q values.

* :class:`SeparateCritics`: one ``nn.Sequential`` MLP per member (the plain reference, as in SB3/CleanRL);
* :class:`EnsembleCritic`: all members' weights stacked, one matmul per depth for every member
  (``baddbmm`` per depth): the same function with a third of the torch ops.

:meth:`EnsembleCritic.from_separate` copies a :class:`SeparateCritics`' weights, so both layouts start
from the same initialization under the same seed and can be tested against each other.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rlbench.components.nets.actors import relu_mlp

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG2 = math.log(2.0)


class SeparateCritics(nn.Module):
    """``members`` independent Q MLPs on ``concat(obs, action)``; ``forward`` stacks their outputs to ``(E, B)``.

    Args:
        obs_dim: Observation size.
        act_dim: Action size.
        hidden: Hidden layer sizes.
        members: Number of Q networks (2 for SAC/TD3, 1 for DDPG).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], members: int = 2) -> None:
        super().__init__()
        self.members = members
        self.nets = nn.ModuleList(relu_mlp(obs_dim + act_dim, hidden, 1) for _ in range(members))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q values, ``(members, B)``."""
        x = torch.cat((obs, action), dim=-1)
        return torch.stack([net(x).squeeze(-1) for net in self.nets]).float()


class EnsembleCritic(nn.Module):
    """``members`` Q MLPs with stacked weights: one ``baddbmm`` per depth for every member.

    Parameters per layer ``k``: ``w{k} (E, h_{k-1}, h_k)`` and ``b{k} (E, 1, h_k)``; the output layer has ``h_k = 1``.
    The first layer reads the shared input through a stride-0 expansion (no copy); activations stay contiguous
    ``(E, B, h)``, so backward needs no transposed copies.

    Args:
        obs_dim: Observation size.
        act_dim: Action size.
        hidden: Hidden layer sizes (at least one).
        members: Number of Q networks.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], members: int = 2) -> None:
        super().__init__()
        if not hidden:
            raise ValueError("EnsembleCritic needs at least one hidden layer")
        self.members, self.hidden = members, tuple(hidden)
        self.from_separate(SeparateCritics(obs_dim, act_dim, hidden, members))

    @torch.no_grad()
    def from_separate(self, source: SeparateCritics) -> EnsembleCritic:
        """Replace the weights with copies of ``source``'s (same members, same function)."""
        linears = [[m for m in net if isinstance(m, nn.Linear)] for net in source.nets]
        self.depth = len(linears[0])
        for k in range(self.depth):
            w = torch.stack([layers[k].weight.t() for layers in linears]).contiguous()
            b = torch.stack([layers[k].bias for layers in linears]).unsqueeze(1).clone()
            setattr(self, f"w{k}", nn.Parameter(w))
            setattr(self, f"b{k}", nn.Parameter(b))
        return self

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q values, ``(members, B)``."""
        x = torch.cat((obs, action), dim=-1)
        h = torch.baddbmm(self.b0, x.expand(self.members, *x.shape), self.w0).relu_()  # (E, B, h0), contiguous
        for k in range(1, self.depth):
            h = torch.baddbmm(getattr(self, f"b{k}"), h, getattr(self, f"w{k}"))
            if k < self.depth - 1:
                h = h.relu_()
        return h.squeeze(-1).float()


def make_critic(layout: str, obs_dim: int, act_dim: int, hidden: tuple[int, ...], members: int) -> nn.Module:
    """A critic of ``layout`` ``"ensemble"`` or ``"separate"`` (built from the same seeded initialization).

    Raises:
        ValueError: For an unknown layout.
    """
    if layout == "separate":
        return SeparateCritics(obs_dim, act_dim, hidden, members)
    if layout == "ensemble":
        return EnsembleCritic(obs_dim, act_dim, hidden, members)  # draws the same initial weights as "separate"
    raise ValueError(f"unknown critic layout {layout!r}; expected 'ensemble' or 'separate'")

"""Actor-critic networks (torch) for discrete and continuous actions.

The actor and critic are separate MLPs of the same hidden sizes (the layout of the rlox, SB3 and
CleanRL PPO baselines). Two initializations are offered because they change learning more than most
speed-ups do (see DESIGN.md): ``"torch"`` keeps PyTorch's default ``nn.Linear`` init, ``"orthogonal"``
is the SB3/CleanRL scheme (gain sqrt(2) on hidden layers, 0.01 on the policy head, 1 on the value head,
zero biases).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rlbench.components.envs.base import ActionSpec

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
INITS = ("torch", "orthogonal")
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str = "tanh") -> nn.Sequential:
    """A plain MLP: ``Linear`` layers with ``activation`` between them and none after the last."""
    layers: list[nn.Module] = []
    dims = (in_dim, *hidden)
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), ACTIVATIONS[activation]()]
    layers.append(nn.Linear(dims[-1], out_dim))
    return nn.Sequential(*layers)


def _orthogonal_init(net: nn.Sequential, head_gain: float) -> None:
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, gain=head_gain if i == len(linears) - 1 else math.sqrt(2.0))
        nn.init.zeros_(layer.bias)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs with a categorical or diagonal-Gaussian policy.

    Args:
        obs_dim: Size of a flat observation.
        action_spec: The env's action space (``discrete`` → categorical over ``n`` logits;
            ``box`` → Gaussian with a learned, state-independent log standard deviation).
        hidden: Hidden layer sizes, shared by actor and critic.
        activation: ``"tanh"`` or ``"relu"``.
        init: ``"torch"`` (PyTorch default) or ``"orthogonal"`` (SB3/CleanRL).
    """

    def __init__(
        self,
        obs_dim: int,
        action_spec: ActionSpec,
        hidden: tuple[int, ...] = (64, 64),
        activation: str = "tanh",
        init: str = "torch",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}: use one of {', '.join(ACTIVATIONS)}")
        if init not in INITS:
            raise ValueError(f"unknown init {init!r}: use one of {', '.join(INITS)}")
        if action_spec.kind not in ("discrete", "box"):
            raise ValueError(f"unsupported action kind {action_spec.kind!r}")
        self.action_spec = action_spec
        self.discrete = action_spec.kind == "discrete"
        self.hidden = tuple(hidden)
        self.activation = activation
        act_out = action_spec.n if self.discrete else int(math.prod(action_spec.shape))
        self.actor = mlp(obs_dim, self.hidden, act_out, activation)
        self.critic = mlp(obs_dim, self.hidden, 1, activation)
        self.log_std = None if self.discrete else nn.Parameter(torch.zeros(act_out))
        if init == "orthogonal":
            _orthogonal_init(self.actor, 0.01)
            _orthogonal_init(self.critic, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values, shape ``(B,)``."""
        return self.critic(obs).squeeze(-1)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Log-probability of ``actions``, policy entropy (``None`` unless ``with_entropy``) and value, each ``(B,)``."""
        out = self.actor(obs)
        value = self.critic(obs).squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
            return logp, entropy, value
        log_std = self.log_std.expand_as(out)
        z = (actions - out) * torch.exp(-log_std)
        logp = (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(-1)
        entropy = (log_std + 0.5 + _HALF_LOG_2PI).sum(-1) if with_entropy else None
        return logp, entropy, value

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or pick the mode of) actions; returns actions, their log-probabilities and values."""
        out = self.actor(obs)
        value = self.critic(obs).squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            actions = out.argmax(-1) if deterministic else torch.multinomial(logp_all.exp(), 1).squeeze(-1)
            return actions, logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1), value
        std = self.log_std.exp()
        actions = out if deterministic else out + std * torch.randn_like(out)
        z = (actions - out) / std
        logp = (-0.5 * z.square() - self.log_std - _HALF_LOG_2PI).sum(-1)
        return actions, logp, value

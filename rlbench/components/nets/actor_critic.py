"""Actor-critic networks (torch) for discrete and continuous actions.

The actor and critic are separate MLPs of the same hidden sizes (the layout of the rlox, SB3 and
CleanRL PPO baselines). Two initializations are offered because they change learning more than most
speed-ups do (see DESIGN.md): ``"torch"`` keeps PyTorch's default ``nn.Linear`` init, ``"orthogonal"``
is the SB3/CleanRL scheme (gain sqrt(2) on hidden layers, 0.01 on the policy head, 1 on the value head,
zero biases).

Two layouts compute the same function:

* :class:`ActorCritic` — two ``nn.Sequential`` MLPs (the plain reference);
* :class:`FusedActorCritic` — the same weights stacked as ``(2, in, out)`` tensors, so each depth is one
  batched matmul (``torch.baddbmm``) for both networks: half the ops, and on small batches ops are
  what costs. Built from an :class:`ActorCritic` so both start from identical weights.
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
        return _policy_terms(self, self.actor(obs), self.critic(obs).squeeze(-1), actions, with_entropy)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or pick the mode of) actions; returns actions, their log-probabilities and values."""
        return _sample(self, self.actor(obs), self.critic(obs).squeeze(-1), deterministic)

    def layer_weights(self) -> list[tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]:
        """Per depth, ``((W_actor, b_actor), (W_critic, b_critic))`` with ``W`` shaped ``(in, out)``."""
        actor = [m for m in self.actor if isinstance(m, nn.Linear)]
        critic = [m for m in self.critic if isinstance(m, nn.Linear)]
        return [((a.weight.t(), a.bias), (c.weight.t(), c.bias)) for a, c in zip(actor, critic)]


def _policy_terms(
    net: ActorCritic | FusedActorCritic, out: torch.Tensor, value: torch.Tensor, actions: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Log-prob of ``actions`` and entropy of the policy given the actor's raw output ``out``."""
    if net.discrete:
        logp_all = torch.log_softmax(out, dim=-1)
        logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
        return logp, entropy, value
    log_std = net.log_std.expand_as(out)
    z = (actions - out) * torch.exp(-log_std)
    logp = (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(-1)
    entropy = (log_std + 0.5 + _HALF_LOG_2PI).sum(-1) if with_entropy else None
    return logp, entropy, value


def _sample(
    net: ActorCritic | FusedActorCritic, out: torch.Tensor, value: torch.Tensor, deterministic: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample (or take the mode of) the policy given the actor's raw output; returns actions, log-probs, values."""
    if net.discrete:
        logp_all = torch.log_softmax(out, dim=-1)
        actions = out.argmax(-1) if deterministic else torch.multinomial(logp_all.exp(), 1).squeeze(-1)
        return actions, logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1), value
    std = net.log_std.exp()
    actions = out if deterministic else out + std * torch.randn_like(out)
    z = (actions - out) / std
    logp = (-0.5 * z.square() - net.log_std - _HALF_LOG_2PI).sum(-1)
    return actions, logp, value


class FusedActorCritic(nn.Module):
    """Actor and critic evaluated together: layer ``i`` of both is one ``baddbmm`` over stacked weights.

    The critic's output layer is zero-padded to the actor's width; the padding never reaches the loss,
    so its gradient is zero and it stays zero.

    Args:
        source: An :class:`ActorCritic` whose weights (and action spec, activation) are copied.
    """

    def __init__(self, source: ActorCritic) -> None:
        super().__init__()
        self.action_spec = source.action_spec
        self.discrete = source.discrete
        self.hidden = source.hidden
        self.activation = source.activation
        self._act = torch.tanh if source.activation == "tanh" else torch.relu
        actor = [m for m in source.actor if isinstance(m, nn.Linear)]
        critic = [m for m in source.critic if isinstance(m, nn.Linear)]
        self.n_out = actor[-1].out_features
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        with torch.no_grad():
            for la, lc in zip(actor, critic):
                wa, wc = la.weight.t(), lc.weight.t()
                ba, bc = la.bias, lc.bias
                if wc.shape[1] < wa.shape[1]:  # value head: pad to the policy head's width
                    wc = torch.cat([wc, wc.new_zeros(wc.shape[0], wa.shape[1] - wc.shape[1])], dim=1)
                    bc = torch.cat([bc, bc.new_zeros(wa.shape[1] - bc.shape[0])])
                self.weights.append(nn.Parameter(torch.stack([wa, wc]).contiguous()))
                self.biases.append(nn.Parameter(torch.stack([ba, bc]).unsqueeze(1).contiguous()))
        self.log_std = None if source.log_std is None else nn.Parameter(source.log_std.detach().clone())

    def _heads(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = obs.unsqueeze(0).expand(2, *obs.shape)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = self._act(h)
        return h[0], h[1, :, 0]

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values, shape ``(B,)``."""
        return self._heads(obs)[1]

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, with_entropy: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Same contract as :meth:`ActorCritic.evaluate`."""
        out, value = self._heads(obs)
        return _policy_terms(self, out, value, actions, with_entropy)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Same contract as :meth:`ActorCritic.act`."""
        out, value = self._heads(obs)
        return _sample(self, out, value, deterministic)

    def layer_weights(self) -> list[tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]]:
        """Per depth, ``((W_actor, b_actor), (W_critic, b_critic))`` with ``W`` shaped ``(in, out)``."""
        out = []
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            width = 1 if i == last else w.shape[2]
            out.append(((w[0], b[0, 0]), (w[1, :, :width], b[1, 0, :width])))
        return out

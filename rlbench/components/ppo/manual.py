"""PPO gradients written out by hand for the fused actor-critic: the same update without autograd.

For 64-unit MLPs on 512-sample minibatches, autograd's bookkeeping (graph recording, one engine node
per op, saved tensors) costs about as much as the matmuls themselves. This module computes the PPO
loss and its exact gradient for a :class:`~rlbench.components.nets.actor_critic.FusedActorCritic` with a
categorical policy directly: one forward with no graph, the loss gradient at the network's output in
closed form, then one batched matmul per layer and parameter on the way back. The result is written to
each parameter's ``.grad``, so the optimizer and gradient clipping are unchanged.

Gradients follow torch's own conventions exactly, ties included: ``torch.max(a, b)`` sends half the
gradient to each side where ``a == b``, and ``clamp`` passes it through inside the closed interval.
``tests/components/test_ppo_manual.py`` checks loss and every gradient against autograd.

Supported: discrete actions, any depth, ``tanh`` or ``relu``. :func:`supports` tells; the update
falls back to autograd otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlbench.components.nets import kernels
from rlbench.components.nets.actor_critic import FusedActorCritic
from rlbench.components.ppo.loss import PPOLossTerms


def supports(model: object) -> bool:
    """Whether :func:`forward` / :func:`backward` can train ``model``."""
    return isinstance(model, FusedActorCritic) and model.discrete and model.activation in ("tanh", "relu")


@dataclass
class ForwardCache:
    """What the backward pass needs from the forward pass of one minibatch."""

    inputs: list[torch.Tensor]  # input of every layer; the first is the observation batch (B, d)
    grad_out: torch.Tensor  # dLoss/d(network output), shape (2, B, n_out)
    terms: PPOLossTerms


@torch.no_grad()
def forward(
    model: FusedActorCritic,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float,
    vf_coef: float,
    ent_coef: float,
    diagnostics: bool = False,
) -> ForwardCache:
    """Network forward, PPO loss (advantages already normalized) and its gradient at the output.

    Args:
        model: The fused actor-critic (categorical policy).
        obs: Observations ``(B, d)``.
        actions: Taken actions ``(B,)`` (int64).
        old_logprob: Log-probs at collection ``(B,)``.
        advantages: Advantages ``(B,)``, already standardized if that is wanted.
        returns: Value targets ``(B,)``.
        clip_coef: Surrogate clipping range.
        vf_coef: Value-loss weight.
        ent_coef: Entropy-bonus weight.
        diagnostics: Also compute the loss values, entropy, approx-KL and clip fraction (otherwise only the
            gradient is computed and the terms are ``None``).

    Returns:
        The cache for :func:`backward`, with the loss terms.
    """
    n_layers = len(model.weights)
    h = obs.unsqueeze(0).expand(2, *obs.shape)
    inputs = [obs]
    for i, (w, b) in enumerate(zip(model.weights, model.biases)):
        h = kernels.baddbmm(b, h, w)
        if i < n_layers - 1:
            h = kernels.tanh_(h) if model.activation == "tanh" else torch.relu_(h)
            inputs.append(h)
    logits, value = h[0], h[1, :, 0]
    batch = obs.shape[0]
    logp_all = torch.log_softmax(logits, dim=-1)
    probs = logp_all.exp()
    idx = actions.long().unsqueeze(-1)
    log_ratio = logp_all.gather(-1, idx).squeeze(-1) - old_logprob
    ratio = log_ratio.exp()
    neg_adv = -advantages
    clipped_ratio = ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)
    unclipped, clipped = neg_adv * ratio, neg_adv * clipped_ratio
    # d max(u, c)/d ratio as torch computes it: 1 where u > c; where u == c, 1/2 through u plus 1/2 through
    # clamp, which passes it only inside [1 - eps, 1 + eps]. A tie outside that interval needs A == 0, where
    # the gradient is 0 either way, so "u >= c" is exact.
    grad_logp = (unclipped >= clipped) * neg_adv * ratio * (1.0 / batch)
    grad_logits = probs * (-grad_logp).unsqueeze(-1)
    grad_logits.scatter_add_(-1, idx, grad_logp.unsqueeze(-1))
    entropy = None
    if ent_coef != 0.0 or diagnostics:
        ent_each = -(probs * logp_all).sum(-1)
        entropy = ent_each.mean()
        if ent_coef != 0.0:  # dH/dz_k = -p_k (log p_k + H)
            grad_logits += probs * (logp_all + ent_each.unsqueeze(-1)) * (ent_coef / batch)
    value_err = value - returns
    grad_out = torch.zeros_like(h)
    grad_out[0] = grad_logits
    grad_out[1, :, 0] = value_err * (vf_coef / batch)
    terms = PPOLossTerms(None, None, None, entropy, None, None)
    if diagnostics:  # the loss values themselves are not needed for the gradient
        policy_loss = torch.max(unclipped, clipped).mean()
        value_loss = 0.5 * value_err.square().mean()
        loss = policy_loss + vf_coef * value_loss
        if ent_coef != 0.0:
            loss = loss - ent_coef * entropy
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
        terms = PPOLossTerms(loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction)
    return ForwardCache(inputs, grad_out, terms)


@torch.no_grad()
def backward(model: FusedActorCritic, cache: ForwardCache) -> None:
    """Propagate the output gradient through the layers and store it in each parameter's ``.grad``.

    Where a parameter already has a ``.grad`` tensor (e.g. a view into a flat gradient buffer, see
    :func:`rlbench.components.optim.adam.flatten_parameters`), the gradient is written into it in place;
    otherwise a new tensor is assigned. Either way the previous content is overwritten, not accumulated.
    """
    g = cache.grad_out
    tanh = model.activation == "tanh"
    for i in range(len(model.weights) - 1, -1, -1):
        w, b = model.weights[i], model.biases[i]
        x = cache.inputs[i]  # layer 0's input (B, d) is shared by actor and critic
        if w.grad is None:
            w.grad = kernels.weight_grad(x, g)
            b.grad = g.sum(1, keepdim=True)
        else:
            kernels.weight_grad(x, g, out=w.grad)
            torch.sum(g, 1, keepdim=True, out=b.grad)
        if i > 0:
            g = torch.bmm(g, w.transpose(1, 2))
            g = torch.addcmul(g, g, x.square(), value=-1.0) if tanh else g.mul_(x > 0)  # g (1 - x^2) for tanh

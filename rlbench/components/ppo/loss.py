"""The PPO-clip loss on one minibatch (autograd), tested against hand-computed values."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PPOLossTerms:
    """Every term of the PPO loss for one minibatch (scalar tensors; ``None`` where not computed)."""

    loss: torch.Tensor | None
    policy_loss: torch.Tensor | None
    value_loss: torch.Tensor | None
    entropy: torch.Tensor | None
    approx_kl: torch.Tensor | None
    clip_fraction: torch.Tensor | None


def ppo_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    new_value: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor | None,
    clip_coef: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    normalize_advantages: bool = True,
    diagnostics: bool = True,
) -> PPOLossTerms:
    """PPO-clip loss on one minibatch.

    ``ratio = exp(new_logprob - old_logprob)``;
    ``policy_loss = mean(max(-A * ratio, -A * clip(ratio, 1 - clip_coef, 1 + clip_coef)))``;
    ``value_loss = 0.5 * mean((new_value - returns)^2)``;
    ``loss = policy_loss + vf_coef * value_loss - ent_coef * mean(entropy)``.
    With ``normalize_advantages``, ``A = (adv - mean(adv)) / (std(adv) + 1e-8)`` over the minibatch
    (unbiased std, as SB3 and CleanRL). ``approx_kl = mean((ratio - 1) - log ratio)`` (Schulman's k3
    estimator); ``clip_fraction = mean(|ratio - 1| > clip_coef)``.

    Args:
        new_logprob: Log-probs of the taken actions under the current policy, ``(B,)``.
        old_logprob: Log-probs recorded at collection time, ``(B,)``.
        advantages: Advantage estimates, ``(B,)``.
        new_value: Current value predictions, ``(B,)``.
        returns: Value targets (advantages + old values), ``(B,)``.
        entropy: Per-sample policy entropy, ``(B,)``; may be ``None`` when ``ent_coef == 0``.
        clip_coef: Surrogate clipping range ε.
        vf_coef: Weight of the value loss.
        ent_coef: Weight of the entropy bonus.
        normalize_advantages: Standardize advantages within the minibatch.
        diagnostics: Compute approx-KL and clip fraction (``None`` otherwise; skipping saves ops).

    Returns:
        The loss and its terms.
    """
    if ent_coef != 0.0 and entropy is None:
        raise ValueError("ent_coef != 0 needs the entropy")
    if normalize_advantages and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    # written for few ops (each op costs more than its arithmetic at these sizes): one negation,
    # the clipped surrogate as max(-A r, -A clip(r)), and a fused mse_loss for the value term
    neg_adv = -advantages
    log_ratio = new_logprob - old_logprob
    ratio = log_ratio.exp()
    policy_loss = torch.max(neg_adv * ratio, neg_adv * ratio.clamp(1.0 - clip_coef, 1.0 + clip_coef)).mean()
    value_loss = F.mse_loss(new_value, returns) * 0.5
    loss = policy_loss + vf_coef * value_loss
    entropy_mean = entropy.mean() if entropy is not None else None
    if ent_coef != 0.0:
        loss = loss - ent_coef * entropy_mean
    approx_kl = clip_fraction = None
    if diagnostics:
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return PPOLossTerms(loss, policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction)

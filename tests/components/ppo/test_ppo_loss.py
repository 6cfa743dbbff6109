"""The PPO loss equals values computed by hand on a tiny batch."""

from __future__ import annotations

import math

import pytest
import torch

from rlbench.components.ppo.loss import ppo_loss


def test_ppo_loss_hand_computed() -> None:
    # ratios exp(log 1.5)=1.5 (clipped to 1.2), exp(log 0.5)=0.5 (clipped to 0.8), exp(0)=1
    old = torch.tensor([0.0, 0.0, 0.0])
    new = torch.tensor([math.log(1.5), math.log(0.5), 0.0])
    adv = torch.tensor([1.0, -2.0, 0.5])
    value = torch.tensor([1.0, 2.0, 3.0])
    ret = torch.tensor([2.0, 2.0, 1.0])
    ent = torch.tensor([0.6, 0.7, 0.8])
    t = ppo_loss(new, old, adv, value, ret, ent, clip_coef=0.2, vf_coef=0.5, ent_coef=0.01, normalize_advantages=False)
    # per sample max(-A r, -A clip(r)):
    #   A=1,  r=1.5: max(-1.5, -1.2) = -1.2
    #   A=-2, r=0.5: max(1.0, 1.6)   = 1.6
    #   A=.5, r=1:   max(-0.5, -0.5) = -0.5
    policy = (-1.2 + 1.6 - 0.5) / 3
    value_loss = 0.5 * (1.0 + 0.0 + 4.0) / 3
    entropy = 0.7
    assert t.policy_loss.item() == pytest.approx(policy, abs=1e-6)
    assert t.value_loss.item() == pytest.approx(value_loss, abs=1e-6)
    assert t.entropy.item() == pytest.approx(entropy, abs=1e-6)
    assert t.loss.item() == pytest.approx(policy + 0.5 * value_loss - 0.01 * entropy, abs=1e-6)
    # k3 approx-KL: mean((r - 1) - log r)
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + 0.0) / 3
    assert t.approx_kl.item() == pytest.approx(kl, abs=1e-6)
    assert t.clip_fraction.item() == pytest.approx(2 / 3)


def test_ppo_loss_normalizes_advantages_per_minibatch() -> None:
    adv = torch.tensor([1.0, 3.0])  # mean 2, unbiased std sqrt(2)
    z = torch.zeros(2)
    t = ppo_loss(z, z, adv, z, z, None, ent_coef=0.0, normalize_advantages=True)
    a = torch.tensor([-1.0, 1.0]) / math.sqrt(2.0)
    assert t.policy_loss.item() == pytest.approx((-a).mean().item(), abs=1e-6)  # ratio 1: loss = mean(-A)
    assert t.entropy is None and t.approx_kl is not None


def test_ppo_loss_gradient_flows_only_through_unclipped_side() -> None:
    new = torch.tensor([math.log(1.5)], requires_grad=True)
    t = ppo_loss(new, torch.zeros(1), torch.tensor([1.0]), torch.zeros(1), torch.zeros(1), None, normalize_advantages=False)
    t.loss.backward()
    assert new.grad.item() == 0.0  # clipped at 1.2 with A > 0: no incentive to grow further


def test_ppo_loss_needs_entropy_for_bonus() -> None:
    z = torch.zeros(2)
    with pytest.raises(ValueError, match="entropy"):
        ppo_loss(z, z, z, z, z, None, ent_coef=0.01)

"""Hand-written PPO gradients equal autograd's: loss, every parameter's gradient, and a full update."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rlbench.components.envs.base import ActionSpec
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic
from rlbench.components.ppo import manual as ppo_manual
from rlbench.components.ppo.loss import ppo_loss


def _setup(hidden: tuple[int, ...], activation: str, n_actions: int = 3, batch: int = 256, seed: int = 0):
    torch.manual_seed(seed)
    model = FusedActorCritic(ActorCritic(5, ActionSpec("discrete", n=n_actions), hidden, activation, "torch"))
    g = torch.Generator().manual_seed(seed + 1)
    obs = torch.randn(batch, 5, generator=g)
    actions = torch.randint(0, n_actions, (batch,), generator=g)
    with torch.no_grad():
        logp, _, _ = model.evaluate(obs, actions)
    # old log-probs off by up to +-0.5 so that many ratios fall outside [0.8, 1.2] on both sides
    old = logp + (torch.rand(batch, generator=g) - 0.5)
    old[:10] = logp[:10]  # ratio exactly 1: ties between the clipped and unclipped terms
    adv = torch.randn(batch, generator=g)
    adv[10:15] = 0.0
    ret = torch.randn(batch, generator=g)
    return model, obs, actions, old, adv, ret


@pytest.mark.parametrize("hidden, activation", [((64, 64), "tanh"), ((16,), "relu"), ((32, 16, 8), "tanh")])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_manual_gradients_equal_autograd(hidden: tuple[int, ...], activation: str, ent_coef: float) -> None:
    model, obs, actions, old, adv, ret = _setup(hidden, activation)
    ref = copy.deepcopy(model)
    logp, entropy, value = ref.evaluate(obs, actions, with_entropy=True)
    terms = ppo_loss(logp, old, adv, value, ret, entropy, 0.2, 0.5, ent_coef, normalize_advantages=False)
    terms.loss.backward()
    cache = ppo_manual.forward(model, obs, actions, old, adv, ret, 0.2, 0.5, ent_coef, diagnostics=True)
    ppo_manual.backward(model, cache)
    for name in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
        torch.testing.assert_close(getattr(cache.terms, name), getattr(terms, name).detach(), rtol=1e-5, atol=1e-6)
    assert 0.2 < terms.clip_fraction.item() < 0.9  # both branches of the clipped objective are exercised
    for (n, p_ref), p in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=n: f"{n}: {m}")


def test_manual_update_matches_autograd_update() -> None:
    """Whole PPOUpdate: the same parameters after an update, manual vs autograd gradients."""
    from rlbench.components.collect.rollout import RolloutStorage
    from rlbench.components.optim.adam import LeanAdam, flatten_parameters
    from rlbench.components.ppo.update import PPOHyperparams, PPOUpdate

    results = []
    for gradients, flat in (("autograd", False), ("manual", False), ("manual", True)):
        model, *_ = _setup((64, 64), "tanh", n_actions=2)
        rng = np.random.default_rng(0)
        st = RolloutStorage.allocate(16, 4, (5,), ())
        st.obs[:] = rng.standard_normal(st.obs.shape)
        st.actions[:] = rng.integers(0, 2, st.actions.shape)
        st.logprobs[:] = np.log(0.5) + 0.1 * rng.standard_normal(st.logprobs.shape)
        st.values[:] = rng.standard_normal(st.values.shape)
        st.rewards[:] = 1.0
        st.dones[:] = rng.random(st.dones.shape) < 0.1
        hp = PPOHyperparams(epochs=2, minibatches=2, gradients=gradients)
        params = [flatten_parameters(list(model.parameters()))] if flat else model.parameters()
        upd = PPOUpdate(model, LeanAdam(params, lr=1e-2), hp, np.random.default_rng(1))
        upd.advantages(st)
        diag = upd.update(st)
        results.append(([p.detach().clone() for p in model.parameters()], diag))
    for other in results[1:]:
        for a, b in zip(results[0][0], other[0]):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
        for key in results[0][1]:
            assert other[1][key] == pytest.approx(results[0][1][key], rel=1e-4, abs=1e-6)


def test_supports() -> None:
    torch.manual_seed(0)
    sep = ActorCritic(3, ActionSpec("discrete", n=2))
    assert ppo_manual.supports(FusedActorCritic(sep))
    assert not ppo_manual.supports(sep)
    box = ActorCritic(3, ActionSpec("box", shape=(1,), low=-np.ones(1), high=np.ones(1)))
    assert not ppo_manual.supports(FusedActorCritic(box))

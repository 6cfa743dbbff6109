"""FusedActorCritic computes what the separate ActorCritic it was built from computes, gradients included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.components.envs.base import ActionSpec
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic

SPECS = [ActionSpec("discrete", n=3), ActionSpec("box", shape=(2,), low=-np.ones(2), high=np.ones(2))]


@pytest.mark.parametrize("spec", SPECS, ids=["discrete", "box"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_fused_equals_separate(spec: ActionSpec, activation: str) -> None:
    torch.manual_seed(0)
    sep = ActorCritic(5, spec, (32, 16), activation, "orthogonal")
    fused = FusedActorCritic(sep)
    obs = torch.randn(64, 5)
    actions = torch.randint(0, 3, (64,)) if spec.kind == "discrete" else torch.randn(64, 2)
    outs_s = sep.evaluate(obs, actions)
    outs_f = fused.evaluate(obs, actions)
    for a, b in zip(outs_s, outs_f):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused.value(obs), sep.value(obs), rtol=1e-5, atol=1e-6)
    # same gradients, mapped onto the stacked layout
    loss_s = outs_s[0].sum() + outs_s[2].square().sum()
    loss_f = outs_f[0].sum() + outs_f[2].square().sum()
    loss_s.backward()
    loss_f.backward()
    for i in range(len(fused.weights)):
        torch.testing.assert_close(fused.weights[i].grad[0], sep_grad(sep, "actor", i), rtol=1e-4, atol=1e-5)
    last = len(fused.weights) - 1
    assert torch.count_nonzero(fused.weights[last].grad[1, :, 1:]) == 0  # padding of the value head gets no gradient
    torch.testing.assert_close(fused.weights[last].grad[1, :, :1], sep_grad(sep, "critic", last), rtol=1e-4, atol=1e-5)


def sep_grad(net: ActorCritic, which: str, i: int) -> torch.Tensor:
    linears = [m for m in getattr(net, which) if isinstance(m, torch.nn.Linear)]
    return linears[i].weight.grad.t()


def test_fused_layer_weights_round_trip() -> None:
    torch.manual_seed(0)
    sep = ActorCritic(4, SPECS[0], (8, 8))
    fused = FusedActorCritic(sep)
    for ((wa, ba), (wc, bc)), ((fa, fba), (fc, fbc)) in zip(sep.layer_weights(), fused.layer_weights()):
        assert torch.equal(wa, fa) and torch.equal(ba, fba) and torch.equal(wc, fc) and torch.equal(bc, fbc)

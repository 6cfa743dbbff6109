"""NumpyPolicy (weight snapshot, fused layers) equals the torch ActorCritic it mirrors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.components.envs.base import ActionSpec
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic
from rlbench.components.nets.policies import NumpyPolicy, TorchPolicy

DISCRETE3 = ActionSpec("discrete", n=3)
BOX2 = ActionSpec("box", shape=(2,), low=-np.ones(2, np.float32), high=np.ones(2, np.float32))


def _model(spec: ActionSpec, init: str = "torch", activation: str = "tanh") -> ActorCritic:
    torch.manual_seed(1)
    return ActorCritic(5, spec, (32, 16), activation, init)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("init", ["torch", "orthogonal"])
def test_values_and_logprobs_match_torch(activation: str, init: str, fused: bool) -> None:
    model = _model(DISCRETE3, init, activation)
    if fused:
        model = FusedActorCritic(model)
    pol = NumpyPolicy(model, seed=0)
    obs = np.random.default_rng(0).standard_normal((64, 5)).astype(np.float32)
    actions, logp, value = pol.act(obs)
    with torch.no_grad():
        ref_logp, _, ref_value = model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(value, ref_value.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logp, ref_logp.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pol.value(obs), ref_value.numpy(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        mode = model.act(torch.from_numpy(obs), deterministic=True)[0].numpy()
    np.testing.assert_array_equal(pol.act_deterministic(obs), mode)


def test_categorical_sampling_distribution_matches_softmax() -> None:
    model = _model(DISCRETE3)
    pol = NumpyPolicy(model, seed=123)
    one = np.random.default_rng(1).standard_normal((1, 5)).astype(np.float32)
    obs = np.repeat(one, 30_000, axis=0)
    actions, _, _ = pol.act(obs)
    with torch.no_grad():
        probs = torch.softmax(model.actor(torch.from_numpy(one)), -1).numpy()[0]
    counts = np.bincount(actions, minlength=3)
    expected = probs * len(actions)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 13.8, (counts, expected)  # chi-square, 2 dof, p = 0.001


def test_gaussian_logprob_and_moments_match_torch() -> None:
    model = _model(BOX2)
    with torch.no_grad():
        model.log_std.copy_(torch.tensor([-0.5, 0.3]))
    pol = NumpyPolicy(model, seed=7)
    one = np.random.default_rng(2).standard_normal((1, 5)).astype(np.float32)
    obs = np.repeat(one, 20_000, axis=0)
    actions, logp, _ = pol.act(obs)
    actions, logp = actions.copy(), logp.copy()
    with torch.no_grad():
        ref_logp, _, _ = model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
        mean = model.actor(torch.from_numpy(one)).numpy()[0]
    np.testing.assert_allclose(logp, ref_logp.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(actions.mean(0), mean, atol=0.03)
    np.testing.assert_allclose(actions.std(0), np.exp([-0.5, 0.3]), rtol=0.03)


def test_load_refreshes_the_snapshot() -> None:
    model = _model(DISCRETE3)
    pol = NumpyPolicy(model, seed=0)
    obs = np.ones((4, 5), np.float32)
    before = pol.value(obs)
    with torch.no_grad():
        model.critic[-1].bias.add_(1.0)
    np.testing.assert_allclose(pol.value(obs), before)  # still the old snapshot
    pol.load(model)
    np.testing.assert_allclose(pol.value(obs), before + 1.0, rtol=1e-6)


def test_torch_policy_agrees_with_module() -> None:
    model = _model(DISCRETE3)
    pol = TorchPolicy(model)
    obs = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
    actions, logp, value = pol.act(obs)
    with torch.no_grad():
        ref_logp, _, ref_value = model.evaluate(torch.from_numpy(obs), torch.from_numpy(actions))
    np.testing.assert_allclose(logp, ref_logp.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(value, ref_value.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 8, 257])
def test_jitted_categorical_sampling_equals_the_numpy_path(batch: int) -> None:
    """The numba sampler draws the same uniforms and applies the same inverse-CDF rule: same actions, log-probs and
    values as the NumPy ufunc path, call after call."""
    model = FusedActorCritic(_model(DISCRETE3))
    jitted, plain = NumpyPolicy(model, seed=5), NumpyPolicy(model, seed=5, jit=False)
    assert jitted._jit is not None and plain._jit is None
    rng = np.random.default_rng(2)
    for _ in range(20):
        obs = (rng.standard_normal((batch, 5)) * 3).astype(np.float32)
        a1, lp1, v1 = jitted.act(obs)
        a2, lp2, v2 = plain.act(obs)
        np.testing.assert_array_equal(a1, a2)
        np.testing.assert_allclose(lp1, lp2, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(v1, v2)

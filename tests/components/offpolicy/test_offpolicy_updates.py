"""SAC and DDPG updates: every variant equals a plain reference step on a fixed batch; critics, Polyak, TD(lambda)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from rlbench.components.nets.actors import DeterministicActor, NumpyActor, SquashedGaussianActor
from rlbench.components.nets.critics import EnsembleCritic, SeparateCritics, make_critic
from rlbench.components.offpolicy import manual as offpolicy_manual
from rlbench.components.offpolicy.ddpg import DDPGUpdate
from rlbench.components.offpolicy.polyak import POLYAK
from rlbench.components.offpolicy.sac import SACHyperparams, SACUpdate
from rlbench.components.offpolicy.update import OffPolicyHyperparams, lambda_returns
from rlbench.components.returns.td import td_lambda_reference

OBS, ACT, HIDDEN, B = 3, 2, (16, 16), 32
LOW, HIGH = np.array([-2.0, -1.0], np.float32), np.array([2.0, 3.0], np.float32)


def _batch(seed: int = 0, weights: bool = False) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = {
        "obs": torch.randn(B, OBS, generator=g),
        "action": torch.rand(B, ACT, generator=g) * 2 - 1,
        "reward": torch.randn(B, generator=g),
        "next_obs": torch.randn(B, OBS, generator=g),
        "done": torch.rand(B, generator=g) < 0.2,
    }
    if weights:
        batch["weights"] = torch.rand(B, generator=g) + 0.5
    return batch


def _separate_state(critic: nn.Module) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per member, per layer ``(weight (out, in), bias (out,))``, from either critic layout."""
    if isinstance(critic, SeparateCritics):
        return [[(m.weight.detach(), m.bias.detach()) for m in net if isinstance(m, nn.Linear)] for net in critic.nets]
    out = []
    for e in range(critic.members):
        layers = []
        for k in range(critic.depth):
            layers.append((getattr(critic, f"w{k}")[e].detach().t(), getattr(critic, f"b{k}")[e, 0].detach()))
        out.append(layers)
    return out


def _assert_same_critic(a: nn.Module, b: nn.Module, atol: float = 1e-5) -> None:
    for ma, mb in zip(_separate_state(a), _separate_state(b), strict=True):
        for (wa, ba), (wb, bb) in zip(ma, mb, strict=True):
            torch.testing.assert_close(wa, wb, atol=atol, rtol=1e-4)
            torch.testing.assert_close(ba, bb, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("members", [1, 2, 3])
def test_ensemble_critic_equals_separate_critics(members: int) -> None:
    torch.manual_seed(0)
    sep = SeparateCritics(OBS, ACT, HIDDEN, members)
    ens = EnsembleCritic(OBS, ACT, HIDDEN, members).from_separate(sep)
    b = _batch()
    q_sep, q_ens = sep(b["obs"], b["action"]), ens(b["obs"], b["action"])
    assert q_ens.shape == (members, B)
    torch.testing.assert_close(q_ens, q_sep, atol=1e-5, rtol=1e-5)
    g_sep = torch.autograd.grad(q_sep.square().sum(), list(sep.parameters()))
    g_ens = torch.autograd.grad(q_ens.square().sum(), list(ens.parameters()))
    assert sum(g.abs().sum() for g in g_sep).item() == pytest.approx(sum(g.abs().sum() for g in g_ens).item(), rel=1e-4)


@pytest.mark.parametrize("members", [1, 2, 3])
@pytest.mark.parametrize("shift", [0.0, 50.0])
def test_min_member_gradient_runs_each_row_through_its_minimal_member(members: int, shift: float) -> None:
    """The hand-written ``d(coef * sum_rows min_e Q_e)/d action`` gathers each member's rows (CPU): it equals
    autograd's through ``Tensor.min``; ``shift`` lowers member 0 for every row, so the other members get no rows."""
    torch.manual_seed(0)
    critic = EnsembleCritic(OBS, ACT, HIDDEN, members)
    with torch.no_grad():
        critic.b2[0] -= shift
    x = torch.cat((torch.randn(B, OBS), torch.rand(B, ACT) * 2 - 1), dim=-1)
    xg = x.clone().requires_grad_(True)
    q = critic(xg[:, :OBS], xg[:, OBS:])  # (E, B)
    (-0.25 * q.min(dim=0).values.sum()).backward()
    q_min, g_action = offpolicy_manual._min_member_grad(offpolicy_manual.ManualCritic(critic), x, -0.25, OBS)
    torch.testing.assert_close(q_min, q.min(dim=0).values.detach())
    torch.testing.assert_close(g_action, xg.grad[:, OBS:], atol=1e-6, rtol=1e-5)
    if shift and members > 1:
        assert bool((q.argmin(0) == 0).all())  # the all-rows-in-one-member case was reached


def test_make_critic_layouts_start_from_the_same_weights() -> None:
    torch.manual_seed(3)
    sep = make_critic("separate", OBS, ACT, HIDDEN, 2)
    torch.manual_seed(3)
    ens = make_critic("ensemble", OBS, ACT, HIDDEN, 2)
    _assert_same_critic(sep, ens, atol=0.0)
    with pytest.raises(ValueError, match="unknown critic layout"):
        make_critic("stacked", OBS, ACT, HIDDEN, 2)


@pytest.mark.parametrize("variant", sorted(POLYAK))
def test_polyak_variants_equal_the_plain_formula(variant: str) -> None:
    torch.manual_seed(0)
    src = [torch.randn(5, 4), torch.randn(7), torch.randn(3, 2, 2)]
    targets = [torch.randn(5, 4), torch.randn(7), torch.randn(3, 2, 2)]
    expected = [((1 - 0.05) * t.double() + 0.05 * s.double()).float() for t, s in zip(targets, src)]
    before = [t.data_ptr() for t in targets]
    POLYAK[variant](targets, src, 0.05)
    for t, e in zip(targets, expected):
        torch.testing.assert_close(t, e)
    assert [t.data_ptr() for t in targets] == before  # in place: a module's parameters stay the same tensors


def test_lambda_returns_match_the_td_lambda_reference() -> None:
    rng = np.random.default_rng(0)
    s, length = 6, 9
    r = rng.standard_normal((s, length)).astype(np.float32)
    d = rng.random((s, length)) < 0.15
    nv = rng.standard_normal((s, length)).astype(np.float32)
    for lam in (0.0, 0.7, 1.0):
        got = lambda_returns(torch.from_numpy(r), torch.from_numpy(d), torch.from_numpy(nv), 0.97, lam).numpy()
        # the reference takes V(s_t) per step and V(s_T) after the last: V(s_{t+1}) shifted by one, time-major
        values = np.concatenate([np.zeros((s, 1), np.float32), nv[:, :-1]], axis=1)
        want = td_lambda_reference(r.T, values.T, d.T, nv[:, -1], 0.97, lam).T
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    one_step = lambda_returns(torch.from_numpy(r), torch.from_numpy(d), torch.from_numpy(nv), 0.97, 0.0).numpy()
    np.testing.assert_allclose(one_step, r + 0.97 * (~d) * nv, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- SAC against a plain reference step


def _reference_sac_step(actor, q_nets, hp, batch, gen, log_alpha0):
    """Plain SAC step (SB3/CleanRL style): separate Q MLPs, torch.optim.Adam, backward(), loop Polyak, torch.distributions."""
    actor = copy.deepcopy(actor)
    q_nets = copy.deepcopy(q_nets)
    targets = copy.deepcopy(q_nets)
    log_alpha = torch.tensor(log_alpha0, requires_grad=True)
    opt_q = torch.optim.Adam([p for q in q_nets for p in q.parameters()], lr=hp.critic_lr)
    opt_pi = torch.optim.Adam(actor.parameters(), lr=hp.actor_lr)
    opt_alpha = torch.optim.Adam([log_alpha], lr=hp.alpha_lr)

    def sample(obs, noise):
        mean, log_std = actor._heads(obs)
        dist = torch.distributions.Normal(mean, log_std.exp())
        u = mean + log_std.exp() * noise
        logp = dist.log_prob(u).sum(-1) - torch.log(actor.scale * (1 - torch.tanh(u) ** 2)).sum(-1)
        return torch.tanh(u) * actor.scale + actor.bias, logp

    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        a2, logp2 = sample(batch["next_obs"], torch.randn(B, ACT, generator=gen))
        x2 = torch.cat([batch["next_obs"], a2], -1)
        q_next = torch.min(*[t(x2).squeeze(-1) for t in targets]) - alpha * logp2
        y = batch["reward"] + hp.gamma * (1 - batch["done"].float()) * q_next
    x = torch.cat([batch["obs"], batch["action"]], -1)
    q_loss = 0.5 * sum(((q(x).squeeze(-1) - y) ** 2).mean() for q in q_nets)
    opt_q.zero_grad()
    q_loss.backward()
    opt_q.step()
    a, logp = sample(batch["obs"], torch.randn(B, ACT, generator=gen))
    xa = torch.cat([batch["obs"], a], -1)
    pi_loss = (alpha * logp - torch.min(*[q(xa).squeeze(-1) for q in q_nets])).mean()
    opt_pi.zero_grad()
    pi_loss.backward()
    opt_pi.step()
    alpha_loss = -(log_alpha * (logp.detach() + (-ACT))).mean()
    opt_alpha.zero_grad()
    alpha_loss.backward()
    opt_alpha.step()
    with torch.no_grad():
        for q, t in zip(q_nets, targets):
            for p, tp in zip(q.parameters(), t.parameters()):
                tp.copy_((1 - hp.tau) * tp + hp.tau * p)
    return actor, q_nets, targets, float(log_alpha.detach()), float(q_loss), float(pi_loss)


def _as_separate(nets: list[nn.Sequential]) -> SeparateCritics:
    sep = SeparateCritics(OBS, ACT, HIDDEN, len(nets))
    sep.nets = nn.ModuleList(nets)
    return sep


LAYOUTS = [("ensemble", "manual"), ("ensemble", "autograd"), ("separate", "autograd")]


@pytest.mark.parametrize(("critics", "gradients"), LAYOUTS)
@pytest.mark.parametrize("polyak", ["foreach", "loop"])
def test_sac_update_variants_equal_the_reference_step(critics: str, gradients: str, polyak: str) -> None:
    torch.manual_seed(1)
    actor = SquashedGaussianActor(OBS, ACT, HIDDEN, LOW, HIGH)
    torch.manual_seed(2)
    critic = make_critic(critics, OBS, ACT, HIDDEN, 2)
    torch.manual_seed(2)
    ref_q = list(SeparateCritics(OBS, ACT, HIDDEN, 2).nets)
    lrs = {"actor_lr": 1e-2, "critic_lr": 1e-2, "alpha_lr": 1e-2}
    hp = SACHyperparams(tau=0.1, polyak=polyak, init_alpha=0.5, gradients=gradients, **lrs)
    batch = _batch(5)
    ref = _reference_sac_step(actor, ref_q, hp, batch, torch.Generator().manual_seed(9), math.log(0.5))
    ref_actor, ref_nets, ref_targets, ref_log_alpha, ref_q_loss, ref_pi_loss = ref

    upd = SACUpdate(copy.deepcopy(actor), critic, hp, generator=torch.Generator().manual_seed(9))
    assert upd.manual == (gradients == "manual")
    diag = upd.update(batch)
    assert float(diag["critic_loss"]) == pytest.approx(ref_q_loss, rel=1e-5)
    assert float(diag["actor_loss"]) == pytest.approx(ref_pi_loss, rel=1e-5, abs=1e-6)
    assert float(upd.log_alpha) == pytest.approx(ref_log_alpha, abs=1e-6)
    for p, q in zip(upd.actor.parameters(), ref_actor.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), atol=1e-5, rtol=1e-4)
    _assert_same_critic(upd.critic, _as_separate(list(ref_nets)))
    _assert_same_critic(upd.target_critic, _as_separate(list(ref_targets)))
    assert not torch.equal(next(upd.actor.parameters()), next(actor.parameters()))  # the step moved something


def test_sac_importance_weights_scale_the_critic_loss_per_row() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, ACT, HIDDEN, LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, HIDDEN, 2)
    batch = _batch(1, weights=True)
    upd = SACUpdate(actor, critic, SACHyperparams(), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = upd._targets(batch)
        q = critic(batch["obs"], batch["action"])
    expected = 0.5 * ((q - y).square() * batch["weights"]).mean(-1).sum()
    upd.generator.manual_seed(0)
    diag = upd.update(batch)
    assert float(diag["critic_loss"]) == pytest.approx(float(expected), rel=1e-5)
    torch.testing.assert_close(diag["td_abs"], (q - y).abs().mean(0))


def test_sac_accepts_crops_for_td_lambda_targets() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, ACT, HIDDEN, LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, HIDDEN, 2)
    upd = SACUpdate(actor, critic, SACHyperparams(td_lambda=0.8), generator=torch.Generator().manual_seed(0))
    flat = _batch(2)
    crops = {k: v.reshape(4, 8, *v.shape[1:]) for k, v in flat.items()}
    diag = upd.update(crops)
    assert diag["td_abs"].shape == (32,) and torch.isfinite(diag["critic_loss"])


# ---------------------------------------------------------------- DDPG against a plain reference step


@pytest.mark.parametrize("gradients", ["manual", "autograd"])
@pytest.mark.parametrize("polyak", ["foreach", "loop"])
def test_ddpg_update_equals_the_reference_step(polyak: str, gradients: str) -> None:
    torch.manual_seed(4)
    actor = DeterministicActor(OBS, ACT, HIDDEN, LOW, HIGH)
    torch.manual_seed(5)
    critic = make_critic("ensemble", OBS, ACT, HIDDEN, 1)
    torch.manual_seed(5)
    q_net = SeparateCritics(OBS, ACT, HIDDEN, 1).nets[0]
    hp = OffPolicyHyperparams(tau=0.2, actor_lr=1e-2, critic_lr=1e-2, polyak=polyak, gradients=gradients)
    batch = _batch(6)

    ref_actor, ref_q = copy.deepcopy(actor), copy.deepcopy(q_net)
    tgt_actor, tgt_q = copy.deepcopy(actor), copy.deepcopy(q_net)
    opt_q, opt_pi = torch.optim.Adam(ref_q.parameters(), lr=1e-2), torch.optim.Adam(ref_actor.parameters(), lr=1e-2)
    with torch.no_grad():
        y = batch["reward"] + 0.99 * (1 - batch["done"].float()) * tgt_q(
            torch.cat([batch["next_obs"], tgt_actor(batch["next_obs"])], -1)
        ).squeeze(-1)
    q_loss = 0.5 * ((ref_q(torch.cat([batch["obs"], batch["action"]], -1)).squeeze(-1) - y) ** 2).mean()
    opt_q.zero_grad()
    q_loss.backward()
    opt_q.step()
    pi_loss = -ref_q(torch.cat([batch["obs"], ref_actor(batch["obs"])], -1)).mean()
    opt_pi.zero_grad()
    pi_loss.backward()
    opt_pi.step()
    with torch.no_grad():
        for net, tgt in ((ref_q, tgt_q), (ref_actor, tgt_actor)):
            for p, tp in zip(net.parameters(), tgt.parameters()):
                tp.copy_(0.8 * tp + 0.2 * p)

    upd = DDPGUpdate(copy.deepcopy(actor), critic, hp)
    diag = upd.update(batch)
    assert float(diag["critic_loss"]) == pytest.approx(float(q_loss), rel=1e-5)
    assert float(diag["actor_loss"]) == pytest.approx(float(pi_loss), rel=1e-5)
    for mine, theirs in ((upd.actor, ref_actor), (upd.target_actor, tgt_actor)):
        for p, q in zip(mine.parameters(), theirs.parameters(), strict=True):
            torch.testing.assert_close(p.detach(), q.detach(), atol=1e-5, rtol=1e-4)
    _assert_same_critic(upd.critic, _as_separate([ref_q]))
    _assert_same_critic(upd.target_critic, _as_separate([tgt_q]))


def test_squashed_actor_actions_stay_in_the_box_and_log_probs_are_exact() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, ACT, HIDDEN, LOW, HIGH)
    obs, noise = torch.randn(500, OBS) * 5, torch.randn(500, ACT) * 3
    a, logp = actor(obs, noise)
    assert (a >= torch.from_numpy(LOW)).all() and (a <= torch.from_numpy(HIGH)).all()
    mean, log_std = (t.double() for t in actor._heads(obs))
    u = mean + log_std.exp() * noise.double()  # float64: 1 - tanh(u)^2 keeps its digits far further out
    naive = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1) - torch.log(
        actor.scale.double() * (1 - torch.tanh(u) ** 2)
    ).sum(-1)
    ok = torch.isfinite(naive)
    assert ok.float().mean() > 0.9
    torch.testing.assert_close(logp[ok].double(), naive[ok], atol=2e-3, rtol=1e-4)
    assert torch.isfinite(logp).all()


@pytest.mark.parametrize("kind", ["sac", "ddpg"])
def test_numpy_actor_follows_the_live_torch_weights(kind: str) -> None:
    torch.manual_seed(0)
    cls = SquashedGaussianActor if kind == "sac" else DeterministicActor
    actor = cls(OBS, ACT, HIDDEN, LOW, HIGH)
    fast = NumpyActor(actor, seed=0)
    obs = np.random.default_rng(0).standard_normal((64, OBS)).astype(np.float32)
    with torch.no_grad():
        want = actor.deterministic(torch.from_numpy(obs)).numpy()
        np.testing.assert_allclose(fast.act_deterministic(obs), want, rtol=1e-5, atol=1e-5)
        for p in actor.parameters():  # an in-place optimizer step is seen without reloading
            p.add_(0.1)
        np.testing.assert_allclose(fast.act_deterministic(obs), actor.deterministic(torch.from_numpy(obs)).numpy(), atol=1e-5)
    if kind == "sac":  # same sampling distribution: same noise in, same action out
        fast.rng = np.random.default_rng(5)
        sampled = fast(obs)
        noise = np.random.default_rng(5).standard_normal((64, ACT), dtype=np.float32)
        with torch.no_grad():
            ref = actor(torch.from_numpy(obs), torch.from_numpy(noise))[0].numpy()
        np.testing.assert_allclose(sampled, ref, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_allclose(fast(obs), fast.act_deterministic(obs))


@pytest.mark.parametrize("gradients", ["autograd", "manual"])
def test_bf16_update_tracks_the_fp32_update(gradients: str) -> None:
    """bf16 matmuls (fp32 weights, losses and Adam) give the same losses and nearly the same step as fp32, under
    autocast (autograd) and in the hand-written step (which keeps its thin layers in fp32)."""
    torch.manual_seed(1)
    actor = SquashedGaussianActor(OBS, ACT, (64, 64), LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, (64, 64), 2)
    batch = _batch(3)
    runs = {}
    for precision in ("fp32", "bf16"):
        a, c = copy.deepcopy(actor), copy.deepcopy(critic)
        hp = SACHyperparams(actor_lr=1e-3, critic_lr=1e-3, precision=precision, gradients=gradients)
        upd = SACUpdate(a, c, hp, generator=torch.Generator().manual_seed(0))
        assert upd.manual == (gradients == "manual")
        diag = upd.update(batch)
        assert all(p.dtype == torch.float32 for p in [*a.parameters(), *c.parameters()])
        delta = torch.cat(
            [
                (p - q).flatten()
                for p, q in zip([*a.parameters(), *c.parameters()], [*actor.parameters(), *critic.parameters()])
            ]
        )
        runs[precision] = (diag, delta.detach())
    (d32, step32), (d16, step16) = runs["fp32"], runs["bf16"]
    assert float(d16["critic_loss"]) == pytest.approx(float(d32["critic_loss"]), rel=0.05)
    assert float(d16["actor_loss"]) == pytest.approx(float(d32["actor_loss"]), rel=0.05, abs=0.05)
    cos = torch.nn.functional.cosine_similarity(step16, step32, dim=0)
    assert cos > 0.9, f"bf16 step direction differs from fp32: cosine {float(cos):.3f}"


@pytest.mark.slow
def test_compiled_update_equals_the_eager_update() -> None:
    """``torch.compile`` of the networks changes how, not what: same losses and parameters after a step."""
    torch.manual_seed(2)
    actor = DeterministicActor(OBS, ACT, (8,), LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, (8,), 1)
    batch = _batch(4)
    results = []
    for compiled in (False, True):
        upd = DDPGUpdate(copy.deepcopy(actor), copy.deepcopy(critic), OffPolicyHyperparams(actor_lr=1e-2), compile=compiled)
        diag = upd.update(batch)
        results.append((diag, [p.detach().clone() for p in [*upd.actor.parameters(), *upd.critic.parameters()]]))
    (d_eager, p_eager), (d_comp, p_comp) = results
    assert float(d_comp["critic_loss"]) == pytest.approx(float(d_eager["critic_loss"]), rel=1e-5)
    assert float(d_comp["actor_loss"]) == pytest.approx(float(d_eager["actor_loss"]), rel=1e-5)
    for a, b in zip(p_eager, p_comp, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_manual_gradients_refuse_what_they_do_not_cover() -> None:
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, ACT, HIDDEN, LOW, HIGH)
    with pytest.raises(ValueError, match="ensemble critic"):
        SACUpdate(actor, make_critic("separate", OBS, ACT, HIDDEN, 2), SACHyperparams(gradients="manual"))
    with pytest.raises(ValueError, match="no compile"):
        SACUpdate(actor, make_critic("ensemble", OBS, ACT, HIDDEN, 2), SACHyperparams(gradients="manual"), compile=True)
    auto = SACUpdate(actor, make_critic("ensemble", OBS, ACT, HIDDEN, 2), SACHyperparams(precision="bf16"))
    assert auto.manual  # the hand-written step covers bf16 too


@pytest.mark.parametrize("weights", [False, True])
def test_manual_critic_step_reports_unscaled_td_errors(weights: bool) -> None:
    """``td_abs`` (new priorities) is ``|Q - y|`` averaged over members, with or without importance weights."""
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, ACT, HIDDEN, LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, HIDDEN, 2)
    batch = _batch(8, weights=weights)
    upd = SACUpdate(actor, critic, SACHyperparams(gradients="manual"), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        q = critic(batch["obs"], batch["action"])
    y = torch.randn(B, generator=torch.Generator().manual_seed(1))
    _, td_abs = upd.critic_step(batch, y)
    torch.testing.assert_close(td_abs, (q - y).abs().mean(0))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_manual_steps_stay_with_autograd_over_many_updates(precision: str) -> None:
    """The hand-written steps keep views and bf16 copies of the weights across updates: after several updates on
    fresh batches they still match autograd's (fp32: to rounding; bf16: the same direction of travel)."""
    torch.manual_seed(4)
    actor = SquashedGaussianActor(OBS, ACT, (32, 32), LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, (32, 32), 2)
    runs = {}
    for gradients in ("autograd", "manual"):
        a, c = copy.deepcopy(actor), copy.deepcopy(critic)
        hp = SACHyperparams(actor_lr=3e-3, critic_lr=3e-3, precision=precision, gradients=gradients)
        upd = SACUpdate(a, c, hp, generator=torch.Generator().manual_seed(0))
        for k in range(6):
            upd.update(_batch(10 + k))
        runs[gradients] = torch.cat(
            [
                (p - q).detach().flatten()
                for p, q in zip([*a.parameters(), *c.parameters()], [*actor.parameters(), *critic.parameters()])
            ]
        )
    if precision == "fp32":
        torch.testing.assert_close(runs["manual"], runs["autograd"], rtol=1e-3, atol=1e-5)
    else:
        cos = torch.nn.functional.cosine_similarity(runs["manual"], runs["autograd"], dim=0)
        assert cos > 0.95, f"bf16 hand-written updates drift from autograd's: cosine {float(cos):.3f}"


def test_bf16_manual_steps_read_the_current_weights() -> None:
    """The bf16 copies are refreshed before each use: weights changed in place between updates (as Adam, or a
    checkpoint load, changes them) are what the next critic step computes with."""
    torch.manual_seed(5)
    actor = SquashedGaussianActor(OBS, ACT, (32, 32), LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, (32, 32), 2)
    upd = SACUpdate(actor, critic, SACHyperparams(precision="bf16"), generator=torch.Generator().manual_seed(0))
    assert upd.manual
    batch = _batch(2)
    upd.update(batch)
    with torch.no_grad():
        for p in critic.parameters():
            p.mul_(2.0)  # Q grows about 8x through three layers
        q_now = critic(batch["obs"], batch["action"]).mean()
    diag, _ = upd.critic_step(batch, torch.zeros(B))
    assert float(diag["q_mean"]) == pytest.approx(float(q_now), rel=0.03)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_manual_steps_reuse_their_scratch_tensors(precision: str) -> None:
    """The hand-written passes allocate their wide intermediates once: after the first update, later updates write
    into the same tensors (same storage), so no update frees and re-faults them."""
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, ACT, (32, 32), LOW, HIGH)
    critic = make_critic("ensemble", OBS, ACT, (32, 32), 2)
    upd = SACUpdate(actor, critic, SACHyperparams(precision=precision), generator=torch.Generator().manual_seed(0))
    assert upd.manual

    def held() -> dict[tuple[str, str, int, str], tuple[torch.Tensor, int]]:
        out = {}
        for name, net in (("actor", upd.manual_actor), ("critic", upd.manual_critic), ("target", upd.manual_target_critic)):
            for (role, layer, dtype), t in net.scratch._held.items():
                out[(name, role, layer, str(dtype))] = (t, t.untyped_storage().data_ptr())
        return out

    upd.update(_batch(0))
    first = held()
    assert len(first) >= 6  # hidden activations of actor, critic and target critic, and the backward's gradients
    for k in range(3):
        upd.update(_batch(1 + k))
    later = held()
    assert later.keys() == first.keys()
    for key, (t, ptr) in first.items():
        assert later[key][0] is t and later[key][1] == ptr, key  # the same tensor, on the same memory

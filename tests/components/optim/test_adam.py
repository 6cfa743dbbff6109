"""LeanAdam and clip_grad_norm equal torch's Adam and clip_grad_norm_, step by step."""

from __future__ import annotations

import copy

import pytest
import torch

from rlbench.components.optim.adam import LeanAdam, clip_grad_norm


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _loss(net: torch.nn.Module, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 4, generator=g)
    y = torch.randn(32, 3, generator=g)
    return ((net(x) - y) ** 2).mean() * 10


@pytest.mark.parametrize("fused", [True, False])
def test_lean_adam_matches_torch_adam(fused: bool) -> None:
    ref_net = _net()
    net = copy.deepcopy(ref_net)
    ref = torch.optim.Adam(ref_net.parameters(), lr=3e-3, eps=1e-5)
    lean = LeanAdam(net.parameters(), lr=3e-3, eps=1e-5, fused=fused)
    for step in range(25):
        for n, o in ((ref_net, ref), (net, lean)):
            o.zero_grad()
            _loss(n, step).backward()
            o.step()
    for p_ref, p in zip(ref_net.parameters(), net.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=1e-5, atol=1e-6)
    assert lean.steps == 25
    # the update really moved the weights
    assert not torch.allclose(next(net.parameters()), next(_net().parameters()))


def test_lean_adam_skips_parameters_without_grad() -> None:
    net = _net()
    lean = LeanAdam(net.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in net.parameters()]
    lean.step()  # no gradients at all: nothing moves
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))


def test_lean_adam_rejects_empty_params() -> None:
    with pytest.raises(ValueError, match="no parameters"):
        LeanAdam([])


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_clip_grad_norm_matches_torch(max_norm: float) -> None:
    a, b = _net(), _net()
    for n in (a, b):
        _loss(n, 0).backward()
    norm_ref = torch.nn.utils.clip_grad_norm_(list(a.parameters()), max_norm, foreach=True)
    norm = clip_grad_norm(list(b.parameters()), max_norm)
    torch.testing.assert_close(norm, norm_ref)
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pb.grad, pa.grad)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in b.parameters()]))
    assert clipped <= max_norm * (1 + 1e-5) or max_norm > norm_ref


def test_flatten_parameters_shares_storage() -> None:
    from rlbench.components.optim.adam import flatten_parameters

    net = _net()
    before = [p.detach().clone() for p in net.parameters()]
    flat = flatten_parameters(list(net.parameters()))
    assert flat.numel() == sum(p.numel() for p in before)
    for p, b in zip(net.parameters(), before):
        assert torch.equal(p, b)  # same values after the move
    with torch.no_grad():
        flat.add_(1.0)  # an update of the flat tensor is seen through every parameter
    for p, b in zip(net.parameters(), before):
        assert torch.equal(p, b + 1.0)
    first = next(net.parameters())
    first.grad.fill_(2.0)  # and gradients written in place land in the flat gradient
    assert flat.grad[: first.numel()].eq(2.0).all() and flat.grad[first.numel() :].eq(0.0).all()


@pytest.mark.parametrize("fused", [True, False])
def test_gradient_laid_out_unlike_its_parameter_gives_the_same_step(fused: bool) -> None:
    """A transposed-view gradient (same values, other strides) steps exactly like a contiguous one; torch's fused
    kernel alone would pair the wrong elements."""
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(4, 3))
    b = torch.nn.Parameter(a.detach().clone())
    g = torch.randn(3, 4).t()
    a.grad, b.grad = g, g.contiguous()
    opt_a, opt_b = LeanAdam([a], lr=0.1, fused=fused), LeanAdam([b], lr=0.1, fused=fused)
    for _ in range(3):
        opt_a.step()
        opt_b.step()
    torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=0)

"""Micro-benchmark: one Polyak target-network update, ``target <- (1 - tau) target + tau online``, four ways.

Run with ``pytest suites/micro/test_target_update.py --benchmark-only`` (or ``rlbench run target-update``). The
variants are :data:`rlbench.components.offpolicy.polyak.POLYAK`: ``copy`` (CleanRL's per-tensor
``copy_(tau * s + (1 - tau) * t)``), ``loop`` (SB3's per-tensor ``mul_``/``add_``), ``lerp`` (per-tensor ``lerp_``)
and ``foreach`` (one ``torch._foreach_lerp_`` over every tensor), on every device torch sees. Sizes:

* ``td3 256x256``: the three target networks of a TD3 agent on a Pendulum-sized task (an actor 3-256-256-1 and
  two critics 4-256-256-1: 18 tensors, 0.2 M parameters), what CleanRL's TD3 updates after every actor step;
* ``td3 1024x1024``: the same 18 tensors with 1024-wide hidden layers (3.2 M parameters), where the
  update's bytes, not its per-tensor calls, start to count.

Each case first checks its variant against the plain formula in float64 on a copy (the suite fails on a wrong
variant, on any device), then times the update; on a GPU a timed call ends with a synchronization.
Rows are named by variant, except ``copy``, the formula as written, which is the report's ``reference`` (its
speed-up column divides by it). ``extra_info``: ``group="target-update"``, ``impl`` (``name`` or ``name@device``),
``variant``, ``size``, ``elements`` (parameters updated), ``tensors``, ``device``.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from rlbench.suites.micro.devices import device_params, impl_label, timed_on

from rlbench.components.offpolicy.polyak import POLYAK

TAU = 0.005
REFERENCE = "reference"  # the report's baseline row: the ``copy`` variant, the formula as CleanRL writes it
SIZES = {"td3 256x256": 256, "td3 1024x1024": 1024}
OBS, ACT = 3, 1


def _mlp(n_in: int, hidden: int, n_out: int) -> list[torch.Tensor]:
    """The weight and bias tensors of an ``n_in``-hidden-hidden-``n_out`` MLP, as ``nn.Linear`` stores them."""
    shapes = [(hidden, n_in), (hidden,), (hidden, hidden), (hidden,), (n_out, hidden), (n_out,)]
    return [torch.randn(*s) * 0.05 for s in shapes]


@functools.cache
def _host_pairs(hidden: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Seeded (targets, online) tensors of an actor and two critics, on the CPU."""
    torch.manual_seed(hidden)
    nets = [(OBS, ACT), (OBS + ACT, 1), (OBS + ACT, 1)]
    online = [t for n_in, n_out in nets for t in _mlp(n_in, hidden, n_out)]
    targets = [t + 0.01 * torch.randn_like(t) for t in online]
    return targets, online


def pairs(hidden: int, device: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Fresh copies of :func:`_host_pairs` on ``device`` (each case mutates its own targets)."""
    targets, online = _host_pairs(hidden)
    return [t.to(device, copy=True) for t in targets], [s.to(device, copy=True) for s in online]


def check(variant: str, hidden: int, device: str) -> None:
    """``variant`` on ``device`` equals the plain formula computed in float64; raises AssertionError if not."""
    targets, online = pairs(hidden, device)
    expected = [((1 - TAU) * t.double() + TAU * s.double()).float() for t, s in zip(targets, online)]
    POLYAK[variant](targets, online, TAU)
    for t, e in zip(targets, expected):
        torch.testing.assert_close(t, e, rtol=1e-6, atol=1e-7)


CASES = [
    pytest.param(variant, size, *dev.values, marks=dev.marks, id=f"{variant}-{size.replace(' ', '-')}-{dev.id}")
    for size in SIZES
    for variant in POLYAK
    for dev in device_params()
]


@pytest.mark.parametrize("variant, size, device", CASES)
def test_target_update(benchmark: Any, variant: str, size: str, device: str) -> None:
    """Times one Polyak update of the three target networks."""
    hidden = SIZES[size]
    check(variant, hidden, device)
    targets, online = pairs(hidden, device)
    fn = POLYAK[variant]
    call = timed_on(device, lambda: fn(targets, online, TAU))
    for _ in range(3):  # warm-up: the allocator's blocks for the temporaries, the first kernel launches
        call()
    benchmark.group = f"target-update {size}"
    benchmark.extra_info.update(
        group="target-update",
        impl=impl_label(REFERENCE if variant == "copy" else variant, device),
        variant=variant,
        size=size,
        elements=sum(t.numel() for t in targets),
        tensors=len(targets),
        device=device,
    )
    benchmark(call)
    assert all(bool(torch.isfinite(t).all()) for t in targets)

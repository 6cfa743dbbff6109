"""Micro-benchmark: the ops of one hand-written PPO minibatch step, torch's plain op beside rlbench's drop-in form.

Run with ``pytest suites/micro/test_update_ops.py --benchmark-only``. Shapes are those of ``ppo-cartpole``'s
update: a 512-row minibatch through the fused 64-64 tanh actor-critic (two stacked networks, a 2-wide head), one
torch thread. Rows (``impl``) per op (``size``); ``reference`` is always torch's plain form:

* ``tanh (2,512,64)``: ``reference`` (``torch.tanh_``) and ``numpy`` (:func:`rlbench.components.nets.kernels.tanh_`);
* ``head (2,512,64)@(2,64,2)``: ``reference`` (``torch.baddbmm``) and ``transposed`` (:func:`kernels.baddbmm`);
* ``head weight grad``: ``reference`` (``xᵀ @ g`` with ``torch.matmul``) and ``transposed``
  (:func:`kernels.weight_grad`);
* ``minibatch step``: ``reference``, the network's autograd step, beside the forward, loss gradient and backward of
  :mod:`rlbench.components.ppo.manual` (``manual``).

``extra_info``: ``group="update-ops"``, ``impl``, ``size``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from rlbench.components.envs.base import ActionSpec
from rlbench.components.nets import kernels
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic
from rlbench.components.ppo import manual
from rlbench.components.ppo.loss import ppo_loss

B, H = 512, 64


@functools.cache
def tensors() -> dict[str, Any]:
    """Seeded inputs at the PPO CartPole shapes, and the fused network."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = FusedActorCritic(ActorCritic(4, ActionSpec("discrete", n=2), (H, H), "tanh", "orthogonal"))
    obs = torch.randn(B, 4, generator=g)
    return {
        "model": model,
        "obs": obs,
        "actions": torch.randint(0, 2, (B,), generator=g),
        "old_logp": torch.full((B,), -0.69),
        "adv": torch.randn(B, generator=g),
        "ret": torch.randn(B, generator=g),
        "h": torch.randn(2, B, H, generator=g),
        "w_head": torch.randn(2, H, 2, generator=g),
        "b_head": torch.randn(2, 1, 2, generator=g),
        "g_head": torch.randn(2, B, 2, generator=g),
    }


def _manual_step() -> None:
    t = tensors()
    cache = manual.forward(t["model"], t["obs"], t["actions"], t["old_logp"], t["adv"], t["ret"], 0.2, 0.5, 0.0)
    manual.backward(t["model"], cache)


def _autograd_step() -> None:
    t = tensors()
    model = t["model"]
    logp, entropy, value = model.evaluate(t["obs"], t["actions"], with_entropy=False)
    terms = ppo_loss(logp, t["old_logp"], t["adv"], value, t["ret"], entropy, 0.2, 0.5, 0.0, normalize_advantages=False)
    model.zero_grad()
    terms.loss.backward()


def _cases() -> dict[tuple[str, str], Callable[[], Any]]:
    t = tensors()
    h, w, b, g = t["h"], t["w_head"], t["b_head"], t["g_head"]
    act = torch.empty_like(h)
    return {
        ("tanh (2,512,64)", "reference"): lambda: torch.tanh_(act.copy_(h)),
        ("tanh (2,512,64)", "numpy"): lambda: kernels.tanh_(act.copy_(h)),
        ("head (2,512,64)@(2,64,2)", "reference"): lambda: torch.baddbmm(b, h, w),
        ("head (2,512,64)@(2,64,2)", "transposed"): lambda: kernels.baddbmm(b, h, w),
        ("head weight grad", "reference"): lambda: torch.matmul(h.transpose(1, 2), g),
        ("head weight grad", "transposed"): lambda: kernels.weight_grad(h, g),
        ("minibatch step", "reference"): _autograd_step,
        ("minibatch step", "manual"): _manual_step,
    }


CASES = list(_cases())


@pytest.mark.parametrize("size, impl", CASES, ids=[f"{s}-{i}" for s, i in CASES])
def test_update_op(benchmark: Any, size: str, impl: str) -> None:
    """Times one op (or the whole minibatch step) at the PPO CartPole update's shapes on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn = _cases()[(size, impl)]
        fn()  # warm-up: allocator, lazy init
        benchmark.group = f"update-ops {size}"
        benchmark.extra_info.update(group="update-ops", impl=impl, size=size)
        benchmark(fn)
    finally:
        torch.set_num_threads(threads)

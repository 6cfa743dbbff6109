"""Micro-benchmark: one rollout-time policy call (``act``: actions, log-probs, values) across batch sizes.

Run with ``pytest suites/micro/test_forward.py --benchmark-only``. The network is rlbench's default
CartPole actor-critic (obs 4, two discrete actions, separate 64-64 tanh MLPs). Implementations (``impl``):

* ``reference`` — :class:`ActorCritic` (two ``nn.Sequential``) called under ``torch.no_grad``;
* ``actor_critic+inference_mode`` — the same under ``torch.inference_mode``;
* ``fused+no_grad`` / ``fused+inference_mode`` — :class:`FusedActorCritic` (one ``baddbmm`` per depth);
* ``numpy`` — :class:`NumpyPolicy` on a weight snapshot (NumPy observations in, NumPy out);
* ``compiled+inference_mode`` — ``torch.compile`` of the reference's ``act`` (``dynamic=True``, compiled once per
  process), only when ``RLBENCH_BENCH_COMPILE=1``: compiling takes tens of seconds. Its compile time (the first
  call) is in ``extra_info["compile_s"]``.

Torch variants take a ready float32 tensor, the NumPy one an array (no conversion is timed). Torch variants run on
every device of the matrix (:mod:`rlbench.suites.micro.devices`: rows ``impl@cuda:N``, synchronized inside the
timed call; an absent CUDA is skipped with a note). ``extra_info``: ``group="forward"``, ``impl``, ``size``
(``B=...``), ``elements`` (the batch size) and ``device``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from rlbench.suites.micro.devices import device_params, impl_label, synchronizer

from rlbench.components.envs.base import ActionSpec
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic
from rlbench.components.nets.policies import NumpyPolicy

BATCH_SIZES = (1, 8, 64, 512, 4096)
COMPILE = os.environ.get("RLBENCH_BENCH_COMPILE") == "1"
IMPLS = (
    "reference",
    "actor_critic+inference_mode",
    "fused+no_grad",
    "fused+inference_mode",
    "numpy",
    "compiled+inference_mode",
)
NO_COMPILE = pytest.mark.skip(reason="set RLBENCH_BENCH_COMPILE=1 to time torch.compile (compiling takes ~20 s)")
DEVICES = device_params()
CASES = [
    pytest.param(
        impl,
        b,
        dev.values[0],
        id=f"{impl}-B{b}" + ("" if dev.id == "cpu" else f"-{dev.id}"),
        marks=[*dev.marks, *([NO_COMPILE] if impl.startswith("compiled") and not COMPILE else [])],
    )
    for b in BATCH_SIZES
    for impl in IMPLS
    for dev in (DEVICES if impl != "numpy" else DEVICES[:1])
]


@functools.cache
def network(device: str = "cpu") -> ActorCritic:
    """The shared reference network (fixed seed), on ``device``."""
    torch.manual_seed(0)
    return ActorCritic(4, ActionSpec("discrete", n=2), hidden=(64, 64), init="orthogonal").eval().to(device)


@functools.cache
def compiled_act(device: str = "cpu") -> tuple[Callable[[torch.Tensor], Any], dict[str, float]]:
    """``torch.compile`` of the reference's ``act`` and a dict that receives its compile time on the first call."""
    net = network(device)
    return torch.compile(lambda obs: net.act(obs), dynamic=True), {}


def observations(batch: int) -> np.ndarray:
    """CartPole-like float32 observations."""
    return (np.random.default_rng(batch).standard_normal((batch, 4)) * [1.0, 1.0, 0.1, 1.0]).astype(np.float32)


def make_call(impl: str, batch: int, device: str = "cpu") -> tuple[Callable[[], Any], dict[str, Any]]:
    """The timed zero-argument call for ``impl`` at ``batch`` on ``device``, and extra info to report."""
    obs_np = observations(batch)
    if impl == "numpy":
        policy = NumpyPolicy(network(), seed=0)
        return lambda: policy.act(obs_np), {}
    obs = torch.from_numpy(obs_np).to(device)
    sync = synchronizer(device)
    model, _, mode = impl.partition("+")
    ctx: Callable[[], contextlib.AbstractContextManager[Any]] = (
        torch.inference_mode if mode == "inference_mode" else torch.no_grad
    )
    info: dict[str, Any] = {}
    if model == "compiled":
        fn, compile_info = compiled_act(device)
        if "compile_s" not in compile_info:
            start = time.perf_counter()
            with ctx():
                fn(obs)
            sync()
            compile_info["compile_s"] = time.perf_counter() - start
        info["compile_s"] = compile_info["compile_s"]
        act = fn
    else:
        net = network(device)
        act = (FusedActorCritic(net).eval() if model == "fused" else net).act

    def call() -> Any:
        with ctx():
            out = act(obs)
        sync()  # GPU: wait for the kernels (a no-op on the CPU)
        return out

    return call, info


@pytest.mark.parametrize("impl, batch, device", CASES)
def test_forward(benchmark: Any, impl: str, batch: int, device: str) -> None:
    """Times one policy ``act`` call on a batch of observations."""
    call, info = make_call(impl, batch, device)
    for _ in range(3):  # warm-up: allocator, NumPy buffers, compiled-graph specialization for this batch size
        call()
    benchmark.group = f"forward B={batch}"
    benchmark.extra_info.update(
        group="forward", impl=impl_label(impl, device), size=f"B={batch}", elements=batch, device=device, **info
    )
    actions, logp, values = benchmark(call)
    assert actions.shape == (batch,) and logp.shape == (batch,) and values.shape == (batch,)

"""Micro-benchmark: replay buffers, ``sample`` and ``add`` across capacities and batch sizes.

Run with ``pytest suites/micro/test_buffers.py --benchmark-only``. Buffers hold 8-float observations and
2-float actions (80-byte records, about 80 MB per 1e6 rows) and are filled once per (buffer, capacity), then shared
by the benchmarks of that pair (``add`` keeps wrapping around a full buffer). Variants:

* ``uniform-numpy`` / ``uniform-numba``: ``sample`` into fresh NumPy arrays with NumPy calls / one compiled call
  (``kernel="numpy"`` / ``"numba"``);
* ``uniform-numpy-to-torch`` / ``uniform-numba-to-torch``: ``sample_torch``, tensors out over reused buffers (the
  "sample delivered as torch tensors" case);
* ``uniform-torch``: torch storage and ``sample`` (tensors in, tensors out), on every device of the matrix
  (``uniform-torch@cuda:N``, synchronized inside the timed call; an absent CUDA is skipped with a note);
* ``prioritized-numba`` / ``prioritized-numpy``: stratified sampling with importance weights on the sum tree, one
  fused compiled call / NumPy kernels;
* ``trajectory-slices``: ``sample_slices(batch // 8, 8)`` (200-step episodes), elements = rows returned;
* ``memmap``: the uniform buffer on ``np.memmap`` files in a temporary directory (page-cache warm), ``sample``;
* ``user:NAME``: ``rlbench run buffers --impl pkg.mod:Class`` (checked first, see :mod:`rlbench.suites.micro.user_impls`);
* ``rlox`` / ``torchrl`` / ``sb3``: other libraries' replay buffers where installed (``peer=True`` rows, filled with the
  same transitions; what each times and its asymmetries: :mod:`rlbench.suites.micro.peer_replay`).

``add`` pushes ``batch`` transitions per call as a dict of arrays, except ``uniform-numba-rows`` and
``prioritized-numba-rows``: ``add_rows`` of one packed record array (``new_rows``), the fast push.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlbench.suites.micro.devices import device_params, impl_label, timed_on
from rlbench.suites.micro.peer_replay import installed as installed_peers
from rlbench.suites.micro.user_impls import user_cases

from rlbench.components.replay import MemmapReplayBuffer, PrioritizedReplayBuffer, TrajectoryReplayBuffer, UniformReplayBuffer

OBS_SHAPE, ACTION_SHAPE, EPISODE_LEN, SLICE_LEN = (8,), (2,), 200, 8
CAPACITIES = {"1e5": 100_000, "1e6": 1_000_000}
SAMPLE_BATCHES, ADD_BATCHES = [256, 4096], [8, 256]
USER = user_cases(os.environ.get("RLBENCH_USER_IMPLS"))
Factory = Callable[[int, Path], Any]


def _uniform(kernel: str, backend: str = "numpy", device: str = "cpu") -> Factory:
    return lambda cap, _: UniformReplayBuffer(
        cap, OBS_SHAPE, ACTION_SHAPE, backend=backend, device=device, seed=0, kernel=kernel
    )


def _prioritized(kernel: str) -> Factory:
    return lambda cap, _: PrioritizedReplayBuffer(cap, OBS_SHAPE, ACTION_SHAPE, seed=0, kernel=kernel)


def _sample(b: Any, n: int) -> Any:
    return b.sample(n)


def _sample_torch(b: Any, n: int) -> Any:
    return b.sample_torch(n)


# variant -> (buffer it is built on, factory(capacity, tmp dir), sample call(buffer, batch), device)
VARIANTS: dict[str, tuple[str, Factory, Callable[[Any, int], Any], str]] = {
    "uniform-numpy": ("uniform-numpy", _uniform("numpy"), _sample, "cpu"),
    "uniform-numba": ("uniform-numba", _uniform("numba"), _sample, "cpu"),
    "uniform-numpy-to-torch": ("uniform-numpy", _uniform("numpy"), _sample_torch, "cpu"),
    "uniform-numba-to-torch": ("uniform-numba", _uniform("numba"), _sample_torch, "cpu"),
    "prioritized-numba": ("prioritized-numba", _prioritized("numba"), _sample, "cpu"),
    "prioritized-numpy": ("prioritized-numpy", _prioritized("numpy"), _sample, "cpu"),
    "trajectory-slices": (
        "trajectory",
        lambda cap, _: TrajectoryReplayBuffer(cap, OBS_SHAPE, ACTION_SHAPE, seed=0),
        lambda b, n: b.sample_slices(n // SLICE_LEN, SLICE_LEN),
        "cpu",
    ),
    "memmap": (
        "memmap",
        lambda cap, tmp: MemmapReplayBuffer(tmp / f"mm-{cap}", cap, OBS_SHAPE, ACTION_SHAPE, seed=0),
        _sample,
        "cpu",
    ),
    **{name: (name, lambda cap, _, cls=cls: cls(cap, OBS_SHAPE, ACTION_SHAPE), _sample, "cpu") for name, cls in USER.items()},
}
DEVICES = device_params()  # the torch-storage buffer runs on every device of the matrix
ADD_VARIANTS = [
    "uniform-numpy",
    "uniform-numba-rows",
    "prioritized-numba",
    "prioritized-numba-rows",
    "prioritized-numpy",
    "trajectory-slices",
    "memmap",
    *USER,
]


def transitions(start: int, n: int, as_torch: bool = False, device: str = "cpu") -> dict[str, Any]:
    """Deterministic transitions; ``done`` every :data:`EPISODE_LEN` steps."""
    rng = np.random.default_rng(start)
    obs = rng.standard_normal((n, *OBS_SHAPE), dtype=np.float32)
    batch = {
        "obs": obs,
        "action": rng.standard_normal((n, *ACTION_SHAPE), dtype=np.float32),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "next_obs": obs + 1.0,
        "done": np.arange(start, start + n) % EPISODE_LEN == EPISODE_LEN - 1,
    }
    return {k: torch.from_numpy(v).to(device) for k, v in batch.items()} if as_torch else batch


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Factory, int, str], Any]:
    """``get(kind, factory, capacity, device)``: a full buffer, built once per (kind, capacity) and reused."""
    cache: dict[tuple[str, int], Any] = {}
    tmp = tmp_path_factory.mktemp("buffers")

    def get(kind: str, factory: Factory, capacity: int, device: str = "cpu") -> Any:
        if (kind, capacity) not in cache:
            buf = factory(capacity, tmp)
            chunk = 100_000
            for start in range(0, capacity, chunk):
                buf.add(
                    transitions(start, min(chunk, capacity - start), as_torch=kind.startswith("uniform-torch"), device=device)
                )
            cache[kind, capacity] = buf
        return cache[kind, capacity]

    yield get
    for buf in cache.values():
        if isinstance(buf, MemmapReplayBuffer):
            buf.close()


def _check_rows(out: Any, batch: int) -> None:
    assert tuple(out["obs"].shape[-1:]) == OBS_SHAPE and math.prod(out["obs"].shape[:-1]) == batch


@pytest.mark.parametrize("batch", SAMPLE_BATCHES, ids=[f"b{b}" for b in SAMPLE_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("variant", VARIANTS)
def test_sample(benchmark: Any, filled: Callable[..., Any], variant: str, cap: str, batch: int) -> None:
    """Times one ``sample`` (or ``sample_torch`` / ``sample_slices``) call of ``batch`` rows from a full buffer."""
    kind, factory, sample, _ = VARIANTS[variant]
    buf = filled(kind, factory, CAPACITIES[cap])
    sample(buf, batch)  # warm-up: numba JIT / cache load, scratch and output buffers
    benchmark.group = f"buffers sample cap={cap} batch={batch}"
    benchmark.extra_info.update(group="buffers", impl=variant, size=f"cap{cap}-b{batch}", elements=batch, op="sample")
    _check_rows(benchmark(sample, buf, batch), batch)


@pytest.mark.parametrize("batch", SAMPLE_BATCHES, ids=[f"b{b}" for b in SAMPLE_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("device", DEVICES)
def test_sample_torch_storage(benchmark: Any, filled: Callable[..., Any], device: str, cap: str, batch: int) -> None:
    """Times ``sample`` of the torch-storage buffer on ``device`` (synchronized inside the timed call)."""
    buf = filled(f"uniform-torch-{device}", _uniform("numpy", "torch", device), CAPACITIES[cap], device)
    call = timed_on(device, _sample)
    call(buf, batch)
    benchmark.group = f"buffers sample cap={cap} batch={batch}"
    benchmark.extra_info.update(
        group="buffers",
        impl=impl_label("uniform-torch", device),
        size=f"cap{cap}-b{batch}",
        elements=batch,
        op="sample",
        device=device,
    )
    _check_rows(benchmark(call, buf, batch), batch)


def _adder(variant: str, buf: Any, batch: int) -> Callable[[], Any]:
    """The timed push of ``batch`` transitions: ``add(dict)``, or ``add_rows`` of one packed record array."""
    rows = transitions(7, batch)
    if not variant.endswith("-rows"):
        return lambda: buf.add(rows)
    packed = buf.new_rows(batch)
    for name, values in rows.items():
        packed[name] = values
    return lambda: buf.add_rows(packed)


@pytest.mark.parametrize("batch", ADD_BATCHES, ids=[f"b{b}" for b in ADD_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("variant", ADD_VARIANTS)
def test_add(benchmark: Any, filled: Callable[..., Any], variant: str, cap: str, batch: int) -> None:
    """Times one push of ``batch`` transitions to a full buffer (wrapping around every ``capacity / batch`` calls)."""
    base = variant.removesuffix("-rows")
    kind, factory, _, _ = VARIANTS[base]
    buf = filled(kind, factory, CAPACITIES[cap])
    push = _adder(variant, buf, batch)
    push()
    benchmark.group = f"buffers add cap={cap} batch={batch}"
    benchmark.extra_info.update(group="buffers", impl=variant, size=f"cap{cap}-b{batch}", elements=batch, op="add")
    benchmark(push)
    assert len(buf) == CAPACITIES[cap]


@pytest.mark.parametrize("batch", ADD_BATCHES, ids=[f"b{b}" for b in ADD_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("device", DEVICES)
def test_add_torch_storage(benchmark: Any, filled: Callable[..., Any], device: str, cap: str, batch: int) -> None:
    """Times one ``add`` of ``batch`` tensors already on ``device`` to the torch-storage buffer there."""
    buf = filled(f"uniform-torch-{device}", _uniform("numpy", "torch", device), CAPACITIES[cap], device)
    rows = transitions(7, batch, as_torch=True, device=device)
    call = timed_on(device, buf.add)
    call(rows)
    benchmark.group = f"buffers add cap={cap} batch={batch}"
    benchmark.extra_info.update(
        group="buffers",
        impl=impl_label("uniform-torch", device),
        size=f"cap{cap}-b{batch}",
        elements=batch,
        op="add",
        device=device,
    )
    benchmark(call, rows)
    assert len(buf) == CAPACITIES[cap]


@pytest.fixture(scope="module")
def filled_peer() -> Callable[..., Any]:
    """``get(peer, capacity, add_batch=None)``: a peer's full buffer (the same transitions as ``filled``), built once.

    SB3 builds one buffer per add batch size (``n_envs``); its sampling buffer has ``n_envs=1``.
    """
    cache: dict[tuple[str, int, int], Any] = {}

    def get(peer: str, capacity: int, add_batch: int | None = None) -> Any:
        p = installed_peers()[peer]
        rows_per_add = add_batch if p.per_add_batch and add_batch else 1
        if (peer, capacity, rows_per_add) not in cache:
            buf = p.make(capacity, rows_per_add)
            chunks = [transitions(start, min(100_000, capacity - start)) for start in range(0, capacity, 100_000)]
            p.fill(buf, {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]})
            cache[peer, capacity, rows_per_add] = buf
        return cache[peer, capacity, rows_per_add]

    yield get
    cache.clear()


@pytest.mark.parametrize("batch", SAMPLE_BATCHES, ids=[f"b{b}" for b in SAMPLE_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("peer", sorted(installed_peers()))
def test_sample_peer(benchmark: Any, filled_peer: Callable[..., Any], peer: str, cap: str, batch: int) -> None:
    """Times another library's ``sample`` of ``batch`` rows from its full buffer (rlox, TorchRL, SB3; see ``peer_replay``)."""
    p = installed_peers()[peer]
    buf = filled_peer(peer, CAPACITIES[cap])
    p.sample(buf, batch)  # warm-up: imports, lazy init
    benchmark.group = f"buffers sample cap={cap} batch={batch}"
    benchmark.extra_info.update(group="buffers", impl=peer, size=f"cap{cap}-b{batch}", elements=batch, op="sample", peer=True)
    _check_rows(p.to_rows(benchmark(p.sample, buf, batch)), batch)


@pytest.mark.parametrize("batch", ADD_BATCHES, ids=[f"b{b}" for b in ADD_BATCHES])
@pytest.mark.parametrize("cap", CAPACITIES, ids=[f"cap{c}" for c in CAPACITIES])
@pytest.mark.parametrize("peer", sorted(installed_peers()))
def test_add_peer(benchmark: Any, filled_peer: Callable[..., Any], peer: str, cap: str, batch: int) -> None:
    """Times another library's push of ``batch`` transitions, already in its own types, to its full buffer."""
    p = installed_peers()[peer]
    buf = filled_peer(peer, CAPACITIES[cap], batch)
    held = p.size(buf)
    args = p.prepare(transitions(7, batch))
    p.add(buf, *args)  # warm-up
    benchmark.group = f"buffers add cap={cap} batch={batch}"
    benchmark.extra_info.update(group="buffers", impl=peer, size=f"cap{cap}-b{batch}", elements=batch, op="add", peer=True)
    benchmark(p.add, buf, *args)
    assert p.size(buf) == held > CAPACITIES[cap] - batch

"""The device matrix of the micro-benchmark suites: every torch device kind, skipped with a note when absent.

Torch variants are parametrized over :func:`device_params`: ``cpu`` always, each visible ``cuda:N`` (or one
``cuda`` case skipped with the reason ``"cuda: not available on this machine"``), and ``mps`` where it exists.
The runner collects those skip reasons into the records, and the micro report lists them under its header.

GPU work is asynchronous: a timed call on a CUDA/MPS device ends with :func:`synchronizer`'s call, so
pytest-benchmark's wall-clock time covers the kernels, not only their launch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlbench.core.devices import SKIP_SUFFIX


def device_params() -> list[Any]:
    """``pytest.param`` per device: available ones as ids ``cpu``, ``cuda:0``, ...; absent CUDA skipped with a note."""
    import pytest

    from rlbench.core.devices import available_devices

    found = available_devices()
    params = [pytest.param(d, id=d) for d in found]
    if not any(d.startswith("cuda") for d in found):
        params.append(pytest.param("cuda", id="cuda", marks=pytest.mark.skip(reason=f"cuda: {SKIP_SUFFIX}")))
    return params


def synchronizer(device: str) -> Callable[[], None]:
    """A function that waits for ``device``'s queued work (a no-op on the CPU)."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        dev = torch.device(device)
        return lambda: torch.cuda.synchronize(dev)
    if kind == "mps":
        return torch.mps.synchronize
    return lambda: None


def impl_label(name: str, device: str) -> str:
    """The report's row label: ``name`` on the CPU, ``name@device`` elsewhere."""
    return name if device == "cpu" else f"{name}@{device}"


def timed_on(device: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` followed by a device synchronization (``fn`` itself on the CPU)."""
    if device == "cpu":
        return fn
    sync = synchronizer(device)

    def call(*args: Any) -> Any:
        out = fn(*args)
        sync()
        return out

    return call

"""rlbench: benchmarking and profiling harness for reinforcement-learning training code.

The public API is imported lazily, so ``import rlbench`` stays instant (no torch, no pandas):

* ``rlbench.phase("gae")``: name a phase of your code (context manager or decorator); free outside a profile.
* ``rlbench.session("my-ppo")``: profile the code inside ``with`` (automatic attribution) and store its records.
* ``rlbench.record("eval_return", values, unit="return", direction="higher")``: store a metric of your own.
* ``rlbench.benchmark``: declare a benchmark function for ``rlbench run`` (in ``./suites/`` or an entry point).
* ``rlbench.load(path)``: stored records as a tidy pandas DataFrame.

The ``rlbench`` command runs benchmarks, profiles scripts (``rlbench profile -- python train.py``) and renders reports.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "phase": ("rlbench.instrument.attribution", "phase"),
    "session": ("rlbench.profiling.session", "session"),
    "record": ("rlbench.profiling.session", "record"),
    "benchmark": ("rlbench.userbench", "benchmark"),
    "load": ("rlbench.store", "load"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

"""rlbench: benchmarking and profiling harness for reinforcement-learning training code.

The public API is imported lazily, so ``import rlbench`` stays instant (no torch, no pandas):

* ``rlbench.phase("gae")``: name a phase of your code (context manager or decorator); free outside a profile.
* ``rlbench.session("my-ppo")``: profile the code inside ``with`` (automatic attribution) and store its records.
* ``rlbench.record("eval_return", values, unit="return", direction="higher")``: store a metric of your own.
* ``rlbench.role("learner")``: name the role of the calling thread (or, from a process's main thread, the process).
* ``rlbench.benchmark``: declare a benchmark function for ``rlbench run`` (in ``./suites/`` or an entry point).
* ``rlbench.Value(x, unit="s", direction="lower")``: a value such a function returns, with its unit and direction.
* ``rlbench.BenchmarkSpec`` / ``rlbench.RunContext``: declare a benchmark with its own config dataclass.
* ``rlbench.load(path)``: stored records as a tidy pandas DataFrame.

The ``rlbench`` command runs benchmarks, profiles scripts (``rlbench profile -- python train.py``) and renders reports.
The SB3 callback is ``rlbench.profiling.sb3.RlbenchCallback``.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

_LAZY = {
    "phase": ("rlbench.profiling.attribution", "phase"),
    "session": ("rlbench.profiling.session", "session"),
    "record": ("rlbench.profiling.session", "record"),
    "role": ("rlbench.profiling.threads", "role"),
    "benchmark": ("rlbench.run.userbench", "benchmark"),
    "Value": ("rlbench.results.metrics", "Value"),
    "BenchmarkSpec": ("rlbench.run.registry", "BenchmarkSpec"),
    "RunContext": ("rlbench.run.registry", "RunContext"),
    "load": ("rlbench.results.store", "load"),
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


class _CheckoutSuites:
    """``rlbench.suites`` from a source checkout's top-level ``suites/`` folder.

    An install maps ``suites/`` to ``rlbench.suites``. When Python imports this package from a checkout instead (the
    checkout's root is first on ``sys.path``: ``pytest suites/micro/...`` or ``python -m ...`` run from the root), the
    checkout's ``rlbench/`` has no ``suites`` inside it; this finder, asked last, gives the checkout's own ``suites/``
    so the checkout runs its own suites with its own rlbench. (A plain class with ``find_spec``, all the import system
    asks of a finder: ``importlib.abc`` and ``pathlib`` would cost every ``import rlbench`` a dozen milliseconds.)
    """

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != "rlbench.suites":
            return None
        root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        suites = os.path.join(root, "suites")
        init = os.path.join(suites, "__init__.py")
        if not os.path.isfile(init) or not os.path.isfile(os.path.join(root, "pyproject.toml")):
            return None
        from importlib.util import spec_from_file_location

        return spec_from_file_location(fullname, init, submodule_search_locations=[suites])


if not any(isinstance(f, _CheckoutSuites) for f in sys.meta_path):
    sys.meta_path.append(_CheckoutSuites())

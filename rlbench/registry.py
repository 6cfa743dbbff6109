"""Deprecated import path, kept for one release: use ``rlbench.BenchmarkSpec`` and ``rlbench.RunContext`` (or
``rlbench.run.registry``)."""

import warnings

from rlbench.run import registry as _registry

warnings.warn(
    "rlbench.registry is deprecated and will be removed in the next release: import BenchmarkSpec and RunContext "
    "from rlbench (or rlbench.run.registry)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> object:
    return getattr(_registry, name)

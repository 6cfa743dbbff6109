"""Deprecated import path, kept for one release: use ``rlbench.profiling.sb3.RlbenchCallback``."""

import warnings

from rlbench.profiling import sb3 as _sb3

warnings.warn(
    "rlbench.integrations.sb3 is deprecated and will be removed in the next release: import RlbenchCallback from "
    "rlbench.profiling.sb3",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> object:
    return getattr(_sb3, name)

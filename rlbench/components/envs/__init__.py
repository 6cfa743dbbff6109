"""Vectorized environments behind rlbench's :class:`VecEnv` protocol.

Importing this package does not import gymnasium: :class:`GymnasiumVecEnv` is loaded on first
access, and :func:`make_vec_env` only loads it for backends that need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlbench.components.envs.base import ActionSpec, StepResult, VecEnv
from rlbench.components.envs.cartpole import NumpyCartPoleVecEnv
from rlbench.components.envs.pendulum import NumpyPendulumVecEnv

if TYPE_CHECKING:
    from rlbench.components.envs.gym_vector import GymnasiumVecEnv

__all__ = [
    "BACKENDS",
    "ActionSpec",
    "GymnasiumVecEnv",
    "NumpyCartPoleVecEnv",
    "NumpyPendulumVecEnv",
    "StepResult",
    "VecEnv",
    "make_vec_env",
]

BACKENDS = ("auto", "numpy", "sync", "async")
_NUMPY_ENVS = {"CartPole-v1": NumpyCartPoleVecEnv, "Pendulum-v1": NumpyPendulumVecEnv}


def __getattr__(name: str) -> Any:
    """Load :class:`GymnasiumVecEnv` (and gymnasium) on first access."""
    if name == "GymnasiumVecEnv":
        from rlbench.components.envs.gym_vector import GymnasiumVecEnv

        return GymnasiumVecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_vec_env(env_id: str, num_envs: int, *, backend: str = "auto") -> VecEnv:
    """Build ``num_envs`` copies of ``env_id`` stepped together with same-step autoreset.

    Args:
        env_id: A gymnasium id such as ``"CartPole-v1"``.
        num_envs: Number of sub-environments.
        backend: ``"auto"`` (the NumPy implementation when there is one, else ``"sync"``),
            ``"numpy"`` (rlbench's NumPy implementation: ``CartPole-v1`` and ``Pendulum-v1``), or ``"sync"`` /
            ``"async"`` (gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv``).

    Returns:
        The vectorized environment.

    Raises:
        ValueError: For an unknown backend, a ``"numpy"`` request for an id without a NumPy
            implementation, or an unknown env id.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown env backend {backend!r}; expected one of {BACKENDS}")
    if backend in ("auto", "numpy") and env_id in _NUMPY_ENVS:
        return _NUMPY_ENVS[env_id](num_envs)
    if backend == "numpy":
        raise ValueError(
            f"the 'numpy' env backend implements only {sorted(_NUMPY_ENVS)}, not {env_id!r}; use 'sync' or 'async'"
        )
    from rlbench.components.envs.gym_vector import GymnasiumVecEnv

    return GymnasiumVecEnv(env_id, num_envs, vectorization="sync" if backend == "auto" else backend)

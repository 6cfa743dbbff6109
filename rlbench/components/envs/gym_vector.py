"""Adapter from any gymnasium environment id to rlbench's :class:`~rlbench.components.envs.base.VecEnv`.

Sub-envs run in gymnasium's ``SyncVectorEnv`` or ``AsyncVectorEnv`` with
``AutoresetMode.SAME_STEP``: when an episode ends, the same ``step`` returns the reset observation
in ``obs`` and the terminal one in ``final_obs`` (taken from ``info["final_obs"]`` where
``info["_final_obs"]`` is set). Observations are returned as float32.

gymnasium is imported when an adapter is built, never when rlbench's env package is imported.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np

from rlbench.components.envs.base import ActionSpec, StepResult

VECTORIZATION_MODES = ("sync", "async")


def _unknown_env_error(gym: Any, env_id: str) -> ValueError:
    """Build the error for an id missing from gymnasium's registry, with close registered ids.

    Args:
        gym: The imported ``gymnasium`` module.
        env_id: The id that was asked for.

    Returns:
        A ValueError naming the id and suggesting up to five close registered ids.
    """
    registered = sorted(gym.registry.keys())
    by_lower = {name.lower(): name for name in registered}
    close = difflib.get_close_matches(env_id.lower(), list(by_lower), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(by_lower[c] for c in close)}?" if close else ""
    return ValueError(
        f"unknown gymnasium env id {env_id!r}: it is not in gymnasium's registry (for an env registered by a package, "
        f"import the package first or pass 'package:{env_id}').{hint}"
    )


def action_spec_from_space(space: Any) -> tuple[ActionSpec, int]:
    """Describe a gymnasium action space as an :class:`ActionSpec`.

    Args:
        space: A single sub-env's action space.

    Returns:
        The spec, and the offset to add to rlbench's ``0..n-1`` actions (a Discrete space's ``start``).

    Raises:
        ValueError: If the space is neither ``Discrete`` nor ``Box``.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return ActionSpec("discrete", n=int(space.n)), int(space.start)
    if isinstance(space, spaces.Box):
        low = np.asarray(space.low, dtype=np.float32)
        high = np.asarray(space.high, dtype=np.float32)
        return ActionSpec("box", shape=tuple(space.shape), low=low, high=high), 0
    raise ValueError(f"unsupported action space {space!r}: rlbench supports Discrete and Box action spaces")


def obs_shape_from_space(space: Any) -> tuple[int, ...]:
    """Shape of one observation from a gymnasium observation space.

    Args:
        space: A single sub-env's observation space.

    Returns:
        The space's shape.

    Raises:
        ValueError: If the space is not a ``Box``.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return tuple(space.shape)
    raise ValueError(f"unsupported observation space {space!r}: rlbench supports Box observation spaces")


class GymnasiumVecEnv:
    """Any registered gymnasium env, vectorized by gymnasium with same-step autoreset.

    Attributes:
        env_id: The gymnasium id.
        num_envs: Number of sub-environments.
        obs_shape: Shape of one observation (the sub-env's Box observation space).
        action_spec: Discrete or box action description.
        vectorization: ``"sync"`` or ``"async"``.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        vectorization: str = "sync",
        max_episode_steps: int | None = None,
        **make_kwargs: Any,
    ) -> None:
        """Create the gymnasium vector env.

        Args:
            env_id: A registered gymnasium id (``"module:Id"`` imports ``module`` first).
            num_envs: Number of sub-environments, at least 1.
            vectorization: ``"sync"`` (one process) or ``"async"`` (one worker process per sub-env).
            max_episode_steps: Overrides the registered time limit when given.
            **make_kwargs: Passed to each sub-env's ``gymnasium.make``.

        Raises:
            ValueError: For an unknown id (with suggestions), a bad ``num_envs`` or ``vectorization``,
                or an action/observation space rlbench does not support.
        """
        import gymnasium as gym

        if vectorization not in VECTORIZATION_MODES:
            raise ValueError(f"unknown vectorization {vectorization!r}; expected one of {VECTORIZATION_MODES}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        if max_episode_steps is not None:
            make_kwargs["max_episode_steps"] = max_episode_steps
        try:
            env = gym.make_vec(
                env_id,
                num_envs=int(num_envs),
                vectorization_mode=vectorization,
                vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
                **make_kwargs,
            )
        except gym.error.Error as e:
            if env_id.rpartition(":")[2] not in gym.registry:
                raise _unknown_env_error(gym, env_id) from e
            raise
        try:
            self.action_spec, self._action_offset = action_spec_from_space(env.single_action_space)
            self.obs_shape = obs_shape_from_space(env.single_observation_space)
        except ValueError:
            env.close()
            raise
        self._env = env
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.vectorization = vectorization
        n = self.num_envs
        self._discrete = self.action_spec.kind == "discrete"
        self._action_shape = (n,) if self._discrete else (n, *self.action_spec.shape)
        self._obs = np.zeros((n, *self.obs_shape), dtype=np.float32)
        self._final_obs = np.zeros((n, *self.obs_shape), dtype=np.float32)
        self._reward = np.zeros(n, dtype=np.float32)
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)

    def __repr__(self) -> str:
        """Id, batch size and vectorization."""
        return f"GymnasiumVecEnv({self.env_id!r}, num_envs={self.num_envs}, vectorization={self.vectorization!r})"

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every sub-env.

        Args:
            seed: Sub-env ``i`` is seeded with ``seed + i``; ``None`` keeps the current random streams.

        Returns:
            Observations, float32, shape ``(num_envs, *obs_shape)`` (a reused buffer).
        """
        obs, _ = self._env.reset(seed=seed)
        np.copyto(self._obs, obs, casting="unsafe")
        return self._obs

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        """Validate actions and convert them to what the gymnasium env expects.

        Args:
            actions: ``(num_envs,)`` integers for discrete spaces, ``(num_envs, *shape)`` floats for box spaces.

        Returns:
            The actions, offset by a Discrete space's ``start``.

        Raises:
            ValueError: On a wrong shape, a non-integer discrete action or one outside ``0..n-1``.
        """
        a = np.asarray(actions)
        if a.shape != self._action_shape:
            raise ValueError(f"actions must have shape {self._action_shape}, got {a.shape}")
        if self._discrete:
            if a.dtype.kind not in "iu":
                raise ValueError(f"discrete actions must be integers, got dtype {a.dtype}")
            if a.min() < 0 or a.max() >= self.action_spec.n:
                raise ValueError(f"discrete actions must lie in 0..{self.action_spec.n - 1}, got {a.tolist()}")
            if self._action_offset:
                a = a + self._action_offset
        return a

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every sub-env, autoresetting finished ones in the same call.

        Args:
            actions: ``(num_envs,)`` integers in ``0..n-1`` (Discrete) or ``(num_envs, *shape)`` floats (Box).

        Returns:
            The transition; its arrays are buffers that the next call reuses.

        Raises:
            ValueError: On invalid actions.
        """
        obs, reward, terminated, truncated, info = self._env.step(self._check_actions(actions))
        np.copyto(self._obs, obs, casting="unsafe")
        np.copyto(self._reward, reward, casting="unsafe")
        np.copyto(self._terminated, terminated)
        np.copyto(self._truncated, truncated)
        mask = info.get("_final_obs")
        if mask is not None:
            final = info["final_obs"]
            for i in np.flatnonzero(mask).tolist():
                np.copyto(self._final_obs[i], final[i], casting="unsafe")
        return StepResult(self._obs, self._reward, self._terminated, self._truncated, self._final_obs)

    def close(self) -> None:
        """Close the gymnasium env (and its worker processes, for ``"async"``)."""
        self._env.close()

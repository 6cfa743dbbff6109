"""Exploration noise for deterministic policies, annealed over a number of agent steps.

* :class:`GaussianNoise`: ``a + sigma_t * N(0, 1) * scale``, clipped to the box (TD3/SB3's ``NormalActionNoise``).
* :class:`OrnsteinUhlenbeckNoise`: temporally correlated ``x <- x + theta (mu - x) dt + sigma_t sqrt(dt) N(0, 1)``
  per env, reset where an episode ends (the DDPG paper's and TorchRL's ``OrnsteinUhlenbeckProcessModule``).

``sigma_t`` goes linearly from ``sigma_init`` to ``sigma_end`` over ``anneal_steps`` agent steps, as TorchRL's
annealing noise wrappers do. Noise is scaled by the half-width of the action box.
"""

from __future__ import annotations

import numpy as np


class GaussianNoise:
    """Independent Gaussian action noise with a linearly annealed scale.

    Args:
        num_envs: Rows per call.
        low: Lower action bounds.
        high: Upper action bounds.
        sigma_init: Noise scale at step 0 (fraction of the half-width of the box).
        sigma_end: Scale after ``anneal_steps``.
        anneal_steps: Agent steps over which the scale anneals (0: constant ``sigma_init``).
        seed: Seed of the noise generator.
    """

    def __init__(
        self,
        num_envs: int,
        low: np.ndarray,
        high: np.ndarray,
        sigma_init: float = 0.1,
        sigma_end: float = 0.1,
        anneal_steps: int = 0,
        seed: int | None = None,
    ) -> None:
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.half = (self.high - self.low) / 2.0
        self.sigma_init, self.sigma_end, self.anneal_steps = sigma_init, sigma_end, anneal_steps
        self.rng = np.random.default_rng(seed)
        self.shape = (num_envs, *self.low.shape)

    def sigma(self, step: int) -> float:
        """Noise scale at agent step ``step``."""
        if self.anneal_steps <= 0:
            return self.sigma_init
        frac = min(step / self.anneal_steps, 1.0)
        return self.sigma_init + frac * (self.sigma_end - self.sigma_init)

    def _draw(self, sigma: float, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.standard_normal(shape, dtype=np.float32) * np.float32(sigma)

    def __call__(self, actions: np.ndarray, step: int) -> np.ndarray:
        """``actions`` plus noise, clipped to the box (a new array)."""
        noisy = actions + self._draw(self.sigma(step), actions.shape) * self.half
        return np.clip(noisy, self.low, self.high, out=noisy)

    def reset(self, done: np.ndarray) -> None:
        """Forget state of envs whose episode ended (nothing to forget for independent noise)."""


class OrnsteinUhlenbeckNoise(GaussianNoise):
    """Ornstein-Uhlenbeck action noise, one process per env, annealed like :class:`GaussianNoise`.

    Args:
        num_envs: Rows per call.
        low: Lower action bounds.
        high: Upper action bounds.
        sigma_init: Process scale at step 0.
        sigma_end: Scale after ``anneal_steps``.
        anneal_steps: Agent steps over which the scale anneals.
        seed: Seed of the noise generator.
        theta: Mean-reversion rate.
        dt: Time step.
    """

    def __init__(
        self,
        num_envs: int,
        low: np.ndarray,
        high: np.ndarray,
        sigma_init: float = 0.2,
        sigma_end: float = 0.2,
        anneal_steps: int = 0,
        seed: int | None = None,
        theta: float = 0.15,
        dt: float = 1e-2,
    ) -> None:
        super().__init__(num_envs, low, high, sigma_init, sigma_end, anneal_steps, seed)
        self.theta, self.dt = theta, dt
        self.state = np.zeros(self.shape, np.float32)

    def _draw(self, sigma: float, shape: tuple[int, ...]) -> np.ndarray:
        if shape != self.state.shape:
            raise ValueError(f"Ornstein-Uhlenbeck noise keeps one process per env: expected {self.state.shape}, got {shape}")
        self.state += -self.theta * self.state * self.dt + super()._draw(sigma * np.sqrt(self.dt), shape)
        return self.state

    def reset(self, done: np.ndarray) -> None:
        """Restart the process of envs whose episode ended."""
        self.state[np.asarray(done, bool)] = 0.0


NOISES = {"gaussian": GaussianNoise, "ou": OrnsteinUhlenbeckNoise}

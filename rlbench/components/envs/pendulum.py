"""A batched NumPy Pendulum that reproduces gymnasium's ``Pendulum-v1`` bit for bit, without importing gymnasium.

Equivalence is with ``gymnasium.make_vec("Pendulum-v1", N, vectorization_mode="sync",
vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})`` (observations, float32-rounded rewards, flags and final
observations; the float64 state too, see :attr:`NumpyPendulumVecEnv.state`):

* **Seeding** as in :mod:`rlbench.components.envs.cartpole`: ``reset(seed=s)`` gives sub-env ``i`` the generator
  ``np.random.Generator(np.random.PCG64(np.random.SeedSequence(s + i)))``, ``reset(seed=None)`` keeps the generators.
  A reset draws ``(theta, theta_dot) ~ U([-pi, -1], [pi, 1])`` with one ``generator.uniform`` call (computed as
  ``low + (high - low) * generator.random(2)``, checked once to give the same bits).
* **Dynamics and reward**, gymnasium's ``PendulumEnv.step`` operation for operation, vectorized: the torque is
  clipped to [-2, 2] *in the action's dtype* (gymnasium computes ``3.0 * u`` and ``0.001 * u**2`` in float32 for
  float32 actions, in float64 for float64 ones; other dtypes are converted to float64 first, which is exact for
  integers), ``theta_dot`` is clipped to [-8, 8] and the reward is ``-(angle_normalize(theta)**2 + 0.1 * theta_dot**2
  + 0.001 * u**2)`` of the state *before* the step, rounded to float32 (gymnasium's vector env returns float64).
  Scalar ``x**2`` in NumPy calls the C library's ``pow``, which differs from ``x * x`` in the last bit for about 0.1%
  of inputs, so the squares call ``pow``/``powf`` too. One numba kernel does the whole update in one pass (NumPy
  computes ``sin``/``cos``); it is checked once per process against the NumPy implementation of the step
  (:func:`_step_numpy`, used where numba is missing or disagrees), whose array shortcuts (``np.float_power`` with an
  array exponent, ``np.remainder``, array trigonometry) are themselves checked against the scalar operations.
* **Episode end.** Pendulum never terminates; ``TimeLimit`` truncates every episode after ``max_episode_steps``
  steps. Episodes start and end together (every reset resets all sub-envs), so at most one step in
  ``max_episode_steps`` ends episodes: that step puts the last observations in ``final_obs``, resets every sub-env
  with its own generator and returns the reset observations in ``obs`` (same-step autoreset).

Returned arrays are buffers that the next call overwrites (see :mod:`rlbench.components.envs.base`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from rlbench.components.envs.base import ActionSpec, StepResult

# gymnasium's PendulumEnv constants, and the coefficients its step() computes from them (same float64 values).
MAX_SPEED = 8
_MAX_SPEED_F = float(MAX_SPEED)
MAX_TORQUE = 2.0
DT = 0.05
GRAVITY = 10.0
MASS = 1.0
LENGTH = 1.0
K_SIN = 3 * GRAVITY / (2 * LENGTH)
K_TORQUE = 3.0 / (MASS * LENGTH**2)
RESET_HIGH = (np.pi, 1.0)  # (DEFAULT_X, DEFAULT_Y); the low bounds are their negatives
TWO_PI = 2 * np.pi

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_Unary = Callable[[np.ndarray, np.ndarray], Any]


class _Exact(NamedTuple):
    """Which vectorized shortcuts give the same bits as gymnasium's scalar operations on this machine."""

    trig: bool
    remainder: bool
    square64: bool
    affine_uniform: bool


def _scalar(fn: Callable[[Any], Any]) -> _Unary:
    """Wraps ``fn`` to be applied to one NumPy scalar at a time (as gymnasium does), writing into ``out``."""

    def apply(x: np.ndarray, out: np.ndarray) -> None:
        out[...] = [fn(v) for v in x]

    return apply


@functools.cache
def _exact_paths() -> _Exact:
    """Compares the array operations with the scalar ones gymnasium performs, once per process.

    Returns:
        The flags of :class:`_Exact`.
    """
    rng = np.random.default_rng(2024)
    x = np.concatenate((rng.uniform(-100.0, 100.0, 3000), rng.standard_normal(1000), [0.0, -0.0, np.pi, -np.pi, 8.0]))
    two = np.full_like(x, 2.0)
    trig = all(np.array_equal(fn(x[:k]), [fn(v) for v in x[:k]]) for fn in (np.sin, np.cos) for k in (len(x), 3, 17))
    remainder = np.array_equal(np.remainder(x, TWO_PI), [v % TWO_PI for v in x])
    square64 = np.array_equal(np.float_power(x, two), [v**2 for v in x])
    low, high = -np.array(RESET_HIGH), np.array(RESET_HIGH)
    expected = np.random.Generator(np.random.PCG64(7)).uniform(low, high, (512, 2)).tolist()
    span = (high - low).tolist()
    draws = np.random.Generator(np.random.PCG64(7)).random((512, 2)).tolist()
    affine = [[-RESET_HIGH[0] + span[0] * a, -RESET_HIGH[1] + span[1] * b] for a, b in draws]
    return _Exact(bool(trig), bool(remainder), bool(square64), expected == affine)


class _NumpyOps(NamedTuple):
    """The float64 array operations of :func:`_step_numpy`: exact shortcuts or gymnasium's scalar calls."""

    rem: _Unary
    sq64: _Unary


def _numpy_ops(n: int) -> _NumpyOps:
    """Operations for ``n`` sub-envs, the vectorized ones where :func:`_exact_paths` found them exact."""
    exact, two = _exact_paths(), np.full(n, 2.0)
    rem = (lambda x, out: np.remainder(x, TWO_PI, out=out)) if exact.remainder else _scalar(lambda v: v % TWO_PI)
    sq64 = (lambda x, out: np.float_power(x, two, out=out)) if exact.square64 else _scalar(lambda v: v**2)
    return _NumpyOps(rem, sq64)


def _step_numpy(a: np.ndarray, w: np.ndarray, reward: np.ndarray, ops: _NumpyOps) -> None:
    """gymnasium's ``PendulumEnv.step`` with NumPy, operation for operation (the fallback of :func:`_step_kernel`).

    Args:
        a: Torques, float32 or float64, shape (N,).
        w: Float64 rows ``[cos(theta), sin(theta), theta_dot, theta, cost]`` (N,); theta_dot, theta, cost are updated.
        reward: Float32 rewards to write, shape (N,).
        ops: Float64 remainder and square.
    """
    _, sin_th, theta_dot, theta, cost = w
    tmp = np.empty_like(cost)
    u = np.clip(a, -MAX_TORQUE, MAX_TORQUE)  # in the action's dtype, as are the two torque terms
    np.add(theta, np.pi, out=tmp)  # costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
    ops.rem(tmp, tmp)
    np.subtract(tmp, np.pi, out=tmp)
    ops.sq64(tmp, cost)
    ops.sq64(theta_dot, tmp)
    np.multiply(tmp, 0.1, out=tmp)
    np.add(cost, tmp, out=cost)
    np.add(cost, [0.001 * (v**2) for v in u], out=cost)  # NumPy scalar power (the C pow / powf), not x * x
    np.negative(cost, out=reward)
    np.multiply(sin_th, K_SIN, out=tmp)  # newthdot = thdot + (3 * g / (2 * l) * sin(th) + 3.0 / (m * l**2) * u) * dt
    np.add(tmp, u * u.dtype.type(K_TORQUE), out=tmp)
    np.multiply(tmp, DT, out=tmp)
    np.add(theta_dot, tmp, out=theta_dot)
    np.clip(theta_dot, -MAX_SPEED, MAX_SPEED, out=theta_dot)
    np.multiply(theta_dot, DT, out=tmp)  # newth = th + newthdot * dt
    np.add(theta, tmp, out=theta)


def _step_kernel(a: np.ndarray, c: np.ndarray, c64: np.ndarray, w: np.ndarray, reward: np.ndarray) -> None:
    """:func:`_step_numpy` fused into one loop for numba (jitted lazily by :func:`_fused_step`).

    The torque terms are computed in the dtype of ``a``, with ``c = [low, high, 2, 0.001, 3.0]`` in that dtype, and the
    float64 squares as ``x ** c64[0]``: exponents read at run time make numba call the C ``pow``/``powf`` like NumPy's
    scalar power. Numba neither contracts ``a * b + c`` into a fused multiply-add nor reorders float arithmetic.
    """
    lo, hi, p, k_cost, k_torque, two = c[0], c[1], c[2], c[3], c[4], c64[0]
    sin_th, theta_dot, theta, cost = w[1], w[2], w[3], w[4]
    for i in range(a.shape[0]):
        u = a[i]
        if u < lo:
            u = lo
        elif u > hi:
            u = hi
        th, td = theta[i], theta_dot[i]
        an = ((th + np.pi) % TWO_PI) - np.pi
        total = an**two + 0.1 * td**two + k_cost * u**p
        cost[i] = total
        reward[i] = -total
        new_td = td + (K_SIN * sin_th[i] + k_torque * u) * DT
        if new_td < -MAX_SPEED:
            new_td = -_MAX_SPEED_F
        elif new_td > MAX_SPEED:
            new_td = _MAX_SPEED_F
        theta_dot[i] = new_td
        theta[i] = th + new_td * DT


_CONSTS = {dt: np.array([-MAX_TORQUE, MAX_TORQUE, 2.0, 0.001, K_TORQUE], dtype=dt) for dt in (np.float32, np.float64)}
_TWO64 = np.array([2.0])


@functools.cache
def _fused_step() -> Callable[..., None] | None:
    """:func:`_step_kernel` jitted, if numba is installed and the kernel matches :func:`_step_numpy` bit for bit on
    random states and torques of both dtypes (checked once per process); else None."""
    from rlbench.core.jit import njit

    try:
        kernel = njit(_step_kernel, nogil=True)
    except ImportError:
        return None
    rng, n = np.random.default_rng(11), 4096
    for dt in (np.float32, np.float64):
        a = rng.uniform(-3.0, 3.0, n).astype(dt)
        w = np.stack([np.zeros(n), np.zeros(n), rng.uniform(-8.0, 8.0, n), rng.uniform(-90.0, 90.0, n), np.zeros(n)])
        w[2, :4], w[3, :4] = (8.0, -8.0, 7.99, 0.0), (np.pi, -np.pi, 0.0, -0.0)
        w[1] = np.sin(w[3])
        (w1, r1), (w2, r2) = ((w.copy(), np.empty(n, dtype=np.float32)) for _ in range(2))
        kernel(a, _CONSTS[a.dtype.type], _TWO64, w1, r1)
        _step_numpy(a, w2, r2, _numpy_ops(n))
        if not (np.array_equal(w1, w2) and np.array_equal(r1, r2)):
            return None
    return kernel


class NumpyPendulumVecEnv:
    """``num_envs`` Pendulum-v1 environments stepped together, identical to gymnasium's (see module docstring).

    Attributes:
        num_envs: Number of sub-environments.
        obs_shape: ``(3,)``: ``cos(theta)``, ``sin(theta)``, ``theta_dot``.
        action_spec: A box of shape ``(1,)`` in [-2, 2] (the torque; values outside are clipped).
        max_episode_steps: Episode length at which ``truncated`` is set.
    """

    def __init__(self, num_envs: int, max_episode_steps: int = 200) -> None:
        """Allocate the buffers; call :meth:`reset` before stepping.

        Args:
            num_envs: Number of sub-environments, at least 1.
            max_episode_steps: Steps after which every episode is truncated, at least 1.

        Raises:
            ValueError: If ``num_envs`` or ``max_episode_steps`` is not a positive integer.
        """
        for name, value in (("num_envs", num_envs), ("max_episode_steps", max_episode_steps)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        n = self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.obs_shape: tuple[int, ...] = (3,)
        bound = np.full(1, MAX_TORQUE, dtype=np.float32)
        self.action_spec = ActionSpec("box", shape=(1,), low=-bound, high=bound)
        exact = _exact_paths()
        self._sin: _Unary = np.sin if exact.trig else _scalar(np.sin)
        self._cos: _Unary = np.cos if exact.trig else _scalar(np.cos)
        self._affine_uniform = exact.affine_uniform
        self._kernel = _fused_step()
        self._ops = _numpy_ops(n)

        self._obs = np.zeros((n, 3), dtype=np.float32)
        self._final_obs = np.zeros((n, 3), dtype=np.float32)
        self._reward = np.zeros(n, dtype=np.float32)
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)
        self._result = StepResult(self._obs, self._reward, self._terminated, self._truncated, self._final_obs)
        self._w = np.zeros((5, n))  # float64 [cos(theta), sin(theta), theta_dot, theta, cost]; the first 3: observation
        self._cos_th, self._sin_th, self._theta_dot, self._theta, self._cost = self._w
        self._block, self._obs_t = self._w[:3], self._obs.T
        self._shapes = ((n, 1), (n,))
        self._generators: list[np.random.Generator] | None = None
        self._elapsed = 0

    def __repr__(self) -> str:
        """Short description with the batch size."""
        return f"NumpyPendulumVecEnv(num_envs={self.num_envs}, max_episode_steps={self.max_episode_steps})"

    @property
    def state(self) -> np.ndarray:
        """A float64 copy of the state, ``(num_envs, 2)`` as ``(theta, theta_dot)`` (gymnasium's ``state``)."""
        return np.stack((self._theta, self._theta_dot), axis=1)

    @property
    def reward_float64(self) -> np.ndarray:
        """The rewards of the last step before rounding to float32 (what gymnasium's vector env returns), a new array."""
        return np.negative(self._cost)

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every sub-env.

        Args:
            seed: Sub-env ``i`` gets a new generator seeded with ``seed + i``; ``None`` keeps the current generators
                (seeded from OS entropy if there are none yet).

        Returns:
            Observations, float32, shape ``(num_envs, 3)`` (a reused buffer).

        Raises:
            ValueError: If ``seed`` is not a non-negative integer or None.
        """
        n = self.num_envs
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
            self._generators = [np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed) + i))) for i in range(n)]
        elif self._generators is None:
            self._generators = [np.random.Generator(np.random.PCG64(np.random.SeedSequence())) for _ in range(n)]
        self._draw_initial_states()
        self._truncated.fill(False)
        return self._obs

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every sub-env by one step; on the last step of the episodes, autoreset them all.

        Args:
            actions: Torques, shape ``(num_envs, 1)`` (or ``(num_envs,)``), float32 or float64 (other dtypes are
                converted to float64); clipped to [-2, 2].

        Returns:
            The transition; its arrays are buffers that the next call reuses.

        Raises:
            ValueError: If ``actions`` has the wrong shape or is not numeric.
            RuntimeError: If :meth:`reset` was never called.
        """
        a = actions
        if type(a) is not np.ndarray or a.shape not in self._shapes or a.dtype not in _DTYPES:
            a = self._check_actions(a)
        if self._generators is None:
            raise RuntimeError("call reset() before step()")
        a = a.reshape(self.num_envs)
        if self._kernel is not None:
            self._kernel(a, _CONSTS[a.dtype.type], _TWO64, self._w, self._reward)
        else:
            _step_numpy(a, self._w, self._reward, self._ops)
        self._observe()

        self._elapsed += 1
        if self._elapsed >= self.max_episode_steps:
            np.copyto(self._final_obs, self._obs)
            self._draw_initial_states()
            self._truncated.fill(True)
        elif self._elapsed == 1:
            self._truncated.fill(False)
        return self._result

    def _check_actions(self, actions: object) -> np.ndarray:
        """Slow path of action validation: a float32 or float64 array of shape ``(num_envs, 1)`` or ``(num_envs,)``.

        Args:
            actions: What was passed to :meth:`step`.

        Returns:
            The actions as an array of an accepted shape and dtype.

        Raises:
            ValueError: If the actions have the wrong shape or a non-numeric dtype.
        """
        a = np.asarray(actions)
        if a.shape not in self._shapes:
            raise ValueError(f"actions must have shape ({self.num_envs}, 1) or ({self.num_envs},), got {a.shape}")
        if a.dtype.kind not in "biuf":
            raise ValueError(f"actions must be numeric, got dtype {a.dtype}")
        if a.dtype.kind == "f" and a.dtype.itemsize in (4, 8):
            return a.astype(np.dtype(f"f{a.dtype.itemsize}"))  # native byte order
        return a.astype(np.float64)

    def _observe(self) -> None:
        """Writes ``[cos(theta), sin(theta), theta_dot]`` (gymnasium's ``_get_obs``) into the observation buffer."""
        self._cos(self._theta, self._cos_th)
        self._sin(self._theta, self._sin_th)
        np.copyto(self._obs_t, self._block, casting="same_kind")

    def _draw_initial_states(self) -> None:
        """Reset every sub-env with its own generator, like ``PendulumEnv.reset`` with ``seed=None``."""
        gens = self._generators
        assert gens is not None
        if self._affine_uniform:
            low0, low1, span0, span1 = -RESET_HIGH[0], -RESET_HIGH[1], 2 * RESET_HIGH[0], 2 * RESET_HIGH[1]
            draws = [g.random(2).tolist() for g in gens]
            states = [(low0 + span0 * a, low1 + span1 * b) for a, b in draws]
        else:
            low, high = -np.array(RESET_HIGH), np.array(RESET_HIGH)
            states = [g.uniform(low, high).tolist() for g in gens]
        self._theta[:], self._theta_dot[:] = zip(*states)
        self._elapsed = 0
        self._observe()

    def close(self) -> None:
        """Nothing to release; present for the VecEnv protocol."""

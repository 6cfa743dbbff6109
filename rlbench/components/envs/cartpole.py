"""A batched NumPy CartPole that reproduces gymnasium's ``CartPole-v1`` bit for bit, without importing gymnasium.

Equivalence is with ``gymnasium.make_vec("CartPole-v1", N, vectorization_mode="sync",
vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})``:

* **Seeding.** ``reset(seed=s)`` gives sub-env ``i`` its own generator
  ``np.random.Generator(np.random.PCG64(np.random.SeedSequence(s + i)))`` (what
  ``gymnasium.utils.seeding.np_random(s + i)`` builds). ``reset(seed=None)`` keeps the current
  generators (fresh OS entropy on the very first reset). Each generator is only used for resets.
* **Reset distribution.** Every state variable ``~ U(-0.05, 0.05)``: the values of one
  ``generator.uniform(-0.05, 0.05, size=4)`` call in the order ``(x, x_dot, theta, theta_dot)``,
  only for the sub-envs being reset (computed as ``-0.05 + 0.1 * generator.random(4)``, which is
  cheaper and checked to be bit-identical on first use).
* **Dynamics.** Euler integration in float64 with gymnasium's constants and its exact operation
  order; the only liberties taken are ``a * b == b * a`` and ``a + b == b + a`` (exact in IEEE
  arithmetic) and ``|x| > c`` for ``x < -c or x > c``. Observations are the float64 state rounded
  to float32; the termination test uses the float64 state.
* **Reward and episode end.** Reward is 1.0 on every step (terminal steps included).
  ``terminated`` when ``|x| > 2.4`` or ``|theta| > 12 degrees``. ``truncated`` when the episode has
  lasted ``max_episode_steps`` steps, whether or not it also terminated on that step (gymnasium's
  ``TimeLimit`` sets ``truncated=True`` regardless of ``terminated``, so both flags can be set).
* **Same-step autoreset.** For every sub-env whose episode ended, the same :meth:`step` call
  stores the terminal observation in ``final_obs[i]``, resets the sub-env with its own continuing
  generator (as gymnasium's vector env does with ``seed=None``) and puts the reset observation in
  ``obs[i]``. Rows of ``final_obs`` where no episode ended hold stale values.

Two step implementations give the same bits: ``kernel="numpy"`` (the default: ~20 ufunc calls per step, no numba
import, so the cheapest start for short runs) and ``kernel="numba"`` (one jitted call per step that also does the
autoresets, ~5x faster; it pre-draws each sub-env's next 64 initial states from its generator in one
``random(256)`` call, which yields the same doubles, in the same order, as 64 ``random(4)`` calls).

Returned arrays are buffers that the next call overwrites (see :mod:`rlbench.components.envs.base`):
copy what you keep and do not write into them.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from rlbench.components.envs.base import ActionSpec, StepResult

# Same expressions as gymnasium's CartPoleEnv.__init__, so the float64 constants are identical.
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD_RADIANS = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_LOW = -0.05
RESET_HIGH = 0.05

_INT64 = np.dtype(np.int64)
_mul, _div, _add, _sub, _abs, _gt, _copyto = np.multiply, np.divide, np.add, np.subtract, np.absolute, np.greater, np.copyto
_BYTEORDER = sys.byteorder
# Bits that must be zero in an int64 action holding 0 or 1: everything but the lowest bit.
_NOT_LOW_BIT = (1 << 64) - 2

_fast_paths: tuple[bool, bool] | None = None
KERNELS = ("numpy", "numba", "auto")
_PREDRAWN = 64  # initial states drawn ahead per sub-env by the numba variant


def _fast_paths_are_exact() -> tuple[bool, bool]:
    """Check, once per process, that two shortcuts give the same bits as the calls gymnasium makes.

    1. ``np.sin``/``np.cos`` on an array versus on each float64 scalar (gymnasium's call): a NumPy
       build with SIMD kernels could make results depend on the array length.
    2. ``generator.uniform(-0.05, 0.05, 4)`` versus ``-0.05 + 0.1 * u`` in Python floats with
       ``u = generator.random(4)`` (NumPy computes ``low + range * next_double`` in C; a compiler
       that contracted it into a fused multiply-add would round differently).

    Where a check fails, :class:`NumpyCartPoleVecEnv` falls back to gymnasium's own call.

    Returns:
        ``(array_trig_exact, affine_uniform_exact)``.
    """
    global _fast_paths
    if _fast_paths is None:
        angles = np.linspace(-0.5, 0.5, 251) + 1e-7 * np.arange(251) ** 0.5
        trig_ok = True
        for fn in (np.sin, np.cos):
            scalar = np.array([fn(a) for a in angles])
            trig_ok = trig_ok and np.array_equal(fn(angles), scalar) and np.array_equal(fn(angles[:5]), scalar[:5])
        reference = np.random.Generator(np.random.PCG64(12345)).uniform(RESET_LOW, RESET_HIGH, 1024).tolist()
        span = RESET_HIGH - RESET_LOW
        affine = [RESET_LOW + span * u for u in np.random.Generator(np.random.PCG64(12345)).random(1024).tolist()]
        _fast_paths = (bool(trig_ok), reference == affine)
    return _fast_paths


def _scalar_ufunc(fn: np.ufunc) -> Callable[[np.ndarray, np.ndarray], None]:
    """Wrap ``fn`` to be applied one float64 scalar at a time, as gymnasium applies it.

    Args:
        fn: A unary ufunc such as ``np.sin``.

    Returns:
        A function ``f(x, out)`` filling ``out`` with ``fn`` of each element of ``x``.
    """

    def apply(x: np.ndarray, out: np.ndarray) -> None:
        out[:] = [fn(v) for v in x.tolist()]

    return apply


def _numba_step(
    actions: np.ndarray,
    w: np.ndarray,
    obs: np.ndarray,
    final_obs: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    deadline: np.ndarray,
    t: int,
    max_steps: int,
    resets: np.ndarray,
    reset_pos: np.ndarray,
) -> int:
    """One whole CartPole step of every sub-env in one loop, for numba (jitted lazily by :func:`_numba_kernel`).

    gymnasium's float64 arithmetic in its order (numba neither contracts ``a * b + c`` into a fused multiply-add nor
    reorders float operations without ``fastmath``; ``math.sin``/``math.cos`` call the C library). Ended sub-envs take
    their next pre-drawn initial state ``resets[i, reset_pos[i]]`` (``(x, x_dot, theta, theta_dot)``).

    Args:
        actions: int64 ``(n,)``; nothing is written when a value is not 0 or 1.
        w: float64 state, blocks of ``n`` values ``[x, theta, x_dot, theta_dot, ...]``.
        obs: float32 ``(n, 4)`` observations, written.
        final_obs: float32 ``(n, 4)``, rows of ended sub-envs written.
        terminated: bool ``(n,)``, written.
        truncated: bool ``(n,)``, written.
        deadline: int64 ``(n,)`` step count at which each sub-env is truncated (updated on reset).
        t: This step's count.
        max_steps: Episode length limit.
        resets: float64 ``(n, K, 4)`` pre-drawn initial states.
        reset_pos: int64 ``(n,)`` next unused row of ``resets`` for each sub-env (advanced on reset).

    Returns:
        -1 if an action is invalid, else how many sub-envs used up their pre-drawn states at this step.
    """
    n = actions.shape[0]
    for i in range(n):
        if actions[i] < 0 or actions[i] > 1:
            return -1
    k = resets.shape[1]
    exhausted = 0
    for i in range(n):
        force = FORCE_MAG if actions[i] == 1 else -FORCE_MAG
        x, theta, x_dot, theta_dot = w[i], w[n + i], w[2 * n + i], w[3 * n + i]
        costheta = math.cos(theta)
        sintheta = math.sin(theta)
        temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (
            LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
        )
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        x = x + TAU * x_dot
        x_dot = x_dot + TAU * xacc
        theta = theta + TAU * theta_dot
        theta_dot = theta_dot + TAU * thetaacc
        term = x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD_RADIANS or theta > THETA_THRESHOLD_RADIANS
        trunc = t >= deadline[i]
        terminated[i] = term
        truncated[i] = trunc
        if term or trunc:
            final_obs[i, 0] = np.float32(x)
            final_obs[i, 1] = np.float32(x_dot)
            final_obs[i, 2] = np.float32(theta)
            final_obs[i, 3] = np.float32(theta_dot)
            p = reset_pos[i]
            x, x_dot, theta, theta_dot = resets[i, p, 0], resets[i, p, 1], resets[i, p, 2], resets[i, p, 3]
            reset_pos[i] = p + 1
            if p + 1 == k:
                exhausted += 1
            deadline[i] = t + max_steps
        w[i], w[n + i], w[2 * n + i], w[3 * n + i] = x, theta, x_dot, theta_dot
        obs[i, 0] = np.float32(x)
        obs[i, 1] = np.float32(x_dot)
        obs[i, 2] = np.float32(theta)
        obs[i, 3] = np.float32(theta_dot)
    return exhausted


_NUMBA_SIGNATURE = (
    "int64(int64[::1], float64[::1], float32[:, ::1], float32[:, ::1], boolean[::1], boolean[::1], int64[::1],"
    " int64, int64, float64[:, :, ::1], int64[::1])"
)


@functools.cache
def _numba_kernel() -> Callable[..., int] | None:
    """:func:`_numba_step` jitted (``cache=True``), if numba is installed and the kernel matches the NumPy step bit
    for bit on random states, actions and terminations (checked once per process); else None."""
    try:
        import numba
    except ImportError:
        return None
    kernel = numba.njit(_NUMBA_SIGNATURE, cache=True, nogil=True, boundscheck=False)(_numba_step)
    n, rng = 512, np.random.default_rng(7)
    ref, env = NumpyCartPoleVecEnv(n, kernel="numpy"), NumpyCartPoleVecEnv(n, kernel="numpy")
    states = rng.uniform(-1.0, 1.0, (4, n)) * np.array([[2.5], [3.0], [0.25], [3.0]])  # some start out of bounds
    ref._w[: 4 * n] = env._w[: 4 * n] = states.ravel()
    actions = rng.integers(0, 2, n)
    ref._generators = [np.random.Generator(np.random.PCG64(i)) for i in range(n)]
    ref._deadline = [10**9] * n
    ref._next_deadline = 10**9
    expected = ref.step(actions)
    obs, final_obs = np.zeros((n, 4), np.float32), np.zeros((n, 4), np.float32)
    term, trunc = np.zeros(n, bool), np.zeros(n, bool)
    resets = np.zeros((n, 2, 4))
    w = env._w.copy()
    pos = np.zeros(n, np.int64)
    kernel(actions, w, obs, final_obs, term, trunc, np.full(n, 10**9, np.int64), 1, 500, resets, pos)
    ended = expected.terminated
    ok = (
        ended.any()
        and (~ended).any()
        and np.array_equal(term, ended)
        and not trunc.any()
        and np.array_equal(final_obs[ended], expected.final_obs[ended])
        and np.array_equal(obs[~ended], expected.obs[~ended])
        and np.array_equal(w.reshape(6, n)[:4, ~ended], ref._w.reshape(6, n)[:4, ~ended])
        and np.array_equal(pos, ended.astype(np.int64))
    )
    return kernel if ok else None


class _Kernel(NamedTuple):
    """Functions, buffer views and constant arrays used by one :meth:`NumpyCartPoleVecEnv.step`.

    Views are of flat float64 buffers made of blocks of ``num_envs`` values; bracketed names are
    adjacent blocks that one ufunc call processes together. Constants are full-length arrays.
    """

    sin_fn: Callable[[np.ndarray, np.ndarray], object]
    cos_fn: Callable[[np.ndarray, np.ndarray], object]
    theta: np.ndarray
    sin: np.ndarray
    cos: np.ndarray  # the x_acc block of the state, until x_acc is written
    td_cos: np.ndarray  # [theta_dot, cos]
    squares: np.ndarray  # [theta_dot**2, cos**2]
    sin_squares: np.ndarray  # [sin, theta_dot**2, cos**2]
    k_scale: np.ndarray  # [gravity, polemass_length, masspole]
    scaled: np.ndarray  # [gravity * sin, a = polemass_length * theta_dot**2, masspole * cos**2]
    a: np.ndarray  # a, then a * sin, then force + a * sin
    a_b: np.ndarray  # [a, masspole * cos**2]
    k_mass2: np.ndarray  # [total_mass, total_mass]
    temp_b: np.ndarray  # [temp, b = masspole * cos**2 / total_mass]
    temp: np.ndarray
    c_temp: np.ndarray  # cos * temp
    minuend: np.ndarray  # [4/3 (constant block), gravity * sin]
    subtrahend: np.ndarray  # [b, cos * temp]
    q: np.ndarray  # [4/3 - b, then the denominator, numerator of theta_acc]
    den: np.ndarray
    k_length: np.ndarray
    num: np.ndarray
    theta_acc: np.ndarray
    k_pml: np.ndarray  # polemass_length
    tmp: np.ndarray
    k_mass: np.ndarray  # total_mass
    vel_acc: np.ndarray  # [x_dot, theta_dot, x_acc, theta_acc]
    k_tau: np.ndarray
    euler: np.ndarray  # tau * vel_acc
    pos_vel: np.ndarray  # [x, theta, x_dot, theta_dot]
    obs_view: np.ndarray  # float32 observations as [[x, x_dot], [theta, theta_dot]]
    state_view: np.ndarray  # the same four state blocks, in that arrangement
    x_theta: np.ndarray  # [x, theta]
    abs_x_theta: np.ndarray
    k_limits: np.ndarray  # [x_threshold, theta_threshold_radians]
    over: np.ndarray  # bool [|x| > x_threshold, |theta| > theta_threshold_radians]


class NumpyCartPoleVecEnv:
    """``num_envs`` CartPole-v1 environments stepped together, identical to gymnasium's (see module docstring).

    Speed comes from doing the same 20 ufunc calls per step whatever ``num_envs`` is, into buffers
    allocated once. The float64 state lives in one flat buffer of blocks of ``num_envs`` values,
    ``[x, theta, x_dot, theta_dot, x_acc, theta_acc]``, so the Euler update is two calls, and
    quantities that undergo the same operation at the same point of the dynamics sit in adjacent
    blocks so that one call handles them together (see :class:`_Kernel`).

    Attributes:
        num_envs: Number of sub-environments.
        obs_shape: ``(4,)``: cart position, cart velocity, pole angle, pole angular velocity.
        action_spec: ``ActionSpec("discrete", n=2)``: 0 pushes the cart left, 1 pushes it right.
        max_episode_steps: Episode length at which ``truncated`` is set.
    """

    def __init__(self, num_envs: int, max_episode_steps: int = 500, kernel: str = "numpy") -> None:
        """Allocate the buffers; call :meth:`reset` before stepping.

        Args:
            num_envs: Number of sub-environments, at least 1.
            max_episode_steps: Steps after which an episode is truncated, at least 1.
            kernel: ``"numpy"`` (about 20 ufunc calls per step; no numba import, the cheapest start), ``"numba"``
                (one jitted call per step, several times faster; imports numba, ~0.3 s, and checks the kernel once
                per process) or ``"auto"`` (numba when installed and exact, else NumPy). Both give identical results.

        Raises:
            ValueError: If ``num_envs`` or ``max_episode_steps`` is not a positive integer or ``kernel`` is unknown.
            ImportError: If ``kernel="numba"`` and numba is missing or its kernel is not bit-exact here.
        """
        for name, value in (("num_envs", num_envs), ("max_episode_steps", max_episode_steps)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        n = int(num_envs)
        self.num_envs = n
        self.max_episode_steps = int(max_episode_steps)
        self.obs_shape: tuple[int, ...] = (4,)
        self.action_spec = ActionSpec("discrete", n=2)
        self._array_trig, self._uniform_is_affine = _fast_paths_are_exact()

        self._obs = np.zeros((n, 4), dtype=np.float32)
        self._final_obs = np.zeros((n, 4), dtype=np.float32)
        self._reward = np.ones(n, dtype=np.float32)
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)
        self._ended = np.zeros(n, dtype=bool)
        self._result = StepResult(self._obs, self._reward, self._terminated, self._truncated, self._final_obs)
        self._w = np.zeros(6 * n)  # [x, theta, x_dot, theta_dot, x_acc, theta_acc]
        self._kernel = self._build_kernel()
        self._no_over = bytes(2 * n)
        self._over_x, self._over_theta = self._kernel.over[:n], self._kernel.over[n:]
        self._force_table = np.array([-FORCE_MAG, FORCE_MAG])
        self._action_shape = (n,)
        self._action_mask = int.from_bytes(_NOT_LOW_BIT.to_bytes(8, _BYTEORDER) * n, _BYTEORDER)

        self._numba: Callable[..., int] | None = None
        self._resets = np.zeros((0, 0, 4))
        self._reset_pos = np.zeros(n, dtype=np.int64)
        if kernel != "numpy":
            self._numba = _numba_kernel()
            if self._numba is None and kernel == "numba":
                raise ImportError("kernel='numba' needs numba installed and bit-exact here; use kernel='numpy'")

        self._generators: list[np.random.Generator] | None = None
        # value of the step counter at which each sub-env is truncated
        self._deadline: list[int] | np.ndarray = [0] * n if self._numba is None else np.zeros(n, dtype=np.int64)
        self._next_deadline = 0  # a lower bound of min(self._deadline)
        self._t = 0
        self._flags_dirty = False

    def _build_kernel(self) -> _Kernel:
        """Allocate the scratch buffers and constants of :meth:`step`.

        Returns:
            The views and constants, laid out so that fused ufunc calls see adjacent blocks.
        """
        n = self.num_envs
        w = self._w

        def full(*values: float) -> np.ndarray:
            return np.repeat(np.array(values, dtype=np.float64), n)

        h = np.empty(3 * n)  # [sin, theta_dot**2, cos**2]
        g = full(4.0 / 3.0, 0.0, 0.0, 0.0)  # [4/3, gravity * sin, a, masspole * cos**2]
        s = np.empty(3 * n)  # [temp, b, cos * temp]
        q = np.empty(2 * n)  # [4/3 - b then denominator, numerator]
        obs_view = self._obs.T.reshape(2, 2, n)
        if not np.shares_memory(obs_view, self._obs):
            raise AssertionError("the observation view must alias the observation buffer")
        sin_fn, cos_fn = (np.sin, np.cos) if self._array_trig else (_scalar_ufunc(np.sin), _scalar_ufunc(np.cos))
        return _Kernel(
            sin_fn=sin_fn,
            cos_fn=cos_fn,
            theta=w[n : 2 * n],
            sin=h[:n],
            cos=w[4 * n : 5 * n],
            td_cos=w[3 * n : 5 * n],
            squares=h[n:],
            sin_squares=h,
            k_scale=full(GRAVITY, POLEMASS_LENGTH, MASSPOLE),
            scaled=g[n:],
            a=g[2 * n : 3 * n],
            a_b=g[2 * n :],
            k_mass2=full(TOTAL_MASS, TOTAL_MASS),
            temp_b=s[: 2 * n],
            temp=s[:n],
            c_temp=s[2 * n :],
            minuend=g[: 2 * n],
            subtrahend=s[n:],
            q=q,
            den=q[:n],
            k_length=full(LENGTH),
            num=q[n:],
            theta_acc=w[5 * n :],
            k_pml=full(POLEMASS_LENGTH),
            tmp=np.empty(n),
            k_mass=full(TOTAL_MASS),
            vel_acc=w[2 * n :],
            k_tau=full(TAU, TAU, TAU, TAU),
            euler=np.empty(4 * n),
            pos_vel=w[: 4 * n],
            obs_view=obs_view,
            state_view=w[: 4 * n].reshape(2, 2, n).transpose(1, 0, 2),
            x_theta=w[: 2 * n],
            abs_x_theta=np.empty(2 * n),
            k_limits=full(X_THRESHOLD, THETA_THRESHOLD_RADIANS),
            over=np.zeros(2 * n, dtype=bool),
        )

    def __repr__(self) -> str:
        """Short description with the batch size."""
        kernel = "numpy" if self._numba is None else "numba"
        return f"NumpyCartPoleVecEnv(num_envs={self.num_envs}, max_episode_steps={self.max_episode_steps}, kernel={kernel!r})"

    @property
    def kernel(self) -> str:
        """The step implementation in use: ``"numpy"`` or ``"numba"``."""
        return "numpy" if self._numba is None else "numba"

    @property
    def state(self) -> np.ndarray:
        """A float64 copy of the full state, ``(num_envs, 4)`` as ``(x, x_dot, theta, theta_dot)`` (gymnasium's ``state``)."""
        return self._kernel.state_view.reshape(4, self.num_envs).T.copy()

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every sub-env.

        Args:
            seed: Sub-env ``i`` gets a new generator seeded with ``seed + i``; ``None`` keeps the
                current generators (seeded from OS entropy if there are none yet).

        Returns:
            Observations, float32, shape ``(num_envs, 4)`` (a reused buffer).

        Raises:
            ValueError: If ``seed`` is not a non-negative integer or None.
        """
        n = self.num_envs
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
            self._generators = [np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed) + i))) for i in range(n)]
            self._resets = np.zeros((0, 0, 4))
        elif self._generators is None:
            self._generators = [np.random.Generator(np.random.PCG64(np.random.SeedSequence())) for _ in range(n)]
        if self._numba is not None and not self._resets.size:
            self._resets = np.empty((n, _PREDRAWN, 4))
            for i in range(n):
                self._refill(i)
        self._t = 0
        self._draw_initial_states(range(n))
        self._next_deadline = self.max_episode_steps
        self._terminated.fill(False)
        self._truncated.fill(False)
        self._reward.fill(1.0)
        self._flags_dirty = False
        return self._obs

    def step(self, actions: np.ndarray) -> StepResult:
        """Advance every sub-env by one step, autoresetting those whose episode ends.

        Args:
            actions: Integer array of shape ``(num_envs,)`` with values 0 (push left) or 1 (push right).

        Returns:
            The transition; its arrays are buffers that the next call reuses.

        Raises:
            ValueError: If ``actions`` has the wrong shape, dtype or values.
            RuntimeError: If :meth:`reset` was never called.
        """
        a = actions
        if self._numba is not None:
            return self._step_numba(a)
        if type(a) is not np.ndarray or a.dtype is not _INT64 or a.shape != self._action_shape:
            a = self._check_actions(a)
        elif int.from_bytes(a.tobytes(), _BYTEORDER) & self._action_mask:
            a = self._check_actions(a)  # raises
        force = self._force_table[a]
        t = self._t + 1
        truncating = t >= self._next_deadline
        if truncating:
            if self._generators is None:
                raise RuntimeError("call reset() before step()")
            np.greater_equal(t, self._deadline, self._truncated)
        self._t = t
        (
            sin_fn,
            cos_fn,
            theta,
            sin,
            cos,
            td_cos,
            squares,
            sin_squares,
            k_scale,
            scaled,
            a_,
            a_b,
            k_mass2,
            temp_b,
            temp,
            c_temp,
            minuend,
            subtrahend,
            q,
            den,
            k_length,
            num,
            theta_acc,
            k_pml,
            tmp,
            k_mass,
            vel_acc,
            k_tau,
            euler,
            pos_vel,
            obs_view,
            state_view,
            x_theta,
            abs_x_theta,
            k_limits,
            over,
        ) = self._kernel

        # gymnasium's CartPoleEnv.step, operation for operation (x_acc overwrites cos at the end).
        sin_fn(theta, sin)
        cos_fn(theta, cos)
        _mul(td_cos, td_cos, squares)  # np.square(theta_dot), np.square(costheta)
        _mul(sin_squares, k_scale, scaled)  # gravity * sintheta, polemass_length * ..., masspole * ...
        _mul(a_, sin, a_)  # ... * sintheta
        _add(a_, force, a_)  # force + ...
        _div(a_b, k_mass2, temp_b)  # temp = (...) / total_mass, masspole * costheta**2 / total_mass
        _mul(cos, temp, c_temp)  # costheta * temp
        _sub(minuend, subtrahend, q)  # 4.0 / 3.0 - ..., gravity * sintheta - costheta * temp
        _mul(k_length, den, den)  # self.length * (...)
        _div(num, den, theta_acc)  # thetaacc
        _mul(k_pml, theta_acc, tmp)  # polemass_length * thetaacc
        _mul(tmp, cos, tmp)  # ... * costheta
        _div(tmp, k_mass, tmp)  # ... / total_mass
        _sub(temp, tmp, cos)  # xacc = temp - ...
        _mul(k_tau, vel_acc, euler)  # tau * [x_dot, theta_dot, xacc, thetaacc]
        _add(pos_vel, euler, pos_vel)  # [x, theta, x_dot, theta_dot] + ...
        _copyto(obs_view, state_view, casting="same_kind")
        _abs(x_theta, abs_x_theta)
        _gt(abs_x_theta, k_limits, over)

        terminating = over.tobytes() != self._no_over
        if terminating or truncating:
            self._end_episodes(terminating, truncating)
        elif self._flags_dirty:
            self._terminated.fill(False)
            self._truncated.fill(False)
            self._flags_dirty = False
        return self._result

    def _step_numba(self, actions: np.ndarray) -> StepResult:
        """:meth:`step` with the jitted kernel: one call does the dynamics, the flags and the resets."""
        a = actions
        if type(a) is not np.ndarray or a.dtype is not _INT64 or a.shape != self._action_shape or not a.flags.c_contiguous:
            a = np.ascontiguousarray(self._check_actions(a))
        if self._generators is None:
            raise RuntimeError("call reset() before step()")
        t = self._t + 1
        exhausted = self._numba(
            a,
            self._w,
            self._obs,
            self._final_obs,
            self._terminated,
            self._truncated,
            self._deadline,
            t,
            self.max_episode_steps,
            self._resets,
            self._reset_pos,
        )
        if exhausted:
            if exhausted < 0:
                self._check_actions(a)  # raises
            for i in np.flatnonzero(self._reset_pos == _PREDRAWN).tolist():
                self._refill(i)
        self._t = t
        return self._result

    def _refill(self, i: int) -> None:
        """Pre-draw the next ``_PREDRAWN`` initial states of sub-env ``i`` from its generator (numba kernel only).

        One ``random(4 * K)`` call yields the same doubles as ``K`` calls of ``random(4)`` (and ``uniform`` likewise),
        so the states are those that ``K`` successive resets would draw, in the same order.

        Args:
            i: The sub-env.
        """
        gens = self._generators
        assert gens is not None
        if self._uniform_is_affine:
            u = gens[i].random(4 * _PREDRAWN)
            np.multiply(u, RESET_HIGH - RESET_LOW, out=u)
            np.add(u, RESET_LOW, out=u)  # RESET_LOW + span * u, two roundings as in NumPy's uniform
        else:
            u = gens[i].uniform(RESET_LOW, RESET_HIGH, 4 * _PREDRAWN)
        self._resets[i] = u.reshape(_PREDRAWN, 4)
        self._reset_pos[i] = 0

    def _check_actions(self, actions: object) -> np.ndarray:
        """Slow path of action validation: convert to a native int64 array or raise.

        Args:
            actions: What was passed to :meth:`step`.

        Returns:
            The actions as an int64 array of shape ``(num_envs,)``, values 0 or 1.

        Raises:
            ValueError: If the actions have the wrong shape, a non-integer dtype, or values other than 0 and 1.
        """
        a = np.asarray(actions)
        if a.shape != self._action_shape:
            raise ValueError(f"actions must have shape ({self.num_envs},), got {a.shape}")
        if a.dtype.kind not in "iu":
            raise ValueError(f"actions must be integers (0 or 1), got dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() > 1):
            bad = a[(a < 0) | (a > 1)]
            raise ValueError(f"CartPole actions must be 0 or 1, got {bad[:5].tolist()}")
        return a.astype(_INT64, copy=False)

    def _end_episodes(self, terminating: bool, truncating: bool) -> None:
        """Set the episode-end flags, then save final observations and reset the finished sub-envs.

        Args:
            terminating: Whether some sub-env left the allowed region at this step.
            truncating: Whether the truncation flags were recomputed at this step.
        """
        term, trunc = self._terminated, self._truncated
        if terminating:
            np.logical_or(self._over_x, self._over_theta, term)
        else:
            term.fill(False)
        if truncating:
            ended = np.logical_or(term, trunc, self._ended)
        else:
            trunc.fill(False)
            ended = term
        self._flags_dirty = True
        flags = ended.tobytes()
        idx = []
        i = flags.find(1)
        while i >= 0:
            idx.append(i)
            i = flags.find(1, i + 1)
        if idx:
            np.copyto(self._final_obs, self._obs)
            self._draw_initial_states(idx)
        if truncating:
            self._next_deadline = min(self._deadline)

    def _draw_initial_states(self, idx: range | list[int]) -> None:
        """Reset sub-envs ``idx`` with their own generators, like ``CartPoleEnv.reset`` with ``seed=None``.

        Args:
            idx: Indices of the sub-envs to reset.
        """
        n, w, gens = self.num_envs, self._w, self._generators
        assert gens is not None
        low, high, span = RESET_LOW, RESET_HIGH, RESET_HIGH - RESET_LOW
        deadline, new_deadline = self._deadline, self._t + self.max_episode_steps
        affine = self._uniform_is_affine
        if self._numba is not None:
            resets, pos = self._resets, self._reset_pos
            for i in idx:
                x, x_dot, theta, theta_dot = resets[i, pos[i]].tolist()
                w[i], w[n + i], w[2 * n + i], w[3 * n + i] = x, theta, x_dot, theta_dot
                deadline[i] = new_deadline
                pos[i] += 1
                if pos[i] == _PREDRAWN:
                    self._refill(i)
            _copyto(self._kernel.obs_view, self._kernel.state_view, casting="same_kind")
            return
        for i in idx:
            if affine:
                u = gens[i].random(4).tolist()
                x, x_dot, theta, theta_dot = low + span * u[0], low + span * u[1], low + span * u[2], low + span * u[3]
            else:
                x, x_dot, theta, theta_dot = gens[i].uniform(low, high, 4).tolist()
            w[i], w[n + i], w[2 * n + i], w[3 * n + i] = x, theta, x_dot, theta_dot
            deadline[i] = new_deadline
        _copyto(self._kernel.obs_view, self._kernel.state_view, casting="same_kind")

    def close(self) -> None:
        """Nothing to release; present for the VecEnv protocol."""

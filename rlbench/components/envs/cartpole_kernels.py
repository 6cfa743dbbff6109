"""The step kernels of :class:`~rlbench.components.envs.cartpole.NumpyCartPoleVecEnv`: gymnasium's constants, the
fused NumPy ufunc plan (:class:`_Kernel`, :func:`build_kernel`) and the one-call numba step, each checked to give
gymnasium's bits on this machine before it is used.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

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
    """One whole CartPole step of every sub-env in one loop, for numba (jitted lazily by :func:`_jit_numba_step`).

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
def _jit_numba_step() -> Callable[..., int] | None:
    """:func:`_numba_step` jitted (cached on disk: :func:`rlbench.core.jit.njit`), or None where numba is not installed.
    Not yet checked: the env (``cartpole._numba_kernel``) uses it only once it has reproduced the NumPy step bit for
    bit."""
    from rlbench.core.jit import njit

    try:
        return njit(_numba_step, _NUMBA_SIGNATURE, nogil=True, boundscheck=False)
    except ImportError:
        return None


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


def build_kernel(n: int, w: np.ndarray, obs: np.ndarray, array_trig: bool) -> _Kernel:
    """Allocate the scratch buffers and constants of one batched step.

    Args:
        n: Number of sub-environments.
        w: The flat float64 state buffer ``[x, theta, x_dot, theta_dot, x_acc, theta_acc]`` of ``6 n`` values.
        obs: The ``(n, 4)`` float32 observation buffer.
        array_trig: Whether NumPy's array ``sin``/``cos`` give the scalar functions' bits on this machine.

    Returns:
        The views and constants, laid out so that fused ufunc calls see adjacent blocks.
    """

    def full(*values: float) -> np.ndarray:
        return np.repeat(np.array(values, dtype=np.float64), n)

    h = np.empty(3 * n)  # [sin, theta_dot**2, cos**2]
    g = full(4.0 / 3.0, 0.0, 0.0, 0.0)  # [4/3, gravity * sin, a, masspole * cos**2]
    s = np.empty(3 * n)  # [temp, b, cos * temp]
    q = np.empty(2 * n)  # [4/3 - b then denominator, numerator]
    obs_view = obs.T.reshape(2, 2, n)
    if not np.shares_memory(obs_view, obs):
        raise AssertionError("the observation view must alias the observation buffer")
    sin_fn, cos_fn = (np.sin, np.cos) if array_trig else (_scalar_ufunc(np.sin), _scalar_ufunc(np.cos))
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


def check_actions(actions: object, num_envs: int) -> np.ndarray:
    """Convert CartPole actions to a native int64 array of shape ``(num_envs,)``, or raise.

    Raises:
        ValueError: If the actions have the wrong shape, a non-integer dtype, or values other than 0 and 1.
    """
    a = np.asarray(actions)
    if a.shape != (num_envs,):
        raise ValueError(f"actions must have shape ({num_envs},), got {a.shape}")
    if a.dtype.kind not in "iu":
        raise ValueError(f"actions must be integers (0 or 1), got dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() > 1):
        bad = a[(a < 0) | (a > 1)]
        raise ValueError(f"CartPole actions must be 0 or 1, got {bad[:5].tolist()}")
    return a.astype(_INT64, copy=False)


def predraw_initial_states(generator: np.random.Generator, affine: bool) -> np.ndarray:
    """The next ``_PREDRAWN`` initial states ``(x, x_dot, theta, theta_dot)`` a sub-env's resets would draw, in order.

    One ``random(4 * K)`` call yields the same doubles as ``K`` calls of ``random(4)`` (and ``uniform`` likewise), so
    the states are those that ``K`` successive resets would draw.

    Args:
        generator: The sub-env's own generator.
        affine: Whether ``low + span * random()`` gives NumPy's ``uniform`` bits on this machine.
    """
    if affine:
        u = generator.random(4 * _PREDRAWN)
        np.multiply(u, RESET_HIGH - RESET_LOW, out=u)
        np.add(u, RESET_LOW, out=u)  # RESET_LOW + span * u, two roundings as in NumPy's uniform
    else:
        u = generator.uniform(RESET_LOW, RESET_HIGH, 4 * _PREDRAWN)
    return u.reshape(_PREDRAWN, 4)

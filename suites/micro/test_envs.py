"""Micro-benchmark: one ``step`` of N vectorized envs, rlbench's NumPy envs against gymnasium's vector envs.

Run with ``pytest suites/micro/test_envs.py --benchmark-only``. Implementations (``impl``):

* ``numpy`` — rlbench's :class:`NumpyCartPoleVecEnv` / :class:`NumpyPendulumVecEnv` (same-step autoreset);
* ``numba`` — :class:`NumpyCartPoleVecEnv` with ``kernel="numba"``: the same env, bit for bit, stepped by one jitted
  call (CartPole only; skipped where numba is missing or not exact);
* ``reference`` — gymnasium's ``SyncVectorEnv`` with same-step autoreset, the behaviour the NumPy envs reproduce
  bit for bit (so the report's speed-ups are over it);
* ``gym-async`` — gymnasium's ``AsyncVectorEnv`` (worker processes; only at N=8, the machine has few cores);
* ``gym-vector`` — gymnasium's native vectorized env, ``make_vec(..., vectorization_mode="vector_entry_point")``
  (CartPole only: Pendulum has no vector entry point; gymnasium's default next-step autoreset);
* ``user:NAME`` — ``rlbench run envs --impl pkg.mod:make_env``: ``make_env(env_id, num_envs)`` returning a gymnasium
  vector env, checked against gymnasium's first (see :mod:`rlbench.suites.micro.user_impls`); env ids it declines are
  skipped;
* ``rlox`` / ``sb3`` / ``torchrl`` — other libraries' vector envs where installed (``peer=True`` rows): rlox's Rust
  ``VecEnv``, SB3's ``DummyVecEnv`` and TorchRL's ``SerialEnv`` of ``GymEnv``, all auto-resetting in the step (what
  each times and its asymmetries: :mod:`rlbench.suites.micro.peer_envs`).

Each call steps all N envs once with the next of 64 precomputed batches of random valid actions (episodes end and
autoreset inside the timing, as in training). ``extra_info``: ``group="envs"``, ``op`` (the env id), ``impl``,
``size`` (``N=...``) and ``elements`` (N).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from rlbench.suites.micro.peer_envs import installed as installed_peers
from rlbench.suites.micro.user_checks import env_actions, make_user_env
from rlbench.suites.micro.user_impls import user_cases

from rlbench.components.envs.cartpole import NumpyCartPoleVecEnv
from rlbench.components.envs.pendulum import NumpyPendulumVecEnv

ENVS = {"CartPole-v1": NumpyCartPoleVecEnv, "Pendulum-v1": NumpyPendulumVecEnv}
USER = user_cases(os.environ.get("RLBENCH_USER_IMPLS"))
IMPLS = ("numpy", "numba", "reference", "gym-async", "gym-vector", *USER)
SIZES = (8, 64, 512)
ASYNC_SIZES = (8,)


def _skip_reason(env_id: str, impl: str, n: int) -> str | None:
    """Why a combination is not benchmarked, or None."""
    if impl == "gym-async" and n not in ASYNC_SIZES:
        return "AsyncVectorEnv only at N=8 (one process per env on a machine with few cores)"
    if impl in ("gym-vector", "numba") and env_id != "CartPole-v1":
        return f"no {impl} variant of {env_id}"
    return None


CASES = [
    pytest.param(env_id, impl, n, id=f"{env_id.split('-')[0]}-{impl}-N{n}", marks=pytest.mark.skip(reason=reason))
    if (reason := _skip_reason(env_id, impl, n))
    else pytest.param(env_id, impl, n, id=f"{env_id.split('-')[0]}-{impl}-N{n}")
    for env_id in ENVS
    for n in SIZES
    for impl in IMPLS
]


def action_batches(env_id: str, n: int, count: int = 64) -> list[np.ndarray]:
    """``count`` batches of random valid actions: int64 (N,) pushes for CartPole, float32 (N, 1) torques for Pendulum."""
    return env_actions(env_id, n, count, seed=n)


def make_stepper(env_id: str, impl: str, n: int) -> tuple[Callable[[np.ndarray], Any], Callable[[], None]]:
    """Builds and resets the env; returns its one-step function and its close function."""
    if impl in ("numpy", "numba"):
        if impl == "numba":
            try:
                env = NumpyCartPoleVecEnv(n, kernel="numba")
            except ImportError as exc:
                pytest.skip(str(exc))
        else:
            env = ENVS[env_id](n)
        env.reset(seed=0)
        return env.step, env.close
    if impl in USER:
        user_env = make_user_env(impl, USER[impl], env_id, n)
        if user_env is None:
            pytest.skip(f"{impl} does not provide {env_id}")
        user_env.reset(seed=0)
        return user_env.step, getattr(user_env, "close", lambda: None)
    import gymnasium as gym

    if impl == "gym-vector":
        vec = gym.make_vec(env_id, n, vectorization_mode="vector_entry_point")
    else:
        mode = "sync" if impl == "reference" else "async"
        vec = gym.make_vec(
            env_id, n, vectorization_mode=mode, vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        )
    vec.reset(seed=0)
    return vec.step, vec.close


@pytest.mark.parametrize("env_id, impl, n", CASES)
def test_env_step(benchmark: Any, env_id: str, impl: str, n: int) -> None:
    """Times one step of ``n`` envs."""
    step, close = make_stepper(env_id, impl, n)
    actions: Iterator[np.ndarray] = itertools.cycle(action_batches(env_id, n))
    try:
        for _ in range(3):  # warm-up: lazy imports and checks (numba for float32 Pendulum torques), caches
            step(next(actions))
        benchmark.group = f"envs {env_id} N={n}"
        benchmark.extra_info.update(group="envs", op=env_id, impl=impl, size=f"N={n}", elements=n)
        result = benchmark(lambda: step(next(actions)))
        assert result[0].shape[0] == n
    finally:
        close()


PEER_CASES = [
    pytest.param(env_id, peer, n, id=f"{env_id.split('-')[0]}-{peer}-N{n}")
    for env_id in ENVS
    for n in SIZES
    for peer, p in sorted(installed_peers().items())
    if env_id in p.env_ids
]


@pytest.mark.parametrize("env_id, peer, n", PEER_CASES)
def test_env_step_peer(benchmark: Any, env_id: str, peer: str, n: int) -> None:
    """Times one auto-resetting step of another library's ``n`` envs (rlox, SB3, TorchRL; see ``peer_envs``)."""
    p = installed_peers()[peer]
    env, close = p.make(env_id, n)
    actions = itertools.cycle([p.prepare(env_id, a) for a in action_batches(env_id, n)])
    try:
        for _ in range(3):  # warm-up: lazy imports and init, caches
            p.step(env, next(actions))
        benchmark.group = f"envs {env_id} N={n}"
        benchmark.extra_info.update(group="envs", op=env_id, impl=peer, size=f"N={n}", elements=n, peer=True)
        result = benchmark(lambda: p.step(env, next(actions)))
        assert p.obs(result).shape[0] == n and p.done(result).shape == (n,)
    finally:
        close()

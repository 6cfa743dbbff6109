"""Correctness checks of users' replay buffers and vector envs before they join a micro-benchmark group.

The contracts are stated in :mod:`rlbench.suites.micro.user_impls`. Every failure raises :class:`UsageError` with
one line naming the implementation, what failed and "not timed".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlbench.core.errors import UsageError

OBS_SHAPE, ACTION_SHAPE = (8,), (2,)
BUFFER_FIELDS = ("obs", "action", "reward", "next_obs", "done")
ENV_IDS = ("CartPole-v1", "Pendulum-v1")
_CAPACITY, _DRAWS, _BATCH, _MIN_P = 200, 25_600, 256, 1e-4


def transitions(ids: np.ndarray) -> dict[str, np.ndarray]:
    """Transitions whose every field encodes the row id, so that a sampled row can be traced back and checked."""
    f = ids.astype(np.float32)
    return {
        "obs": f[:, None] + np.arange(OBS_SHAPE[0], dtype=np.float32) * 1e-3,
        "action": -f[:, None] - np.arange(ACTION_SHAPE[0], dtype=np.float32) * 1e-3,
        "reward": f * 0.5,
        "next_obs": f[:, None] + 0.25,
        "done": ids % 3 == 0,
    }


def _numpy(x: Any) -> np.ndarray:
    """An array or tensor as a NumPy array (tensors detached and moved to the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _sample_ids(spec: str, buf: Any, batch: int) -> np.ndarray:
    """Calls ``buf.sample(batch)``, checks the fields' shapes and consistency, returns the sampled row ids."""
    try:
        out = buf.sample(batch)
    except Exception as exc:
        raise UsageError(f"--impl {spec}: sample({batch}) raised {type(exc).__name__}: {exc}; not timed") from None
    if not isinstance(out, Mapping) or any(k not in out for k in BUFFER_FIELDS):
        raise UsageError(f"--impl {spec}: sample() must return a mapping with fields {BUFFER_FIELDS}; not timed")
    got = {k: _numpy(out[k]) for k in BUFFER_FIELDS}
    shapes = {
        "obs": (batch, *OBS_SHAPE),
        "action": (batch, *ACTION_SHAPE),
        "reward": (batch,),
        "next_obs": (batch, *OBS_SHAPE),
        "done": (batch,),
    }
    for k, shape in shapes.items():
        if got[k].shape != shape:
            raise UsageError(f"--impl {spec}: sample({batch})[{k!r}] has shape {got[k].shape}, expected {shape}; not timed")
    ids = np.rint(got["obs"][:, 0]).astype(np.int64)
    want = transitions(ids)
    for k in BUFFER_FIELDS:
        bad = np.flatnonzero(
            ~np.isclose(got[k].astype(np.float64), want[k].astype(np.float64), atol=1e-4).reshape(batch, -1).all(1)
        )
        if bad.size:
            raise UsageError(
                f"--impl {spec}: sampled row {int(bad[0])} is not a stored transition: its {k!r} does not belong "
                f"to the transition whose obs it has (row id {int(ids[bad[0]])}); not timed"
            )
    return ids


def check_buffer(spec: str, cls: Callable[..., Any]) -> None:
    """Fill, overflow and sample a user's buffer class; raise naming the first failure.

    Raises:
        UsageError: On a constructor/method error, a wrong shape, a row that was never stored (or mixes fields of
            several rows), a row evicted by FIFO order, or non-uniform sampling.
    """
    try:
        buf = cls(_CAPACITY, OBS_SHAPE, ACTION_SHAPE)
        for start in range(0, 130, 13):  # 130 rows, in batches of 13
            buf.add(transitions(np.arange(start, start + 13)))
    except Exception as exc:
        raise UsageError(
            f"--impl {spec}: constructing C({_CAPACITY}, {OBS_SHAPE}, {ACTION_SHAPE}) or add() raised "
            f"{type(exc).__name__}: {exc}; not timed"
        ) from None
    ids = _sample_ids(spec, buf, 64)
    if ids.min() < 0 or ids.max() >= 130:
        raise UsageError(f"--impl {spec}: sampled row id {int(ids.max())}, but only ids 0..129 were added; not timed")
    try:
        for start in range(130, 330, 25):  # 330 rows in all: rows 0..129 must have been evicted (FIFO, capacity 200)
            buf.add(transitions(np.arange(start, start + 25)))
    except Exception as exc:
        raise UsageError(f"--impl {spec}: add() past capacity raised {type(exc).__name__}: {exc}; not timed") from None
    counts = np.zeros(330, dtype=np.int64)
    for _ in range(_DRAWS // _BATCH):
        ids = _sample_ids(spec, buf, _BATCH)
        if ids.min() < 130 or ids.max() >= 330:
            worst = int(ids.min() if ids.min() < 130 else ids.max())
            raise UsageError(
                f"--impl {spec}: after adding rows 0..329 to a buffer of capacity {_CAPACITY}, sampled row "
                f"{worst}; only the newest {_CAPACITY} (130..329) may be sampled; not timed"
            )
        counts += np.bincount(ids, minlength=330)
    observed = counts[130:]
    expected = _DRAWS / _CAPACITY
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    p = _chi2_sf(chi2, _CAPACITY - 1)
    if p < _MIN_P:
        raise UsageError(
            f"--impl {spec}: sampling is not uniform: chi-square {chi2:.0f} on {_CAPACITY - 1} dof (p = {p:.2g}) "
            f"over {_DRAWS} draws; row counts range {observed.min()}..{observed.max()}, expected {expected:.0f}; "
            "not timed"
        )


def _chi2_sf(x: float, k: int) -> float:
    """Upper tail of the chi-square distribution (Wilson-Hilferty normal approximation; fine for k >= 30)."""
    z = ((x / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def env_actions(env_id: str, n: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` batches of valid random actions: int64 (N,) for CartPole, float32 (N, 1) torques for Pendulum."""
    rng = np.random.default_rng(seed)
    if env_id == "CartPole-v1":
        return [rng.integers(0, 2, n) for _ in range(count)]
    return [rng.uniform(-2.0, 2.0, (n, 1)).astype(np.float32) for _ in range(count)]


def make_user_env(spec: str, factory: Callable[..., Any], env_id: str, n: int) -> Any | None:
    """``factory(env_id, n)``, or None when it declines the env id (ValueError / NotImplementedError)."""
    try:
        return factory(env_id, n)
    except (ValueError, NotImplementedError):
        return None
    except Exception as exc:
        raise UsageError(f"--impl {spec}: f({env_id!r}, {n}) raised {type(exc).__name__}: {exc}; not timed") from None


def check_env(spec: str, factory: Callable[..., Any]) -> None:
    """Compare a user's vector env with gymnasium's (same seed) until the first episode end, then check shapes.

    Raises:
        UsageError: If it provides no env id, its API or shapes differ, or its values differ from the reference.
    """
    import gymnasium as gym

    n, provided = 4, 0
    for env_id in ENV_IDS:
        env = make_user_env(spec, factory, env_id, n)
        if env is None:
            continue
        provided += 1
        ref = gym.make_vec(env_id, n, vectorization_mode="sync")
        try:
            _compare_env(spec, env_id, env, ref, env_actions(env_id, n, 80))
        finally:
            ref.close()
            close = getattr(env, "close", None)
            if callable(close):
                close()
    if not provided:
        raise UsageError(f"--impl {spec}: provides none of {', '.join(ENV_IDS)} (f(env_id, num_envs) declined all); not timed")


def _compare_env(spec: str, env_id: str, env: Any, ref: Any, actions: list[np.ndarray]) -> None:
    """Steps ``env`` and ``ref`` side by side; raises on the first difference."""
    where = f"--impl {spec} on {env_id}"
    try:
        got = env.reset(seed=0)
    except Exception as exc:
        raise UsageError(f"{where}: reset(seed=0) raised {type(exc).__name__}: {exc}; not timed") from None
    want_obs, _ = ref.reset(seed=0)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise UsageError(f"{where}: reset(seed=0) must return (obs, info) as gymnasium's VectorEnv; not timed")
    obs = _numpy(got[0])
    if obs.shape != want_obs.shape or not np.allclose(obs, want_obs, atol=1e-5):
        raise UsageError(
            f"{where}: reset(seed=0) returned {obs.shape} observations differing from gymnasium's "
            f"(sub-env i must be seeded with seed + i); not timed"
        )
    compare = True
    for step, a in enumerate(actions):
        try:
            out = env.step(a.copy())
        except Exception as exc:
            raise UsageError(f"{where}: step {step} raised {type(exc).__name__}: {exc}; not timed") from None
        if not (isinstance(out, tuple) and len(out) == 5):
            raise UsageError(f"{where}: step() must return (obs, reward, terminated, truncated, info); not timed")
        got5 = [_numpy(x) for x in out[:4]]
        want = ref.step(a.copy())[:4] if compare else None
        shapes = (want_obs.shape, (len(a),), (len(a),), (len(a),))
        for j, (name, shape) in enumerate(zip(("obs", "reward", "terminated", "truncated"), shapes)):
            if got5[j].shape != shape:
                raise UsageError(f"{where}: step {step} returned {name} of shape {got5[j].shape}, expected {shape}; not timed")
            if want is not None and not np.allclose(got5[j].astype(np.float64), np.asarray(want[j], np.float64), atol=1e-4):
                raise UsageError(f"{where}: step {step} {name} differs from gymnasium's (same seed and actions); not timed")
        if compare and (got5[2].any() or got5[3].any()):
            compare = False  # autoreset conventions may differ from here on

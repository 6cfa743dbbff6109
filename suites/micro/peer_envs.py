"""Other libraries' vector envs, for rows beside rlbench's in the ``envs`` micro group (only where installed).

A row times one step of N envs with the next of the group's precomputed random action batches, already converted to
the library's own action type outside the timed call. As in the group's other rows, episodes end and auto-reset inside
the timing, and the observations a step returns are those of the next step (an ended env's reset observation; the
final one is passed apart):

- ``rlox``: ``rlox.VecEnv(N, seed=0, env_id=...)`` and ``step_all(actions)``: rlox's own Rust CartPole-v1 and
  Pendulum-v1 (its only native classic-control envs; not gymnasium's code, so not bit-identical to the reference),
  stepped on rlox's Rayon thread pool, which the group's one-thread setting (``OMP_NUM_THREADS``) does not govern.
  Actions: uint32 ``(N,)`` for CartPole, float32 ``(N, 1)`` for Pendulum. It returns a dict of NumPy arrays
  (``obs`` float32, ``rewards`` float64, ``terminated`` / ``truncated`` uint8) and a ``terminal_obs`` list with the
  final observation of each env that ended (``None`` elsewhere): same-step auto-reset.
- ``sb3``: Stable-Baselines3's ``DummyVecEnv`` of N ``gymnasium.make(env_id)`` envs (the reference row's envs, with
  gymnasium's default wrappers) and ``step(actions)`` (``step_async`` + ``step_wait``), seeded with ``seed(0)``.
  It steps the envs one after another in Python and resets an ended env in the same step (the final observation in
  ``infos[i]["terminal_observation"]``). ``make_vec_env``, SB3's usual constructor, builds the same ``DummyVecEnv``
  but also wraps every env in a ``Monitor`` (episode statistics, about 5-20% slower per step here); the plain
  ``DummyVecEnv`` isolates SB3's vectorization from that bookkeeping. Actions: the group's int64 ``(N,)`` /
  float32 ``(N, 1)`` arrays as they are.
- ``torchrl``: TorchRL's ``SerialEnv(N, lambda: GymEnv(env_id, categorical_action_encoding=True))`` (gymnasium envs
  wrapped one by one, stepped one after another in the same process), seeded with ``set_seed(0)``. The timed call
  writes the action tensor into the root ``TensorDict`` and calls ``step_and_maybe_reset``, TorchRL's auto-resetting
  step (as its collectors do): it returns the step's ``TensorDict`` (final observations under ``"next"``) and the
  root of the next step, in which ended envs are already reset. That root's ``observation`` is the row's
  observation, so the semantics match the group's same-step auto-reset. Actions: int64 ``(N,)`` tensors for
  CartPole (categorical, not TorchRL's default one-hot), float32 ``(N, 1)`` for Pendulum.

``obs`` and ``done`` read a step's result back as NumPy (observations after auto-reset, and which envs ended), so
tests can check shapes and auto-resets.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

ENV_IDS = ("CartPole-v1", "Pendulum-v1")


@dataclass(frozen=True)
class PeerEnv:
    """How to time one library's vector env.

    Attributes:
        make: ``make(env_id, n) -> (env, close)``: the env, seeded and reset, and its close function.
        prepare: ``prepare(env_id, actions)``: one of the group's action batches in the library's type.
        step: ``step(env, actions)``: the timed step of all ``n`` envs.
        obs: ``obs(result)``: the observations a step returns (ended envs already reset), ``(n, obs_dim)``.
        done: ``done(result)``: which envs ended at that step, bool ``(n,)``.
        env_ids: The group's env ids the library provides.
        module: The module whose presence enables the row.
    """

    make: Callable[[str, int], tuple[Any, Callable[[], None]]]
    prepare: Callable[[str, np.ndarray], Any]
    step: Callable[[Any, Any], Any]
    obs: Callable[[Any], np.ndarray]
    done: Callable[[Any], np.ndarray]
    env_ids: tuple[str, ...]
    module: str


# rlox ----------------------------------------------------------------------------------------------------------------


def _rlox_make(env_id: str, n: int) -> tuple[Any, Callable[[], None]]:
    import rlox

    env = rlox.VecEnv(n, seed=0, env_id=env_id)
    env.reset_all(seed=0)
    return env, lambda: None


def _rlox_prepare(env_id: str, actions: np.ndarray) -> np.ndarray:
    dtype = np.uint32 if env_id.startswith("CartPole") else np.float32
    return np.ascontiguousarray(actions, dtype=dtype)


def _rlox_step(env: Any, actions: np.ndarray) -> dict[str, Any]:
    return env.step_all(actions)


def _rlox_done(result: dict[str, Any]) -> np.ndarray:
    return (result["terminated"] != 0) | (result["truncated"] != 0)


# Stable-Baselines3 ---------------------------------------------------------------------------------------------------


def _sb3_make(env_id: str, n: int) -> tuple[Any, Callable[[], None]]:
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([functools.partial(gym.make, env_id)] * n)
    venv.seed(0)
    venv.reset()
    return venv, venv.close


def _sb3_step(venv: Any, actions: np.ndarray) -> tuple:
    return venv.step(actions)


# TorchRL -------------------------------------------------------------------------------------------------------------


class _TorchRLSerial:
    """A ``SerialEnv`` of gymnasium envs with the root ``TensorDict`` that each auto-resetting step hands on."""

    def __init__(self, env_id: str, n: int) -> None:
        from torchrl.envs import GymEnv, SerialEnv

        self.env = SerialEnv(n, functools.partial(GymEnv, env_id, categorical_action_encoding=True))
        self.env.set_seed(0)
        self.root = self.env.reset()

    def step(self, actions: Any) -> tuple[Any, Any]:
        self.root.set("action", actions)
        out, self.root = self.env.step_and_maybe_reset(self.root)
        return out, self.root


def _torchrl_make(env_id: str, n: int) -> tuple[Any, Callable[[], None]]:
    env = _TorchRLSerial(env_id, n)
    return env, env.env.close


def _torchrl_prepare(env_id: str, actions: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(actions))


def _torchrl_step(env: _TorchRLSerial, actions: Any) -> tuple[Any, Any]:
    return env.step(actions)


PEERS: dict[str, PeerEnv] = {
    "rlox": PeerEnv(
        make=_rlox_make,
        prepare=_rlox_prepare,
        step=_rlox_step,
        obs=lambda r: r["obs"],
        done=_rlox_done,
        env_ids=ENV_IDS,
        module="rlox",
    ),
    "sb3": PeerEnv(
        make=_sb3_make,
        prepare=lambda env_id, actions: actions,
        step=_sb3_step,
        obs=lambda r: r[0],
        done=lambda r: np.asarray(r[2], bool),
        env_ids=ENV_IDS,
        module="stable_baselines3",
    ),
    "torchrl": PeerEnv(
        make=_torchrl_make,
        prepare=_torchrl_prepare,
        step=_torchrl_step,
        obs=lambda r: r[1]["observation"].numpy(),
        done=lambda r: r[0]["next", "done"].reshape(-1).numpy(),
        env_ids=ENV_IDS,
        module="torchrl",
    ),
}


def installed() -> dict[str, PeerEnv]:
    """The peers whose library is importable."""
    return {name: p for name, p in PEERS.items() if importlib.util.find_spec(p.module) is not None}

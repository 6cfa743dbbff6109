"""Other libraries' GAE, for rows beside rlbench's in the ``gae`` micro group (only where the library is installed).

Each peer is timed on inputs already in its own layout and types, prepared outside the timed call, so a row is the
library's own cost, not a conversion of ours:

- ``rlox``: ``rlox.compute_gae_batched_f32`` on flat env-major float32 arrays (it also returns the returns);
- ``torchrl``: ``torchrl.objectives.value.functional.generalized_advantage_estimate`` on ``(N, T, 1)`` tensors;
- ``sb3``: ``RolloutBuffer.compute_returns_and_advantage`` of Stable-Baselines3 on a filled ``(T, N)`` buffer.

``to_tn`` turns a peer's result back into rlbench's ``(T, N)`` advantages, so tests can hold every peer to the
reference.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PeerGAE:
    """How to time one library's GAE.

    Attributes:
        prepare: ``prepare(rewards, values, dones, last_value, gamma, lam) -> args`` in the library's layout.
        call: ``call(*args)``: the timed library call.
        to_tn: ``to_tn(result, args, T, N)``: the advantages as a ``(T, N)`` NumPy array.
        module: The module whose presence enables the row.
    """

    prepare: Callable[..., tuple]
    call: Callable[..., Any]
    to_tn: Callable[[Any, tuple, int, int], np.ndarray]
    module: str


def _rlox_prepare(r: np.ndarray, v: np.ndarray, d: np.ndarray, lv: np.ndarray, gamma: float, lam: float) -> tuple:
    T = r.shape[0]
    flat = [np.ascontiguousarray(x.T, dtype=np.float32).ravel() for x in (r, v, d)]
    return (*flat, np.ascontiguousarray(lv, dtype=np.float32), T, gamma, lam)


def _rlox_call(*args: Any) -> Any:
    import rlox

    return rlox.compute_gae_batched_f32(*args)


def _torchrl_prepare(r: np.ndarray, v: np.ndarray, d: np.ndarray, lv: np.ndarray, gamma: float, lam: float) -> tuple:
    import torch

    def nt1(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x.T)).unsqueeze(-1)

    next_v = np.concatenate([v[1:], lv[None]], axis=0)
    done = nt1(d.astype(bool))
    return gamma, lam, nt1(v.astype(np.float32)), nt1(next_v.astype(np.float32)), nt1(r.astype(np.float32)), done, done


def _torchrl_call(*args: Any) -> Any:
    from torchrl.objectives.value.functional import generalized_advantage_estimate

    return generalized_advantage_estimate(*args)


def _sb3_prepare(r: np.ndarray, v: np.ndarray, d: np.ndarray, lv: np.ndarray, gamma: float, lam: float) -> tuple:
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    T, N = r.shape
    buf = RolloutBuffer(T, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), "cpu", gae_lambda=lam, gamma=gamma, n_envs=N)
    buf.rewards[:] = r
    buf.values[:] = v
    starts = np.zeros((T, N), np.float32)
    starts[1:] = d[:-1]  # SB3 marks the step after an episode's end; dones of the last step are passed apart
    buf.episode_starts[:] = starts
    return buf, torch.from_numpy(np.asarray(lv, np.float32)), np.asarray(d[-1], np.float32)


def _sb3_call(buf: Any, last_values: Any, dones: np.ndarray) -> Any:
    buf.compute_returns_and_advantage(last_values, dones)
    return buf.advantages


PEERS: dict[str, PeerGAE] = {
    "rlox": PeerGAE(_rlox_prepare, _rlox_call, lambda res, a, T, N: res[0].reshape(N, T).T, "rlox"),
    "torchrl": PeerGAE(_torchrl_prepare, _torchrl_call, lambda res, a, T, N: res[0].squeeze(-1).numpy().T, "torchrl"),
    "sb3": PeerGAE(_sb3_prepare, _sb3_call, lambda res, a, T, N: np.asarray(res), "stable_baselines3"),
}


def installed() -> dict[str, PeerGAE]:
    """The peers whose library is importable."""
    return {name: p for name, p in PEERS.items() if importlib.util.find_spec(p.module) is not None}

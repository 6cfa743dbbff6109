"""Other libraries' replay buffers, for rows beside rlbench's in the ``buffers`` micro group (where installed).

Each peer holds the group's transitions (8-float ``obs`` and ``next_obs``, 2-float ``action``, float ``reward``,
``done``), is filled once to capacity (untimed) and then timed on batches already in its own types, prepared outside
the timed call, so a row is the library's own cost, not a conversion of ours:

- ``rlox``: ``rlox.ReplayBuffer(capacity, 8, 2)`` (Rust ring buffer). ``add``: one ``push_batch`` of flat float32
  ``obs`` / ``next_obs`` / ``actions``, float32 rewards and uint8 ``terminated`` (rlbench's ``done``) /
  ``truncated`` (zeros), the layout rlox's own off-policy collector pushes. ``sample``: ``sample(batch, seed)``,
  a dict of fresh NumPy arrays, drawn with replacement (rlox refuses a batch larger than the rows held); rlox takes
  a seed per call, so each call gets the next of a counter (a fixed seed would draw the same rows every call,
  cache-warm).
- ``torchrl``: ``ReplayBuffer(storage=LazyTensorStorage(capacity), sampler=RandomSampler())`` of TorchRL, storing a
  flat ``TensorDict`` with rlbench's keys. ``add``: one ``extend`` of a ``TensorDict`` of ``batch`` rows.
  ``sample``: ``sample(batch)``, a ``TensorDict`` of fresh tensors. The buffer is shared by both sample batch
  sizes, so the batch size is given to ``sample`` rather than to the constructor (giving both makes TorchRL warn
  about conflicting batch sizes on every call).
- ``sb3``: Stable-Baselines3's ``stable_baselines3.common.buffers.ReplayBuffer`` (Box observation and action
  spaces, ``device="cpu"``, default ``handle_timeout_termination=True``, so it also stores next observations and
  timeouts). SB3 adds one env-batch per ``add`` call, one row per env: an add batch of B rows is one ``add`` call
  on a buffer built with ``n_envs=B`` (one buffer per add batch size; its capacity is ``capacity // B`` env-batches,
  so at B=256 it holds 99,840 / 999,936 rows instead of 1e5 / 1e6); the ``infos`` list of B empty dicts is built
  outside the timed call. ``sample`` runs on a buffer with ``n_envs=1``: ``sample(batch)`` draws rows with
  ``np.random`` and returns ``ReplayBufferSamples`` of torch tensors (copies; ``dones`` and ``rewards`` as
  ``(batch, 1)``).

Filling (untimed): rlox's ``push_batch`` and TorchRL's ``extend`` of all rows at once; SB3's public arrays
(``observations``, ``next_observations``, ``actions``, ``rewards``, ``dones``) written directly and the buffer marked
full, since filling 1e6 rows one env-batch per ``add`` call would take seconds. After filling, ``add`` keeps
wrapping around the full buffer, as rlbench's buffers do.

``to_rows`` turns a peer's sample back into rlbench's NumPy fields (``obs``, ``action``, ``reward``, ``next_obs``,
``done``), so tests can trace every sampled row to an added transition.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

OBS_DIM, ACT_DIM = 8, 2
_SEEDS = itertools.count(1)  #: per-call seeds of rlox's ``sample``


@dataclass(frozen=True)
class PeerReplay:
    """How to time one library's replay buffer.

    Attributes:
        make: ``make(capacity, rows_per_add) -> buffer``, empty (``rows_per_add`` matters only to SB3's ``n_envs``).
        fill: ``fill(buffer, batch)``: untimed, fills an empty buffer to capacity from a dict of rlbench fields.
        prepare: ``prepare(batch) -> args``: an add batch (dict of rlbench fields) in the library's types.
        add: ``add(buffer, *args)``: the timed push.
        sample: ``sample(buffer, n)``: the timed draw of ``n`` rows.
        to_rows: ``to_rows(sample)``: rlbench's fields as NumPy arrays (``reward`` and ``done`` 1-D, ``done`` bool).
        size: ``size(buffer)``: rows held.
        module: The module whose presence enables the row.
        per_add_batch: The buffer is built for one add batch size (SB3), so ``add`` of each size gets its own.
    """

    make: Callable[[int, int], Any]
    fill: Callable[[Any, dict[str, np.ndarray]], None]
    prepare: Callable[[dict[str, np.ndarray]], tuple]
    add: Callable[..., Any]
    sample: Callable[[Any, int], Any]
    to_rows: Callable[[Any], dict[str, np.ndarray]]
    size: Callable[[Any], int]
    module: str
    per_add_batch: bool = False


# rlox ----------------------------------------------------------------------------------------------------------------


def _rlox_make(capacity: int, rows_per_add: int) -> Any:
    import rlox

    return rlox.ReplayBuffer(capacity, OBS_DIM, ACT_DIM)


def _rlox_prepare(batch: dict[str, np.ndarray]) -> tuple:
    def flat(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x, dtype=np.float32).ravel()

    done = np.asarray(batch["done"], dtype=np.uint8)
    return (
        flat(batch["obs"]),
        flat(batch["next_obs"]),
        flat(batch["action"]),
        flat(batch["reward"]),
        done,
        np.zeros_like(done),
    )


def _rlox_add(buf: Any, *args: Any) -> None:
    buf.push_batch(*args)


def _rlox_sample(buf: Any, n: int) -> Any:
    return buf.sample(n, next(_SEEDS))


def _rlox_rows(s: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        "obs": s["obs"],
        "action": s["actions"],
        "reward": s["rewards"],
        "next_obs": s["next_obs"],
        "done": s["terminated"].astype(bool),
    }


# TorchRL -------------------------------------------------------------------------------------------------------------


def _torchrl_make(capacity: int, rows_per_add: int) -> Any:
    from torchrl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
    from torchrl.data.replay_buffers.samplers import RandomSampler

    return ReplayBuffer(  # plain counters: the default mp.Value ones are process-shared semaphores
        storage=LazyTensorStorage(capacity, compilable=True), sampler=RandomSampler(), writer=RoundRobinWriter(compilable=True)
    )


def _torchrl_prepare(batch: dict[str, np.ndarray]) -> tuple:
    import torch
    from tensordict import TensorDict

    n = len(batch["obs"])
    td = TensorDict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}, batch_size=[n])
    return (td,)


def _torchrl_fill(buf: Any, batch: dict[str, np.ndarray]) -> None:
    buf.extend(*_torchrl_prepare(batch))


def _torchrl_add(buf: Any, td: Any) -> None:
    buf.extend(td)


def _torchrl_sample(buf: Any, n: int) -> Any:
    return buf.sample(n)


def _torchrl_rows(td: Any) -> dict[str, np.ndarray]:
    return {k: td[k].numpy() for k in ("obs", "action", "reward", "next_obs", "done")}


# Stable-Baselines3 ---------------------------------------------------------------------------------------------------


def _sb3_make(capacity: int, rows_per_add: int) -> Any:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    obs = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act = spaces.Box(-np.inf, np.inf, (ACT_DIM,), np.float32)
    return ReplayBuffer(capacity, obs, act, device="cpu", n_envs=rows_per_add)


def _sb3_fill(buf: Any, batch: dict[str, np.ndarray]) -> None:
    rows = buf.buffer_size * buf.n_envs
    for name, field in (
        ("observations", "obs"),
        ("next_observations", "next_obs"),
        ("actions", "action"),
        ("rewards", "reward"),
        ("dones", "done"),
    ):
        arr = getattr(buf, name)
        arr.reshape(rows, *arr.shape[2:])[:] = batch[field][:rows]  # (buffer_size, n_envs, ...) row-major: a view
    buf.timeouts[:] = 0
    buf.pos, buf.full = 0, True


def _sb3_prepare(batch: dict[str, np.ndarray]) -> tuple:
    n = len(batch["obs"])
    return (
        np.ascontiguousarray(batch["obs"], np.float32),
        np.ascontiguousarray(batch["next_obs"], np.float32),
        np.ascontiguousarray(batch["action"], np.float32),
        np.ascontiguousarray(batch["reward"], np.float32),
        np.asarray(batch["done"], np.float32),
        [{} for _ in range(n)],
    )


def _sb3_add(buf: Any, *args: Any) -> None:
    buf.add(*args)


def _sb3_sample(buf: Any, n: int) -> Any:
    return buf.sample(n)


def _sb3_rows(s: Any) -> dict[str, np.ndarray]:
    return {
        "obs": s.observations.numpy(),
        "action": s.actions.numpy(),
        "reward": s.rewards.numpy().reshape(-1),
        "next_obs": s.next_observations.numpy(),
        "done": s.dones.numpy().reshape(-1) > 0.5,
    }


def _sb3_size(buf: Any) -> int:
    return buf.size() * buf.n_envs


PEERS: dict[str, PeerReplay] = {
    "rlox": PeerReplay(
        make=_rlox_make,
        fill=lambda buf, batch: _rlox_add(buf, *_rlox_prepare(batch)),
        prepare=_rlox_prepare,
        add=_rlox_add,
        sample=_rlox_sample,
        to_rows=_rlox_rows,
        size=len,
        module="rlox",
    ),
    "torchrl": PeerReplay(
        make=_torchrl_make,
        fill=_torchrl_fill,
        prepare=_torchrl_prepare,
        add=_torchrl_add,
        sample=_torchrl_sample,
        to_rows=_torchrl_rows,
        size=len,
        module="torchrl",
    ),
    "sb3": PeerReplay(
        make=_sb3_make,
        fill=_sb3_fill,
        prepare=_sb3_prepare,
        add=_sb3_add,
        sample=_sb3_sample,
        to_rows=_sb3_rows,
        size=_sb3_size,
        module="stable_baselines3",
        per_add_batch=True,
    ),
}


def installed() -> dict[str, PeerReplay]:
    """The peers whose library is importable."""
    return {name: p for name, p in PEERS.items() if importlib.util.find_spec(p.module) is not None}

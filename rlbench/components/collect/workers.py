"""Env workers of the :class:`~rlbench.components.collect.batched.AsyncBatchedCollector` (threads or processes).

A worker owns one single-env :class:`~rlbench.components.envs.base.VecEnv` and a transport client. Per
``collect`` call it passes its gate, makes ``quota + 1`` requests and steps its env ``quota`` times, then
reports done. Each request is one float32 row packing everything the server-side recorder needs::

    [ obs (D) | reward | terminated | truncated | has_prev | final_obs (D) ]

``reward``/``terminated``/``truncated``/``final_obs`` describe the step taken from the *previous*
request's observation (``has_prev`` is 0 on a collect's first request). The last request of a collect
carries the final transition and the next observation; its reply (an action from the current policy)
is not stepped: the next collect re-sends that observation to the updated policy. This module does not
import torch.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np

from rlbench.components.inference.base import TransportClosedError


def row_width(obs_dim: int) -> int:
    """Width of a request row for observations of ``obs_dim`` features."""
    return 2 * obs_dim + 4


def worker_loop(
    index: int,
    env_id: str,
    seed: int | None,
    client: Any,
    gate: Any,
    done: Any,
    control: Any,
    clip: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """Run one env worker until ``control.stop`` is set or the transport closes.

    Args:
        index: Worker index (its env is seeded ``seed + index``; its quota is ``control.quota[index]``).
        env_id: Gymnasium id, built with :func:`~rlbench.components.envs.make_vec_env` (one sub-env).
        seed: Base seed (``None``: unseeded).
        client: Transport client; returns the model's outputs for one row (actions first).
        gate: Semaphore-like; acquired before each collect.
        done: Semaphore-like; released after each collect (and on exit).
        control: Has ``stop`` (``stop[0]`` true: exit), ``quota`` (steps per worker) and ``failed`` (set
            to 1 at ``failed[index]`` when the worker dies of an exception).
        clip: ``(low, high)`` bounds box actions are clipped to before stepping.
    """
    from rlbench.components.envs import make_vec_env

    env = None
    try:
        env = make_vec_env(env_id, 1)
        obs = np.asarray(env.reset(seed=None if seed is None else seed + index), dtype=np.float32)[0].copy()
        d = obs.size
        row = np.zeros(row_width(d), dtype=np.float32)
        discrete = env.action_spec.kind == "discrete"
        while True:
            gate.acquire()
            if control.stop[0]:
                break
            quota = int(control.quota[index])
            row[d:] = 0.0
            for k in range(quota + 1):
                row[:d] = obs.reshape(-1)
                out = client(row)
                if k == quota:
                    break
                action = out[0] if isinstance(out, tuple) else out
                if discrete:
                    a = np.array([int(action)], dtype=np.int64)
                else:
                    a = np.asarray(action, dtype=np.float32).reshape(1, -1)
                    if clip is not None:
                        a = np.clip(a, clip[0], clip[1])
                res = env.step(a)
                term, trunc = bool(res.terminated[0]), bool(res.truncated[0])
                row[d] = res.reward[0]
                row[d + 1] = term
                row[d + 2] = trunc
                row[d + 3] = 1.0
                if term or trunc:
                    row[d + 4 :] = np.asarray(res.final_obs[0], dtype=np.float32).reshape(-1)
                obs = res.obs[0]
            done.release()
    except TransportClosedError:
        pass
    except BaseException:
        control.failed[index] = 1
        traceback.print_exc()
    finally:
        if env is not None:
            env.close()
        done.release()

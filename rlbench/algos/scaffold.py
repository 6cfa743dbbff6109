"""What every instrumented training loop does around its own work: threads, timer, warm-up, evaluation.

A loop opens a :class:`TrainingSession` (torch's thread count set, a phase timer synchronized for the device, the
callbacks), builds its components inside ``init``, ends the warm-up with :meth:`TrainingSession.end_warmup` once
the first iteration's one-time costs are paid, and times its deterministic evaluation with
:meth:`TrainingSession.evaluate`. The loop itself stays readable top to bottom (as in CleanRL) and only its own
steps are in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlbench.components.envs import make_vec_env
from rlbench.core.errors import UsageError
from rlbench.instrument.callbacks import Callback, CallbackList
from rlbench.instrument.sync import device_sync
from rlbench.instrument.timers import PhaseTimer
from rlbench.results.metrics import WARMUP


@dataclass
class TrainingSession:
    """The measuring side of one training run.

    Attributes:
        device: The torch device the update runs on.
        timer: Phase timer (boundaries synchronized on CUDA/MPS).
        callback: Progress and early-stop hooks (a no-op list when none was given).
    """

    device: torch.device
    timer: PhaseTimer
    callback: Callback

    @classmethod
    def start(cls, threads: int, device: torch.device | None, callback: Callback | None) -> TrainingSession:
        """Set torch's intra-op threads and open a timer for ``device`` (CPU when ``None``)."""
        device = device or torch.device("cpu")
        torch.set_num_threads(threads)
        return cls(device, PhaseTimer(device_sync(device)), callback if callback is not None else CallbackList())

    def end_warmup(self, warmup_s: float) -> None:
        """Book everything so far as the ``warmup`` phase: steady-state phases start from zero after this."""
        self.timer.reset()
        self.timer.add(WARMUP, warmup_s, 1)

    def evaluate(self, policy: Any, env_id: str, episodes: int, seed: int) -> tuple[list[float], float]:
        """Deterministic evaluation (:func:`evaluate_policy`) and the seconds it took."""
        t0 = self.timer.now()
        returns = evaluate_policy(policy, env_id, episodes, seed)
        return returns, self.timer.now() - t0


def evaluate_policy(policy: Any, env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` deterministic episodes, run as one batch of ``episodes`` sub-envs (seeds ``seed + i``).

    ``policy.act_deterministic(obs)`` maps a batch of observations to actions; box actions are clipped to the
    action space.
    """
    if episodes <= 0:
        return []
    env = make_vec_env(env_id, episodes)
    try:
        obs = env.reset(seed=seed)
        returns = np.zeros(episodes)
        running = np.ones(episodes, dtype=bool)
        spec = env.action_spec
        while running.any():
            actions = policy.act_deterministic(obs)
            if spec.kind == "box":
                actions = np.clip(actions, spec.low, spec.high)
            result = env.step(actions)
            returns += result.reward * running
            running &= ~(result.terminated | result.truncated)
            obs = result.obs
        return returns.tolist()
    finally:
        env.close()


def check_env(env_id: str) -> None:
    """Fail early, with suggestions, on an env id gymnasium does not know or spaces rlbench cannot drive.

    Raises:
        UsageError: Naming the id and what is wrong with it.
    """
    if env_id == "CartPole-v1":
        return
    try:
        make_vec_env(env_id, 1).close()
    except ValueError as exc:
        raise UsageError(f"--env: {exc}") from None
    except Exception as exc:  # the env's own package is missing or broken (Box2D, MuJoCo, a module:Id that fails)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(
            f"--env {env_id}: gymnasium could not create it ({type(exc).__name__}: {reason}); install the package that "
            "provides it, or choose another id"
        ) from None

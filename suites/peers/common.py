"""What every peer implementation takes and returns, so ``rlbench run peers`` runs them all alike.

A peer is another library's PPO or SAC (Stable-Baselines3, rlox, TorchRL) or rlbench's own, driven with the setting
of rlbench's built-in benchmark (``ppo-cartpole`` / ``sac-pendulum``): same hyperparameters, agent steps, torch
threads and evaluation. A peer module exposes ``version() -> str | None`` (``None``: not installed), and
``run_ppo(setting)`` / ``run_sac(setting)`` returning a :class:`PeerRun`.

Fairness rules every peer follows:

- ``env_steps`` counts the agent steps actually taken (a library that rounds the budget to whole rollouts says so);
- construction (envs, networks, optimizers) is timed apart from training (``init_s`` vs ``train_s``);
- ``torch.set_num_threads(setting.threads)`` before anything is built;
- evaluation is the same for everyone: :func:`evaluate` runs ``setting.eval_episodes`` deterministic episodes of
  the gymnasium env with the seeds rlbench's own runs use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EVAL_SEED_OFFSET = 10_000  #: evaluation episodes use seeds ``seed + 10_000 + i``, as rlbench's own runs


@dataclass(frozen=True)
class PeerSetting:
    """One training run's setting, shared by every implementation.

    Attributes:
        algo: ``ppo`` or ``sac``.
        env: Gymnasium env id.
        total_steps: Agent steps (env transitions summed over envs) to train for.
        seed: Random seed.
        threads: torch intra-op threads.
        eval_episodes: Deterministic evaluation episodes after training.
        hp: The built-in config's hyperparameters (``PPOConfig`` / ``SACConfig`` field names: ``num_envs``,
            ``rollout_steps``, ``epochs``, ``minibatches``, ``hidden``, ``lr``, ``gamma``, ``gae_lambda``, ...).
        device: torch device of the update (``cpu`` unless a peer supports more).
    """

    algo: str
    env: str
    total_steps: int
    seed: int
    threads: int
    eval_episodes: int
    hp: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"


@dataclass
class PeerRun:
    """What one implementation measured in one run.

    Attributes:
        library: Name and version (``"rlox 1.2.0"``).
        env_steps: Agent steps actually taken.
        init_s: Building envs, networks and optimizers.
        train_s: Training wall time.
        eval_s: The deterministic evaluation.
        eval_returns: One return per evaluation episode.
        episode_returns: Returns of the training episodes that finished, in order (may be empty when the library
            does not expose them).
        episode_end_steps: Agent step at which each of those ended.
        episode_end_s: Seconds into training at which each ended.
        notes: Where the run departs from the setting, in one line each.
        phase_s: Seconds per phase of training (``/``-nested names, parents inclusive), when the run measured them:
            rlbench's own timers, or the automatic attribution of a profiled pass (:func:`training`).
        phase_layers: Layer of each of those phases (environment, inference, update, ...).
    """

    library: str
    env_steps: int
    init_s: float
    train_s: float
    eval_s: float
    eval_returns: list[float]
    episode_returns: list[float] = field(default_factory=list)
    episode_end_steps: list[int] = field(default_factory=list)
    episode_end_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=dict)
    phase_layers: dict[str, str] = field(default_factory=dict)


_training_span: Callable[[], Any] | None = None


@contextmanager
def training() -> Iterator[None]:
    """Wrap a peer's training call: in a profiled pass (:func:`profiled`) the automatic attribution runs inside."""
    if _training_span is None:
        yield
        return
    with _training_span():
        yield


@contextmanager
def profiled(span: Callable[[], Any]) -> Iterator[None]:
    """Run peers with ``span()`` (a context manager) around their training call, e.g. an rlbench profiling session."""
    global _training_span
    _training_span = span
    try:
        yield
    finally:
        _training_span = None


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (e.g. ``stable-baselines3``), or ``None``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def start(setting: PeerSetting, cpu_only: bool = True) -> list[str]:
    """What every peer does before building anything: set the torch threads, import ``torch._dynamo`` (torch does on
    the first optimizer built, 1.5–3 s, which would land in whichever peer's ``init_s`` came first), and note a
    device the peer does not honour.

    Returns:
        The run's notes so far.
    """
    import torch
    import torch._dynamo

    torch.set_num_threads(setting.threads)
    return [f"ran on cpu, not {setting.device}"] if cpu_only and setting.device != "cpu" else []


def evaluate(act: Callable[[np.ndarray], Any], setting: PeerSetting) -> tuple[list[float], float]:
    """Deterministic evaluation shared by all peers: ``act`` maps a batch of observations to actions.

    Returns:
        The episode returns and the seconds the evaluation took.
    """
    from rlbench.algos.scaffold import evaluate_policy

    class _Policy:
        def act_deterministic(self, obs: np.ndarray) -> Any:
            return act(obs)

    t0 = time.perf_counter()
    returns = evaluate_policy(_Policy(), setting.env, setting.eval_episodes, setting.seed + EVAL_SEED_OFFSET)
    return [float(r) for r in returns], time.perf_counter() - t0


class EpisodeLog:
    """Collects finished training episodes (return, agent step, seconds into training) as a library reports them."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.returns: list[float] = []
        self.steps: list[int] = []
        self.seconds: list[float] = []

    def start(self) -> None:
        """Mark the start of training (seconds are counted from here)."""
        self.t0 = time.perf_counter()

    def add(self, ret: float, step: int) -> None:
        """One finished episode with return ``ret`` that ended at agent step ``step``."""
        self.returns.append(float(ret))
        self.steps.append(int(step))
        self.seconds.append(time.perf_counter() - self.t0)

    def fill(self, run: PeerRun) -> PeerRun:
        """Copy the log into ``run`` and return it."""
        run.episode_returns, run.episode_end_steps, run.episode_end_s = self.returns, self.steps, self.seconds
        return run

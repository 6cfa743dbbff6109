"""SAC and DDPG composed from rlbench components, instrumented phase by phase.

Phases: ``init`` (envs, buffer, networks, optimizers), ``warmup`` (the random warm-up frames plus the first
gradient update, which carries one-time costs such as ``torch.compile``), then steady state: ``collect``
(``collect/policy``, ``collect/env``, ``collect/store``) and ``update`` (``update/sample``, ``update/target``,
``update/critic``, ``update/actor``, ``update/alpha`` for SAC, ``update/polyak``, ``update/priorities`` with
prioritized replay). Steps are agent steps (env transitions summed over envs). ``updates_per_step`` gradient
updates are made per agent step once ``learning_starts`` steps are stored (SB3's ``train_freq=1`` with
``gradient_steps`` = N envs x ratio).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlbench.algos.offpolicy.config import DDPGConfig, OffPolicyConfig, SACConfig
from rlbench.algos.scaffold import TrainingSession
from rlbench.components.collect.exploration import NOISES
from rlbench.components.collect.steps import AsyncOffPolicyCollector, OffPolicyCollector
from rlbench.components.envs import make_vec_env
from rlbench.components.nets.actors import ActorPolicy, DeterministicActor, NumpyActor, SquashedGaussianActor
from rlbench.components.nets.critics import make_critic
from rlbench.components.offpolicy.ddpg import DDPGUpdate
from rlbench.components.offpolicy.sac import SACUpdate
from rlbench.components.replay import PrioritizedReplayBuffer, TrajectoryReplayBuffer, UniformReplayBuffer
from rlbench.core.errors import UsageError
from rlbench.instrument.callbacks import Callback, IterationInfo
from rlbench.instrument.timers import PhaseTimer
from rlbench.results.metrics import PhaseLayers, TrainingResult

PHASES: PhaseLayers = {
    "collect": "other",  # self time: episode bookkeeping
    "collect/policy": "inference",
    "collect/env": "environment",
    "collect/store": "replay",
    "update": "update",
    "update/sample": "replay",
    "update/target": "update",
    "update/critic": "update",
    "update/actor": "update",
    "update/alpha": "update",
    "update/polyak": "update",
    "update/priorities": "replay",
}
"""Steady-state phases of an off-policy run and their layers, parents before children."""


@dataclass
class OffPolicyParts:
    """The components of one run, wired together (see :func:`build_offpolicy`)."""

    env: Any
    buffer: Any
    actor: torch.nn.Module
    critic: torch.nn.Module
    updater: Any
    policy: Any
    collector: Any  # OffPolicyCollector, or AsyncOffPolicyCollector with --collector async


def build_offpolicy(config: OffPolicyConfig, device: torch.device, timer: PhaseTimer) -> OffPolicyParts:
    """Seed, then build env, buffer, networks, update and collector as ``config`` says (envs reset)."""
    torch.manual_seed(config.seed)
    env = make_vec_env(config.env, config.num_envs if config.collector == "sync" else 1)  # async: workers own envs
    spec = env.action_spec
    if spec.kind != "box":
        env.close()
        raise UsageError(f"{config.env} has {spec.kind} actions; SAC and DDPG here need a continuous (Box) action space")
    obs_dim, act_dim = int(np.prod(env.obs_shape)), int(np.prod(spec.shape))
    hidden = tuple(config.hidden)
    kind = "sac" if isinstance(config, SACConfig) else "ddpg"
    if kind == "sac":
        actor: torch.nn.Module = SquashedGaussianActor(obs_dim, act_dim, hidden, spec.low, spec.high)
    else:
        actor = DeterministicActor(obs_dim, act_dim, hidden, spec.low, spec.high)
    critic = make_critic(config.critics, obs_dim, act_dim, hidden, 2 if kind == "sac" else 1)
    actor, critic = actor.to(device), critic.to(device)
    hp = config.hyperparams()
    if kind == "sac":
        gen = torch.Generator(device).manual_seed(config.seed)
        updater: Any = SACUpdate(actor, critic, hp, timer, gen, compile=config.compile)
    else:
        updater = DDPGUpdate(actor, critic, hp, timer, compile=config.compile)
    cap = min(config.buffer_size, config.total_steps)  # never more rows than the run writes
    shapes = (cap, env.obs_shape, tuple(spec.shape))
    if config.td_lambda > 0:
        buffer: Any = TrajectoryReplayBuffer(*shapes, seed=config.seed)
    elif config.prioritized:
        buffer = PrioritizedReplayBuffer(*shapes, seed=config.seed)
    else:
        buffer = UniformReplayBuffer(*shapes, seed=config.seed)
    policy: Any = NumpyActor(actor, config.seed + 7_919) if device.type == "cpu" else ActorPolicy(actor, device, config.seed)
    noise = None
    if isinstance(config, DDPGConfig):
        noise = NOISES[config.noise](
            config.num_envs, spec.low, spec.high, config.sigma_init, config.sigma_end, config.anneal_steps, config.seed + 1
        )
    if config.collector == "async":
        env.close()  # the workers own their envs
        collector: Any = AsyncOffPolicyCollector(
            config.env, config.num_envs, buffer, policy, config.transport, spec.low, spec.high, timer, noise, seed=config.seed
        )
    else:
        collector = OffPolicyCollector(env, buffer, policy, timer, noise, seed=config.seed)
    collector.reset(config.seed)
    return OffPolicyParts(env, buffer, actor, critic, updater, policy, collector)


def sample_batch(buffer: Any, config: OffPolicyConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """One training batch as tensors on ``device``: rows, or crops ``(S, L)`` with TD(lambda)."""
    if config.td_lambda > 0:
        crops = buffer.sample_slices(config.batch_size // config.slice_len, config.slice_len)
        keys = ("obs", "action", "reward", "next_obs", "done")
        return {k: torch.from_numpy(np.ascontiguousarray(crops[k])).to(device) for k in keys}
    batch = buffer.sample_torch(config.batch_size)
    if device.type != "cpu":
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    return batch


@dataclass
class OffPolicyResult(TrainingResult):
    """What an off-policy run measured: the common training result plus its gradient updates."""

    updates: int = 0
    first_update_s: float = math.nan
    precision: str = "fp32"  # the update's matrix products as they ran: "fp32" or "bf16" (``--precision auto`` resolved)


def train_offpolicy(
    config: OffPolicyConfig, device: torch.device | None = None, callback: Callback | None = None, label: str = ""
) -> OffPolicyResult:
    """Train SAC or DDPG (by the config's type) and return what was measured.

    Args:
        config: Hyperparameters and run settings (:class:`SACConfig` or :class:`DDPGConfig`).
        device: Resolved torch device for the update.
        callback: Called at train start, after every ``log_every`` steps and at the end.
        label: Shown by progress callbacks (e.g. the what-if variant).

    Returns:
        The measurements; ``completed`` is False when a callback stopped training early.
    """
    session = TrainingSession.start(config.threads, device, callback)
    device, timer, cb = session.device, session.timer, session.callback
    now = timer.now
    t_init = now()
    parts = build_offpolicy(config, device, timer)
    init_s = now() - t_init
    collector, updater, buffer = parts.collector, parts.updater, parts.buffer
    n = config.num_envs
    vec_steps = max(1, math.ceil(config.total_steps / n))
    chunk = max(1, config.log_every // n)
    cb.on_train_start(
        {"config": config, "iterations": math.ceil(vec_steps / chunk), "steps_per_iteration": chunk * n, "label": label}
    )
    iterations: list[IterationInfo] = []
    owed, warmup_s, first_update_s, steady_steps = 0.0, 0.0, math.nan, 0
    in_warmup, completed = True, True
    diag: dict[str, torch.Tensor] = {}
    t_train = now()
    before = dict(timer.seconds)
    try:
        for step in range(vec_steps):
            learning = collector.env_steps >= config.learning_starts
            with timer.phase("collect"):
                collector.step(random=not learning)
            if learning:
                owed += config.updates_per_step * n
                while owed >= 1.0:
                    owed -= 1.0
                    t_up = now()
                    with timer.phase("update"):
                        with timer.phase("update/sample"):
                            batch = sample_batch(buffer, config, device)
                        diag = updater.update(batch)
                        if config.prioritized:
                            with timer.phase("update/priorities"):
                                buffer.update_priorities(batch["indices"], diag["td_abs"].cpu())
                    if in_warmup:  # random frames + the first update (allocations, compilation) end here
                        first_update_s = now() - t_up
                        warmup_s = now() - t_train
                        session.end_warmup(warmup_s)
                        before, in_warmup = {}, False
                        steady_steps -= (step + 1) * n  # counted back below: steady steps start after this one
            if (step + 1) % chunk == 0 or step == vec_steps - 1:
                phase_s = {k: timer.seconds.get(k, 0.0) - before.get(k, 0.0) for k in PHASES if k in timer.seconds}
                before = dict(timer.seconds)
                recent = collector.episodes.returns[-10:]
                info = IterationInfo(
                    len(iterations),
                    collector.env_steps,
                    vec_steps * n,
                    now() - t_train,
                    phase_s,
                    {k: float(v) for k, v in diag.items() if v.dim() == 0},
                    float(np.mean(recent)) if recent else math.nan,
                )
                iterations.append(info)
                if cb.on_iteration_end(info) is False:
                    completed = False
                    break
        train_s = now() - t_train
        if in_warmup:  # no update happened: the whole run was warm-up
            warmup_s = train_s
        else:
            steady_steps += collector.env_steps
        eval_returns, eval_s = session.evaluate(parts.policy, config.env, config.eval_episodes, config.seed + 10_000)
    finally:
        parts.env.close()
        if hasattr(collector, "close"):
            collector.close()
    result = OffPolicyResult(
        config=config,
        device=str(device),
        env_steps=collector.env_steps,
        updates=updater.updates,
        precision=updater.precision,
        init_s=init_s,
        warmup_s=warmup_s,
        first_update_s=first_update_s,
        train_s=train_s,
        eval_s=eval_s,
        phase_s=dict(timer.seconds),
        phase_events=dict(timer.counts),
        context_events=timer.context_events,
        phase_layers=PHASES,
        iterations=iterations,
        eval_returns=eval_returns,
        episode_returns=list(collector.episodes.returns),
        episode_end_steps=list(collector.episodes.end_steps),
        synchronized=timer.synchronized,
        steady_steps=steady_steps,
        steady_s=train_s - warmup_s,
        completed=completed,
    )
    cb.on_train_end({"result": result})
    return result

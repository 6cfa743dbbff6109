"""PPO composed from rlbench components, instrumented phase by phase.

Phases (seconds and event counts in the run's :class:`~rlbench.instrument.timers.PhaseTimer`):
``init`` (envs, networks, optimizer), ``warmup`` (the first iteration, with its one-time costs),
then steady state: ``collect`` (``collect/policy``, ``collect/env``), ``advantage``, ``update``
(``update/prepare``, ``update/forward``, ``update/backward``, ``update/optimizer``); ``eval`` after
training. Steps are agent steps (env transitions summed over the vectorized envs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlbench.algos.ppo.config import PPOConfig
from rlbench.algos.scaffold import TrainingSession
from rlbench.components.collect.rollout import OnPolicyCollector
from rlbench.components.envs import make_vec_env
from rlbench.components.nets.actor_critic import ActorCritic, FusedActorCritic
from rlbench.components.nets.policies import POLICY_BACKENDS
from rlbench.components.optim.adam import LeanAdam, flatten_parameters
from rlbench.components.ppo import manual as ppo_manual
from rlbench.components.ppo.update import PPOHyperparams, PPOUpdate
from rlbench.core.errors import UsageError
from rlbench.instrument.callbacks import Callback, IterationInfo
from rlbench.instrument.timers import PhaseTimer
from rlbench.results.metrics import WARMUP, PhaseLayers, TrainingResult

PHASES: PhaseLayers = {
    "collect": "other",  # self time: storage copies and episode bookkeeping
    "collect/policy": "inference",
    "collect/env": "environment",
    "advantage": "advantage",
    "update": "update",
    "update/prepare": "update",
    "update/forward": "update",
    "update/backward": "update",
    "update/optimizer": "update",
}
"""Steady-state phases of a PPO iteration and their layers, parents before children."""


@dataclass
class PPOParts:
    """The components of one PPO run, wired together (see :func:`build_ppo`)."""

    env: Any
    model: ActorCritic | FusedActorCritic
    optimizer: Any
    policy: Any
    collector: Any  # OnPolicyCollector, or AsyncOnPolicyCollector with --collector async
    updater: PPOUpdate


def build_ppo(config: PPOConfig, device: torch.device, timer: PhaseTimer) -> PPOParts:
    """Seed, then build env, network, optimizer, inference, collector and update as ``config`` says (envs reset)."""
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    env = make_vec_env(config.env, config.num_envs if config.collector == "sync" else 1)  # async: workers own envs
    spec = env.action_spec
    model: ActorCritic | FusedActorCritic = ActorCritic(
        int(np.prod(env.obs_shape)), spec, tuple(config.hidden), config.activation, config.init
    )
    if config.network == "fused":
        model = FusedActorCritic(model)
    model = model.to(device)
    if config.gradients == "manual" and not ppo_manual.supports(model):
        env.close()
        raise UsageError(f"--gradients manual supports discrete actions only ({config.env} has {spec.kind} actions)")
    optimizer = make_adam(model, config, device)
    backend = config.inference if config.inference != "auto" else ("numpy" if device.type == "cpu" else "torch")
    policy = POLICY_BACKENDS[backend](model, seed=config.seed)
    if config.collector == "async":
        from rlbench.components.collect.async_rollout import AsyncOnPolicyCollector

        collector: Any = AsyncOnPolicyCollector(
            config.env,
            config.num_envs,
            policy,
            config.rollout_steps,
            config.gamma,
            config.transport,
            timer,
            spec.low,
            spec.high,
        )
    else:
        collector = OnPolicyCollector(env, policy, config.rollout_steps, config.gamma, timer, spec.low, spec.high)
    hp = PPOHyperparams(
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        epochs=config.epochs,
        minibatches=config.minibatches,
        clip_coef=config.clip_coef,
        vf_coef=config.vf_coef,
        ent_coef=config.ent_coef,
        max_grad_norm=config.max_grad_norm,
        normalize_advantages=config.normalize_advantages,
        recompute_advantages=config.recompute_advantages,
        gradients=config.gradients,
    )
    updater = PPOUpdate(model, optimizer, hp, rng, timer)
    collector.reset(config.seed)
    return PPOParts(env, model, optimizer, policy, collector, updater)


def count_iteration_ops(
    config: PPOConfig, device: torch.device, state: dict[str, Any] | None = None
) -> dict[str, dict[str, int]]:
    """Torch ops, syncs and cross-device copies of one PPO iteration, per phase (an extra, untimed iteration).

    Builds fresh, seeded components (loading ``state``, a trained model's ``state_dict``, when given)
    and runs one rollout, advantage and update under :class:`~rlbench.instrument.counters.OpCounter`.
    The counts depend only on the code path, never on timing: identical run to run for a config.

    Returns:
        ``{"ops": {phase: n}, "syncs": {...}, "copies": {...}}`` with phases ``collect``, ``advantage``,
        ``update`` and ``iteration`` (their sum).
    """
    from rlbench.instrument.counters import OpCounter
    from rlbench.instrument.timers import NullTimer

    parts = build_ppo(config, device, NullTimer())
    try:
        if state is not None:
            parts.model.load_state_dict(state)
            parts.policy.load(parts.model)
        with OpCounter() as counter:
            counter.phase = "collect"
            storage = parts.collector.collect()
            counter.phase = "advantage"
            parts.updater.advantages(storage)
            counter.phase = "update"
            parts.updater.update(storage)
    finally:
        parts.env.close()
        if hasattr(parts.collector, "close"):
            parts.collector.close()
    out: dict[str, dict[str, int]] = {}
    for kind in ("ops", "syncs", "copies"):
        counts = getattr(counter, kind)
        per = {phase: int(counts.get(phase, 0)) for phase in ("collect", "advantage", "update")}
        per["iteration"] = sum(per.values())
        out[kind] = per
    return out


@dataclass
class PPOResult(TrainingResult):
    """What a PPO run measured: the common training result plus the return threshold it tracked."""

    steps_to_threshold: int | None = None
    time_to_threshold_s: float | None = None
    threshold: float | None = None


def _threshold(config: PPOConfig) -> float | None:
    if not math.isnan(config.return_threshold):
        return config.return_threshold
    if config.env == "CartPole-v1":
        return 475.0
    try:
        import gymnasium

        return gymnasium.spec(config.env).reward_threshold
    except Exception:
        return None


def train_ppo(config: PPOConfig, device: torch.device | None = None, callback: Callback | None = None) -> PPOResult:
    """Train PPO as configured and return what was measured.

    Args:
        config: Hyperparameters and run settings.
        device: Resolved torch device for the update (``config.device`` is resolved by the caller).
        callback: Called at train start, after every iteration and at the end.

    Returns:
        The measurements; ``completed`` is False when a callback stopped training early.
    """
    session = TrainingSession.start(config.threads, device, callback)
    device, timer, cb = session.device, session.timer, session.callback
    now = timer.now

    t_init = now()
    parts = build_ppo(config, device, timer)
    env, model, policy, collector, updater = parts.env, parts.model, parts.policy, parts.collector, parts.updater
    init_s = now() - t_init

    threshold = _threshold(config)
    steps_per_iter = config.num_envs * config.rollout_steps
    n_iters = max(1, math.ceil(config.total_steps / steps_per_iter))  # like SB3: at least total_steps
    cb.on_train_start({"config": config, "iterations": n_iters, "steps_per_iteration": steps_per_iter})
    iterations: list[IterationInfo] = []
    steps_to_threshold = time_to_threshold = None
    warmup_s = 0.0
    completed = True
    t_train = now()
    try:
        for it in range(n_iters):
            before = dict(timer.seconds)
            t_iter = now()
            storage = collector.collect()
            with timer.phase("advantage"):
                updater.advantages(storage)
            diagnostics = updater.update(storage)
            policy.load(model)
            t_done = now()
            if it == 0:
                warmup_s = t_done - t_iter
                session.end_warmup(warmup_s)
                phase_s = {WARMUP: warmup_s}
            else:
                phase_s = {k: timer.seconds.get(k, 0.0) - before.get(k, 0.0) for k in PHASES}
            recent = collector.episodes.returns[-10:]
            recent_return = float(np.mean(recent)) if recent else math.nan
            elapsed = t_done - t_train
            if steps_to_threshold is None and threshold is not None and len(recent) >= 10 and recent_return >= threshold:
                steps_to_threshold, time_to_threshold = collector.env_steps, elapsed
            info = IterationInfo(
                it, collector.env_steps, n_iters * steps_per_iter, elapsed, phase_s, diagnostics, recent_return
            )
            iterations.append(info)
            if cb.on_iteration_end(info) is False:
                completed = False
                break
        train_s = now() - t_train
        eval_returns, eval_s = session.evaluate(policy, config.env, config.eval_episodes, config.seed + 10_000)
    finally:
        env.close()
        if hasattr(collector, "close"):
            collector.close()
    steady = iterations[1:]
    result = PPOResult(
        config=config,
        device=str(device),
        env_steps=collector.env_steps,
        init_s=init_s,
        warmup_s=warmup_s,
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
        steady_steps=steps_per_iter * len(steady),
        steady_s=sum(
            it.phase_s.get("collect", 0.0) + it.phase_s.get("advantage", 0.0) + it.phase_s.get("update", 0.0) for it in steady
        ),
        synchronized=timer.synchronized,
        completed=completed,
        steps_to_threshold=steps_to_threshold,
        time_to_threshold_s=time_to_threshold,
        threshold=threshold,
    )
    cb.on_train_end({"result": result})
    return result


def make_adam(model: torch.nn.Module, config: PPOConfig, device: torch.device) -> Any:
    """The configured Adam: :class:`LeanAdam`, or ``torch.optim.Adam`` (fused on CPU/CUDA, else foreach).

    With hand-written gradients (which are written in place), :class:`LeanAdam` runs on one flat copy
    of all parameters (:func:`flatten_parameters`): one norm to clip, one fused Adam call per step.
    """
    if config.optimizer == "lean":
        params = list(model.parameters())
        if config.gradients != "autograd" and ppo_manual.supports(model):
            params = [flatten_parameters(params)]
        return LeanAdam(params, lr=config.lr, eps=config.adam_eps)
    kind = {"fused": True} if device.type in ("cpu", "cuda") else {"foreach": True}
    return torch.optim.Adam(model.parameters(), lr=config.lr, eps=config.adam_eps, **kind)

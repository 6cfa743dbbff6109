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

from rlbench.components import ppo_manual
from rlbench.components.collectors import OnPolicyCollector
from rlbench.components.envs import make_vec_env
from rlbench.components.networks import ActorCritic, FusedActorCritic
from rlbench.components.optim import LeanAdam, flatten_parameters
from rlbench.components.policies import POLICY_BACKENDS
from rlbench.components.ppo import PPOHyperparams, PPOUpdate
from rlbench.errors import UsageError
from rlbench.instrument.callbacks import Callback, CallbackList, IterationInfo
from rlbench.instrument.sync import device_sync
from rlbench.instrument.timers import PhaseTimer
from rlbench.options import option

STEADY_PHASES = (
    "collect",
    "collect/policy",
    "collect/env",
    "advantage",
    "update",
    "update/prepare",
    "update/forward",
    "update/backward",
    "update/optimizer",
)


@dataclass
class PPOConfig:
    """PPO on a discrete- or continuous-action gymnasium env (defaults: the rlox report's CartPole setting)."""

    env: str = option("gymnasium env id; CartPole-v1 runs on rlbench's batched NumPy CartPole", default="CartPole-v1")
    total_steps: int = option("agent steps (env transitions summed over envs) to train for", default=50_000)
    num_envs: int = option("environments stepped together", default=8)
    rollout_steps: int = option("steps per env per rollout (T)", default=128)
    epochs: int = option("passes over each rollout", default=4)
    minibatches: int = option("minibatches per epoch", default=2)
    hidden: tuple[int, ...] = option("hidden layer sizes of actor and critic", default=(64, 64))
    activation: str = option("hidden activation: tanh or relu", default="tanh")
    network: str = option(
        "actor-critic layout: fused (stacked weights, one batched matmul per depth) or separate", default="fused"
    )
    init: str = option("weight init: orthogonal (SB3/CleanRL) or torch (PyTorch default)", default="orthogonal")
    lr: float = option("Adam learning rate", default=2.5e-4)
    adam_eps: float = option("Adam epsilon", default=1e-5)
    gamma: float = option("discount factor", default=0.99)
    gae_lambda: float = option("GAE lambda", default=0.95)
    clip_coef: float = option("PPO clipping range epsilon", default=0.2)
    vf_coef: float = option("value-loss weight", default=0.5)
    ent_coef: float = option("entropy-bonus weight", default=0.0)
    max_grad_norm: float = option("gradient-norm clipping threshold", default=0.5)
    normalize_advantages: bool = option("standardize advantages per minibatch", default=True)
    recompute_advantages: bool = option("recompute values and GAE before every epoch (TorchRL style)", default=False)
    seed: int = option("random seed (envs, networks, sampling)", default=0)
    device: str = option("torch device for the update: auto, cpu, cuda[:N] or mps", default="auto")
    inference: str = option("rollout inference: auto (numpy on cpu, torch elsewhere), numpy or torch", default="auto")
    gradients: str = option(
        "auto (hand-written PPO gradients where supported: fused network, discrete actions), manual or autograd",
        default="auto",
    )
    optimizer: str = option(
        "Adam implementation: lean (rlbench's, same math, no torch.optim overhead) or torch", default="lean"
    )
    collector: str = option(
        "rollout collector: sync (one vectorized env, one policy call per step) or async (--num-envs env workers, "
        "actions from a batched inference server)",
        default="sync",
    )
    transport: str = option(
        "async collector's transport: slot (lock-free slots), lock (queue + futures), direct (no server) or "
        "multiprocess (env workers in processes)",
        default="slot",
    )
    threads: int = option("torch intra-op threads (1 is fastest for tiny MLPs on shared cores)", default=1)
    eval_episodes: int = option("deterministic evaluation episodes after training", default=10)
    return_threshold: float = option("return counted as solved (NaN: the env's reward_threshold)", default=math.nan)

    def validate(self) -> None:
        """Check values and their combinations.

        Raises:
            UsageError: Naming the offending parameter and the accepted range.
        """
        positive = ("total_steps", "num_envs", "rollout_steps", "epochs", "minibatches", "threads")
        for name in positive:
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.eval_episodes < 0:
            raise UsageError(f"--eval-episodes must be 0 or more, got {self.eval_episodes}")
        batch = self.num_envs * self.rollout_steps
        if self.total_steps < batch:
            raise UsageError(
                f"--total-steps {self.total_steps} is less than one rollout (num_envs x rollout_steps = {batch}); "
                f"use at least {batch}"
            )
        if self.minibatches > batch:
            raise UsageError(f"--minibatches {self.minibatches} exceeds the rollout size {batch}")
        for name in ("lr", "adam_eps", "max_grad_norm", "clip_coef"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UsageError(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(self, name)}")
        if self.activation not in ("tanh", "relu"):
            raise UsageError(f"--activation must be tanh or relu, got {self.activation!r}")
        if self.init not in ("torch", "orthogonal"):
            raise UsageError(f"--init must be torch or orthogonal, got {self.init!r}")
        if self.gradients not in ("auto", "manual", "autograd"):
            raise UsageError(f"--gradients must be auto, manual or autograd, got {self.gradients!r}")
        if self.gradients == "manual" and self.network != "fused":
            raise UsageError("--gradients manual needs --network fused; use auto or autograd")
        if self.network not in ("fused", "separate"):
            raise UsageError(f"--network must be fused or separate, got {self.network!r}")
        if self.optimizer not in ("lean", "torch"):
            raise UsageError(f"--optimizer must be lean or torch, got {self.optimizer!r}")
        if self.inference not in ("auto", "numpy", "torch"):
            raise UsageError(f"--inference must be auto, numpy or torch, got {self.inference!r}")
        if self.collector not in ("sync", "async"):
            raise UsageError(f"--collector must be sync or async, got {self.collector!r}")
        if self.transport not in ("slot", "lock", "direct", "multiprocess"):
            raise UsageError(f"--transport must be slot, lock, direct or multiprocess, got {self.transport!r}")


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
        from rlbench.components.inference.onpolicy import AsyncOnPolicyCollector

        collector: Any = AsyncOnPolicyCollector(config.env, config.num_envs, policy, config.rollout_steps, config.gamma,
                                                config.transport, timer, spec.low, spec.high)  # fmt: skip
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
class PPOResult:
    """What a PPO run measured (raw numbers; records are made from this)."""

    config: PPOConfig
    device: str
    env_steps: int
    init_s: float
    warmup_s: float
    train_s: float
    eval_s: float
    phase_s: dict[str, float]
    phase_events: dict[str, int]
    context_events: int
    iterations: list[IterationInfo]
    eval_returns: list[float]
    episode_returns: list[float]
    episode_end_steps: list[int]
    steps_to_threshold: int | None
    time_to_threshold_s: float | None
    threshold: float | None
    synchronized: bool
    completed: bool = True

    @property
    def sps(self) -> float:
        """Training agent steps per second (warm-up included)."""
        return self.env_steps / self.train_s if self.train_s > 0 else 0.0


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


def evaluate_policy(policy, env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` deterministic episodes, run as one batch of ``episodes`` sub-envs (seeds ``seed + i``)."""
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


def train_ppo(config: PPOConfig, device: torch.device | None = None, callback: Callback | None = None) -> PPOResult:
    """Train PPO as configured and return what was measured.

    Args:
        config: Hyperparameters and run settings.
        device: Resolved torch device for the update (``config.device`` is resolved by the caller).
        callback: Called at train start, after every iteration and at the end.

    Returns:
        The measurements; ``completed`` is False when a callback stopped training early.
    """
    device = device or torch.device("cpu")
    cb = callback if callback is not None else CallbackList()
    torch.set_num_threads(config.threads)
    timer = PhaseTimer(device_sync(device))
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
                timer.reset()
                timer.add("warmup", warmup_s, 1)
                phase_s = {"warmup": warmup_s}
            else:
                phase_s = {k: timer.seconds.get(k, 0.0) - before.get(k, 0.0) for k in STEADY_PHASES}
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
        t_eval = now()
        eval_returns = evaluate_policy(policy, config.env, config.eval_episodes, config.seed + 10_000)
        eval_s = now() - t_eval
    finally:
        env.close()
        if hasattr(collector, "close"):
            collector.close()
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
        iterations=iterations,
        eval_returns=eval_returns,
        episode_returns=list(collector.episodes.returns),
        episode_end_steps=list(collector.episodes.end_steps),
        steps_to_threshold=steps_to_threshold,
        time_to_threshold_s=time_to_threshold,
        threshold=threshold,
        synchronized=timer.synchronized,
        completed=completed,
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

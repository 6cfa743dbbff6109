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
from typing import Any, ClassVar

import numpy as np
import torch

from rlbench.components.buffers import PrioritizedReplayBuffer, TrajectoryReplayBuffer, UniformReplayBuffer
from rlbench.components.ddpg import DDPGUpdate
from rlbench.components.envs import make_vec_env
from rlbench.components.exploration import NOISES
from rlbench.components.offpolicy_collector import AsyncOffPolicyCollector, OffPolicyCollector
from rlbench.components.offpolicy_nets import DeterministicActor, NumpyActor, SquashedGaussianActor, make_critic
from rlbench.components.offpolicy_update import POLYAK, PRECISIONS, OffPolicyHyperparams
from rlbench.components.sac import SACHyperparams, SACUpdate
from rlbench.errors import UsageError
from rlbench.instrument.callbacks import Callback, CallbackList, IterationInfo
from rlbench.instrument.sync import device_sync
from rlbench.instrument.timers import PhaseTimer
from rlbench.options import option

STEADY_PHASES = (
    "collect",
    "collect/policy",
    "collect/env",
    "collect/store",
    "update",
    "update/sample",
    "update/target",
    "update/critic",
    "update/actor",
    "update/alpha",
    "update/polyak",
    "update/priorities",
)


@dataclass
class OffPolicyConfig:
    """Settings shared by SAC and DDPG (defaults: the rlox report's SAC Pendulum setting)."""

    env: str = option("gymnasium env id with continuous actions; Pendulum-v1 runs on rlbench's batched NumPy Pendulum",
                     default="Pendulum-v1")  # fmt: skip
    total_steps: int = option("agent steps (env transitions summed over envs) to train for", default=5_000)
    num_envs: int = option("environments stepped together by the collector", default=1)
    learning_starts: int = option("agent steps of uniform random actions before the first update", default=1_000)
    updates_per_step: float = option("gradient updates per agent step (update-to-data ratio)", default=1.0)
    batch_size: int = option("transitions per gradient update", default=256)
    buffer_size: int = option("replay capacity in transitions", default=1_000_000)
    hidden: tuple[int, ...] = option("hidden layer sizes of actor and critics (ReLU)", default=(256, 256))
    gamma: float = option("discount factor", default=0.99)
    tau: float = option("Polyak coefficient of the target networks", default=0.005)
    actor_lr: float = option("Adam learning rate of the actor", default=1e-3)
    critic_lr: float = option("Adam learning rate of the critics", default=1e-3)
    critics: str = option("critic layout: ensemble (stacked weights, one batched matmul per layer) or separate",
                         default="ensemble")  # fmt: skip
    polyak: str = option("target update: foreach (one torch._foreach_lerp_) or loop (per-tensor mul_/add_)", default="foreach")
    compile: bool = option("torch.compile the networks used by the update (compile time lands in warm-up)", default=False)
    gradients: str = option("auto (hand-written where supported: ensemble critics, fp32, no compile), manual or autograd",
                           default="auto")  # fmt: skip
    precision: str = option("fp32, or bf16: update forward passes under torch.autocast in bfloat16 (AMX / tensor cores); "
                           "weights, losses and Adam stay fp32", default="fp32")  # fmt: skip
    prioritized: bool = option("prioritized replay (sum tree, alpha 0.6, beta 0.4; priorities = |TD error|)", default=False)
    td_lambda: float = option("lambda of TD(lambda) targets over sampled sub-trajectories (0: one-step targets)", default=0.0)
    slice_len: int = option("steps per sampled sub-trajectory with --td-lambda (batch = batch_size // slice_len crops)",
                           default=8)  # fmt: skip
    collector: str = option("collection: sync (one vectorized env) or async (--num-envs env workers fed by a batched "
                           "inference server)", default="sync")  # fmt: skip
    transport: str = option("async collector's transport: slot, lock, direct or multiprocess", default="slot")
    threads: int = option(
        "torch intra-op threads (2: the 256-unit matmuls gain more than the thread handoffs cost; measured by the "
        "threads what-if in reports/sac-pendulum-whatif-cpu.md)",
        default=2,
    )
    seed: int = option("random seed (envs, networks, sampling)", default=0)
    device: str = option("torch device for the update: auto, cpu, cuda[:N] or mps", default="auto")
    eval_episodes: int = option("deterministic evaluation episodes after training", default=10)
    log_every: int = option("agent steps between progress updates and per-chunk timings", default=250)
    what_if: tuple[str, ...] = option(
        "variant to measure against this setting, as FIELD=VALUE (repeatable, e.g. polyak=loop, critics=separate, "
        "compile=true, num_envs=4, threads=1; 'all' for the standard set): every repeat runs the baseline and each "
        "variant, interleaved, and the report ranks them by their effect on SPS",
        default=(),
    )

    algo = "offpolicy"
    standard_what_ifs: ClassVar[tuple[str, ...]] = ()  # what `--what-if all` expands to

    def validate(self) -> None:
        """Check values and their combinations.

        Raises:
            UsageError: Naming the offending parameter and the accepted range.
        """
        for name in ("total_steps", "num_envs", "batch_size", "buffer_size", "threads", "slice_len", "log_every"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.learning_starts < 0 or self.eval_episodes < 0:
            raise UsageError("--learning-starts and --eval-episodes must be 0 or more")
        if not self.updates_per_step > 0:
            raise UsageError(f"--updates-per-step must be positive, got {self.updates_per_step}")
        for name in ("actor_lr", "critic_lr", "tau"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("gamma", "td_lambda", "tau"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UsageError(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(self, name)}")
        if self.critics not in ("ensemble", "separate"):
            raise UsageError(f"--critics must be ensemble or separate, got {self.critics!r}")
        if self.gradients not in ("auto", "manual", "autograd"):
            raise UsageError(f"--gradients must be auto, manual or autograd, got {self.gradients!r}")
        if self.gradients == "manual" and (self.critics != "ensemble" or self.precision != "fp32" or self.compile):
            raise UsageError("--gradients manual needs --critics ensemble, --precision fp32 and no --compile")
        if self.precision not in PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.polyak not in POLYAK:
            raise UsageError(f"--polyak must be one of {', '.join(sorted(POLYAK))}, got {self.polyak!r}")
        if self.td_lambda > 0 and self.prioritized:
            raise UsageError("--td-lambda samples sub-trajectories and --prioritized single rows: choose one")
        if self.collector not in ("sync", "async"):
            raise UsageError(f"--collector must be sync or async, got {self.collector!r}")
        if self.transport not in ("slot", "lock", "direct", "multiprocess"):
            raise UsageError(f"--transport must be slot, lock, direct or multiprocess, got {self.transport!r}")
        if self.collector == "async" and self.td_lambda > 0:
            raise UsageError("--td-lambda needs --collector sync (episode crops are stored one env at a time)")
        if self.td_lambda > 0 and self.num_envs != 1:
            raise UsageError("--td-lambda needs --num-envs 1 (sub-trajectories are stored one env at a time)")
        if self.td_lambda > 0 and self.batch_size < self.slice_len:
            raise UsageError(f"--batch-size {self.batch_size} is smaller than --slice-len {self.slice_len}")
        if self.buffer_size < self.batch_size:
            raise UsageError(f"--buffer-size {self.buffer_size} is smaller than --batch-size {self.batch_size}")
        if self.what_if:
            from rlbench.variants import variant_configs

            variant_configs(self)  # parses and validates every variant now, before anything runs

    def hyperparams(self) -> OffPolicyHyperparams:
        """The update's hyperparameters."""
        return OffPolicyHyperparams(
            self.gamma, self.tau, self.actor_lr, self.critic_lr, self.polyak, self.td_lambda, self.precision, self.gradients
        )


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC (twin Q, automatic entropy tuning) on a continuous-action env."""

    alpha_lr: float = option("Adam learning rate of the entropy temperature", default=1e-3)
    init_alpha: float = option("initial entropy temperature alpha", default=1.0)
    autotune: bool = option("tune alpha towards the target entropy -dim(A) (else keep init_alpha)", default=True)

    algo = "sac"
    standard_what_ifs = ("gradients=autograd", "polyak=loop", "critics=separate", "num_envs=4", "threads=1", "precision=bf16",
                         "compile=true")  # fmt: skip

    def hyperparams(self) -> SACHyperparams:
        """The update's hyperparameters."""
        base = super().hyperparams()
        return SACHyperparams(**vars(base), alpha_lr=self.alpha_lr, init_alpha=self.init_alpha, autotune=self.autotune)


@dataclass
class DDPGConfig(OffPolicyConfig):
    """DDPG (deterministic actor, one Q network, annealed exploration noise) on a continuous-action env."""

    noise: str = option("exploration noise: gaussian or ou (Ornstein-Uhlenbeck)", default="gaussian")
    sigma_init: float = option("exploration noise scale at the start (fraction of the action half-range)", default=0.2)
    sigma_end: float = option("noise scale after --anneal-steps", default=0.05)
    anneal_steps: int = option("agent steps over which the noise scale anneals linearly", default=10_000)

    algo = "ddpg"
    standard_what_ifs = ("gradients=autograd", "polyak=loop", "num_envs=4", "threads=1", "precision=bf16", "compile=true")

    def validate(self) -> None:
        """Check values (as :meth:`OffPolicyConfig.validate`, plus the noise settings).

        Raises:
            UsageError: Naming the offending parameter.
        """
        super().validate()
        if self.noise not in NOISES:
            raise UsageError(f"--noise must be one of {', '.join(NOISES)}, got {self.noise!r}")
        if self.collector == "async" and self.noise == "ou":
            raise UsageError("--noise ou keeps one process per env; with --collector async use --noise gaussian")
        if self.sigma_init < 0 or self.sigma_end < 0 or self.anneal_steps < 0:
            raise UsageError("--sigma-init, --sigma-end and --anneal-steps must be 0 or more")


class ActorPolicy:
    """Acting with an actor network from NumPy observations (one row per env), under ``torch.inference_mode``.

    Used off the CPU; on the CPU, :class:`~rlbench.components.offpolicy_nets.NumpyActor` acts on weight views.

    Args:
        actor: A :class:`SquashedGaussianActor` (sampled actions) or :class:`DeterministicActor`.
        device: Device the actor lives on.
        seed: Seed of the sampling noise (SAC).
    """

    def __init__(self, actor: torch.nn.Module, device: torch.device, seed: int) -> None:
        self.actor, self.device = actor, device
        self.stochastic = isinstance(actor, SquashedGaussianActor)
        self.generator = torch.Generator(device).manual_seed(seed + 7_919)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Actions to explore with: a sample (SAC) or the deterministic action (DDPG adds noise itself)."""
        with torch.inference_mode():
            x = torch.from_numpy(obs).to(self.device)
            if self.stochastic:
                noise = torch.randn((x.shape[0], self.actor.act_dim), generator=self.generator, device=self.device)
                a = self.actor(x, noise)[0]
            else:
                a = self.actor(x)
            return a.cpu().numpy()

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The policy's deterministic action (evaluation)."""
        with torch.inference_mode():
            return self.actor.deterministic(torch.from_numpy(np.asarray(obs, np.float32)).to(self.device)).cpu().numpy()


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
        collector: Any = AsyncOffPolicyCollector(config.env, config.num_envs, buffer, policy, config.transport, spec.low,
                                                 spec.high, timer, noise, seed=config.seed)  # fmt: skip
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
class OffPolicyResult:
    """What an off-policy run measured (raw numbers; records are made from this)."""

    config: OffPolicyConfig
    device: str
    env_steps: int
    updates: int
    init_s: float
    warmup_s: float
    first_update_s: float
    train_s: float
    eval_s: float
    phase_s: dict[str, float]
    phase_events: dict[str, int]
    context_events: int
    iterations: list[IterationInfo]
    eval_returns: list[float]
    episode_returns: list[float]
    episode_end_steps: list[int]
    synchronized: bool
    steady_steps: int = 0
    completed: bool = True

    @property
    def sps(self) -> float:
        """Training agent steps per second (warm-up included)."""
        return self.env_steps / self.train_s if self.train_s > 0 else 0.0


def train_offpolicy(config: OffPolicyConfig, device: torch.device | None = None, callback: Callback | None = None,
                    label: str = "") -> OffPolicyResult:  # fmt: skip
    """Train SAC or DDPG (by the config's type) and return what was measured.

    Args:
        config: Hyperparameters and run settings (:class:`SACConfig` or :class:`DDPGConfig`).
        device: Resolved torch device for the update.
        callback: Called at train start, after every ``log_every`` steps and at the end.
        label: Shown by progress callbacks (e.g. the what-if variant).

    Returns:
        The measurements; ``completed`` is False when a callback stopped training early.
    """
    from rlbench.algos.ppo import evaluate_policy

    device = device or torch.device("cpu")
    cb = callback if callback is not None else CallbackList()
    torch.set_num_threads(config.threads)
    timer = PhaseTimer(device_sync(device))
    now = timer.now
    t_init = now()
    parts = build_offpolicy(config, device, timer)
    init_s = now() - t_init
    collector, updater, buffer = parts.collector, parts.updater, parts.buffer
    n = config.num_envs
    vec_steps = max(1, math.ceil(config.total_steps / n))
    chunk = max(1, config.log_every // n)
    cb.on_train_start({"config": config, "iterations": math.ceil(vec_steps / chunk), "steps_per_iteration": chunk * n,
                       "label": label})  # fmt: skip
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
                        timer.reset()
                        timer.add("warmup", warmup_s, 1)
                        before, in_warmup = {}, False
                        steady_steps -= (step + 1) * n  # counted back below: steady steps start after this one
            if (step + 1) % chunk == 0 or step == vec_steps - 1:
                phase_s = {k: timer.seconds.get(k, 0.0) - before.get(k, 0.0) for k in STEADY_PHASES if k in timer.seconds}
                before = dict(timer.seconds)
                recent = collector.episodes.returns[-10:]
                info = IterationInfo(
                    len(iterations), collector.env_steps, vec_steps * n, now() - t_train, phase_s,
                    {k: float(v) for k, v in diag.items() if v.dim() == 0},
                    float(np.mean(recent)) if recent else math.nan,
                )  # fmt: skip
                iterations.append(info)
                if cb.on_iteration_end(info) is False:
                    completed = False
                    break
        train_s = now() - t_train
        if in_warmup:  # no update happened: the whole run was warm-up
            warmup_s = train_s
        else:
            steady_steps += collector.env_steps
        t_eval = now()
        eval_returns = evaluate_policy(parts.policy, config.env, config.eval_episodes, config.seed + 10_000)
        eval_s = now() - t_eval
    finally:
        parts.env.close()
        if hasattr(collector, "close"):
            collector.close()
    result = OffPolicyResult(
        config=config, device=str(device), env_steps=collector.env_steps, updates=updater.updates, init_s=init_s,
        warmup_s=warmup_s, first_update_s=first_update_s, train_s=train_s, eval_s=eval_s, phase_s=dict(timer.seconds),
        phase_events=dict(timer.counts), context_events=timer.context_events, iterations=iterations,
        eval_returns=eval_returns, episode_returns=list(collector.episodes.returns),
        episode_end_steps=list(collector.episodes.end_steps), synchronized=timer.synchronized,
        steady_steps=steady_steps, completed=completed,
    )  # fmt: skip
    cb.on_train_end({"result": result})
    return result

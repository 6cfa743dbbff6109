"""SAC and DDPG configurations: shared off-policy settings and each algorithm's own, with ``--help`` texts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from rlbench.components.collect.exploration import NOISES
from rlbench.components.offpolicy.polyak import POLYAK
from rlbench.components.offpolicy.sac import SACHyperparams
from rlbench.components.offpolicy.update import PRECISIONS, OffPolicyHyperparams
from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option


@dataclass
class OffPolicyConfig:
    """Settings shared by SAC and DDPG (defaults: the rlox report's SAC Pendulum setting)."""

    env: str = option(
        "gymnasium env id with continuous actions; Pendulum-v1 runs on rlbench's batched NumPy Pendulum", default="Pendulum-v1"
    )
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
    critics: Literal["ensemble", "separate"] = option(
        "critic layout: ensemble (stacked weights, one batched matmul per layer) or separate", default="ensemble"
    )
    polyak: str = option(
        "target update: foreach (one torch._foreach_lerp_), lerp (per-tensor lerp_), loop (per-tensor mul_/add_, as SB3) "
        "or copy (per-tensor copy_ of a new tensor, as CleanRL)",
        choices=sorted(POLYAK),
        default="foreach",
    )
    compile: bool = option("torch.compile the networks used by the update (compile time lands in warm-up)", default=False)
    gradients: Literal["auto", "manual", "autograd"] = option(
        "auto (hand-written where supported: ensemble critics, no compile), manual or autograd", default="auto"
    )
    precision: str = option(
        "bf16: the update's wide matrix products in bfloat16 with fp32 accumulation (hand-written "
        "steps cast themselves, autograd runs under torch.autocast); weights, losses and Adam stay fp32. auto: bf16 "
        "on a CPU with bf16 instructions (AVX512-BF16 or AMX; records say which ran), fp32 elsewhere",
        choices=PRECISIONS,
        default="auto",
    )
    prioritized: bool = option("prioritized replay (sum tree, alpha 0.6, beta 0.4; priorities = |TD error|)", default=False)
    td_lambda: float = option("lambda of TD(lambda) targets over sampled sub-trajectories (0: one-step targets)", default=0.0)
    slice_len: int = option(
        "steps per sampled sub-trajectory with --td-lambda (batch = batch_size // slice_len crops)", default=8
    )
    collector: Literal["sync", "async"] = option(
        "collection: sync (one vectorized env) or async (--num-envs env workers fed by a batched inference server)",
        default="sync",
    )
    transport: Literal["slot", "lock", "direct", "multiprocess"] = option("async collector's transport", default="slot")
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
        check_choices(self)  # every field with declared values (Literal or choices=) holds one of them
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
        if self.gradients == "manual" and (self.critics != "ensemble" or self.compile):
            raise UsageError("--gradients manual needs --critics ensemble and no --compile")
        if self.td_lambda > 0 and self.prioritized:
            raise UsageError("--td-lambda samples sub-trajectories and --prioritized single rows: choose one")
        if self.collector == "async" and self.td_lambda > 0:
            raise UsageError("--td-lambda needs --collector sync (episode crops are stored one env at a time)")
        if self.td_lambda > 0 and self.num_envs != 1:
            raise UsageError("--td-lambda needs --num-envs 1 (sub-trajectories are stored one env at a time)")
        if self.td_lambda > 0 and self.batch_size < self.slice_len:
            raise UsageError(f"--batch-size {self.batch_size} is smaller than --slice-len {self.slice_len}")
        if self.buffer_size < self.batch_size:
            raise UsageError(f"--buffer-size {self.buffer_size} is smaller than --batch-size {self.batch_size}")
        if self.what_if:
            from rlbench.core.variants import variant_configs

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
    standard_what_ifs = (
        "gradients=autograd",
        "polyak=loop",
        "critics=separate",
        "num_envs=4",
        "threads=1",
        "precision=fp32",
        "compile=true",
    )

    def hyperparams(self) -> SACHyperparams:
        """The update's hyperparameters."""
        base = super().hyperparams()
        return SACHyperparams(**vars(base), alpha_lr=self.alpha_lr, init_alpha=self.init_alpha, autotune=self.autotune)


@dataclass
class DDPGConfig(OffPolicyConfig):
    """DDPG (deterministic actor, one Q network, annealed exploration noise) on a continuous-action env."""

    noise: str = option("exploration noise: gaussian or ou (Ornstein-Uhlenbeck)", choices=NOISES, default="gaussian")
    sigma_init: float = option("exploration noise scale at the start (fraction of the action half-range)", default=0.2)
    sigma_end: float = option("noise scale after --anneal-steps", default=0.05)
    anneal_steps: int = option("agent steps over which the noise scale anneals linearly", default=10_000)

    algo = "ddpg"
    standard_what_ifs = ("gradients=autograd", "polyak=loop", "num_envs=4", "threads=1", "precision=fp32", "compile=true")

    def validate(self) -> None:
        """Check values (as :meth:`OffPolicyConfig.validate`, plus the noise settings).

        Raises:
            UsageError: Naming the offending parameter.
        """
        super().validate()  # checks --noise's declared choices too
        if self.collector == "async" and self.noise == "ou":
            raise UsageError("--noise ou keeps one process per env; with --collector async use --noise gaussian")
        if self.sigma_init < 0 or self.sigma_end < 0 or self.anneal_steps < 0:
            raise UsageError("--sigma-init, --sigma-end and --anneal-steps must be 0 or more")

"""What every engine shares: the pipeline's configuration, what a run measured, and the roles' loops.

An engine only decides where the roles run and how slices and weights travel; the loops below do the work and the
timing, so that every engine measures the same things the same way.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from rlbench.components.pipeline.timeline import Timeline
from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option


@dataclass
class PipelineConfig:
    """The generator / scorer / learner pipeline (``rlbench run grpo-pipeline``); field help is the CLI's help."""

    engine: Literal["local", "ray", "monarch"] = option(
        "where the roles run: local (processes on this machine), ray (rlbench[ray]) or monarch (experimental, "
        "rlbench[monarch])",
        default="local",
    )
    address: str = option("Ray cluster address (auto, ray://host:port); empty: start a local Ray", default="")
    generators: int = option("generator processes or actors", default=2)
    group_size: int = option("G: actions sampled per state (advantages are relative to the group)", default=8)
    batch_states: int = option("states per generated slice", default=64)
    slices_per_update: int = option("fresh scored slices the learner waits for before each update (its batch)", default=4)
    updates: int = option("learner updates: the length of the run", default=300)
    hidden: int = option("policy hidden width; 0 sizes the policy from --policy-mb", default=64)
    policy_mb: float = option("policy size in MiB when --hidden is 0 (weight-sync payload)", default=1.0)
    layers: int = option("policy hidden layers", default=2)
    state_dim: int = option("bandit state size", default=8)
    actions: int = option("bandit actions (chance level is 1/actions)", default=8)
    scorer_ms: float = option("extra compute per slice in the scorer, ms (a reward model's cost)", default=0.0)
    kl_coef: float = option("weight of the KL penalty to the frozen reference policy", default=0.01)
    lr: float = option("learner Adam learning rate", default=3e-3)
    clip: float = option("PPO clip range of the policy ratio", default=0.2)
    replay: int = option("slices the version-weighted replay keeps", default=64)
    queue_size: int = option(
        "bound of the trajectory and scored queues (a full queue blocks the stage before it; deeper queues mean "
        "staler slices)",
        default=4,
    )
    weight_sync: Literal["auto", "shm", "store", "gloo", "rdma"] = option(
        "how weights reach the generators: auto (shm on local, store on ray), shm (shared memory, local), "
        "store (Ray object store, flat NumPy), gloo (torch.distributed broadcast, local), rdma (Monarch RDMABuffer)",
        default="auto",
    )
    seed: int = option("seed of the task, the initial weights and the sampling", default=0)
    timeout_s: float = option("fail a run that takes longer than this many seconds (0: no limit)", default=600.0)
    what_if: tuple[str, ...] = option(
        "variant to measure against this setting, as FIELD=VALUE (repeatable, e.g. generators=4, scorer_ms=5, "
        "weight_sync=gloo; 'all' for generators=1 and generators=4): every repeat runs the baseline and each variant, "
        "interleaved, and the report compares their throughput and bounding stage",
        default=(),
    )

    standard_what_ifs: ClassVar[tuple[str, ...]] = ("generators=1", "generators=4")

    def validate(self) -> None:
        """Raise :class:`~rlbench.core.errors.UsageError` on a setting the pipeline cannot run."""
        check_choices(self)  # --engine and --weight-sync among their declared values
        if min(self.generators, self.updates, self.slices_per_update, self.queue_size, self.batch_states, self.replay) < 1:
            raise UsageError("generators, updates, slices_per_update, queue_size, batch_states and replay must be >= 1")
        if self.group_size < 2:
            raise UsageError(f"--group-size must be >= 2 (advantages are relative to the group), got {self.group_size}")
        if self.hidden < 0 or (self.hidden == 0 and self.policy_mb <= 0):
            raise UsageError("need --hidden > 0, or --hidden 0 with --policy-mb > 0")
        if self.weight_sync not in WEIGHT_SYNCS.get(self.engine, ()):
            raise UsageError(
                f"--weight-sync {self.weight_sync} is not available on --engine {self.engine}; "
                f"choose from {', '.join(WEIGHT_SYNCS.get(self.engine, ()))}"
            )
        if self.what_if:
            from rlbench.core.variants import variant_configs

            variant_configs(self)  # parses and validates every variant now, before anything runs


WEIGHT_SYNCS = {"local": ("auto", "shm", "gloo"), "ray": ("auto", "store"), "monarch": ("auto", "rdma")}
DEFAULT_SYNC = {"local": "shm", "ray": "store", "monarch": "rdma"}


def sync_strategy(cfg: PipelineConfig) -> str:
    """The weight-sync strategy a run uses: ``--weight-sync``, or the engine's default for ``auto``."""
    return DEFAULT_SYNC[cfg.engine] if cfg.weight_sync == "auto" else cfg.weight_sync


def policy_hidden(cfg: PipelineConfig) -> int:
    """The policy's hidden width: ``hidden``, or sized from ``policy_mb``."""
    from rlbench.components.pipeline.policy import hidden_for_mb

    return cfg.hidden or hidden_for_mb(cfg.policy_mb, cfg.state_dim, cfg.actions, cfg.layers)


@dataclass
class SyncEvent:
    """One generator taking one weight version: when the learner started publishing it and when it was loaded."""

    actor: str
    version: int
    published: float
    loaded: float
    nbytes: int

    @property
    def latency_s(self) -> float:
        """Publish start to loaded in the generator (includes waiting for the generator to finish its slice)."""
        return self.loaded - self.published


@dataclass
class PipelineRun:
    """Everything one pipeline run measured (raw; the suite turns it into metrics).

    Attributes:
        timelines: One per actor (generators, scorer, learner).
        syncs: Weight versions taken by generators.
        transfer_s: Seconds each generator spent receiving weights (the transfer itself, not the wait).
        lags: Versions behind the learner of each slice used in an update.
        queue_depth: ``(time, trajectory queue depth, scored queue depth)`` samples.
        updates: Learner updates done.
        samples: (state, action) samples trained on.
        slices_generated: Slices the generators produced.
        slices_scored: Slices the scorer rewarded.
        started / ended: Wall-clock bounds of the measured run (after start-up).
        startup_s: Time to start the actors (and the engine).
        greedy_reward: Greedy policy's mean reward at the start and at the end.
        reward_history: ``(update, greedy reward)`` checkpoints.
        weight_bytes: Size of one weight payload.
        nodes: Node (host) each actor ran on.
        engine: Engine and weight-sync strategy, for the records.
    """

    timelines: list[Timeline] = field(default_factory=list)
    syncs: list[SyncEvent] = field(default_factory=list)
    transfer_s: list[float] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    queue_depth: list[tuple[float, int, int]] = field(default_factory=list)
    updates: int = 0
    samples: int = 0
    slices_generated: int = 0
    slices_scored: int = 0
    started: float = 0.0
    ended: float = 0.0
    startup_s: float = 0.0
    greedy_reward: tuple[float, float] = (0.0, 0.0)
    reward_history: list[tuple[int, float]] = field(default_factory=list)
    weight_bytes: int = 0
    nodes: dict[str, str] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)


class PipelineError(RuntimeError):
    """A role failed: the message names the actor, and what was measured until then is kept in ``partial``."""

    def __init__(self, actor: str, message: str, partial: PipelineRun | None = None) -> None:
        super().__init__(f"{actor} failed: {message}")
        self.actor, self.partial = actor, partial


def describe(exc: BaseException) -> str:
    """An exception as one line plus its traceback's last frame (what a driver shows for a remote failure)."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def now() -> float:
    """The pipeline's clock: wall time shared by every process."""
    return time.time()

"""``rlbench run peers``: rlbench's PPO or SAC beside Stable-Baselines3's, rlox's and TorchRL's, in one run.

One repeat is one seed: every implementation trains once with that seed, in the order of ``--impls`` on even seeds
and reversed on odd ones (ABBA), so drift on a shared machine falls on every side alike. All run in this process,
one after another, with the built-in benchmark's setting (``ppo-cartpole`` or ``sac-pendulum``): the same
hyperparameters, agent steps, torch threads and deterministic evaluation (see :mod:`rlbench.suites.peers.common`).
Each implementation's metrics carry ``impl`` among their parameters, so ``rlbench compare RUN --by impl`` and the
peers report set them side by side. For the seeds of ``--profile-seeds`` every peer trains once more under
rlbench's automatic attribution (a separate, untimed pass), which gives its phase shares; rlbench's own come from
its timers in the timed run.
"""

from __future__ import annotations

import importlib
import math
import sys
from dataclasses import dataclass, fields
from typing import Any

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option
from rlbench.results.metrics import (
    ENV_STEPS,
    EVAL_RETURN,
    EVAL_S,
    INIT_S,
    PEER_ERROR,
    PEER_PHASE_WALL_S,
    PROFILE_OVERHEAD_S,
    SPS,
    STEPS_TO_THRESHOLD,
    THRESHOLD_REACHED,
    TIME_TO_THRESHOLD_S,
    TRAIN_EPISODE_RETURN,
    TRAIN_S,
    WALL_S,
    Metric,
    time_metric,
)
from rlbench.run.registry import BenchmarkSpec, RunContext

IMPLS = {"rlbench": "rlbench_peer", "sb3": "sb3_peer", "rlox": "rlox_peer", "torchrl": "torchrl_peer"}
"""Implementation name -> module of :mod:`rlbench.suites.peers` that runs it."""
PIP = {"sb3": "stable-baselines3", "rlox": "rlox", "torchrl": "torchrl"}
ALGOS = ("ppo", "sac")
RECENT = 10  #: a threshold counts as reached when the mean of the last 10 finished training episodes reaches it


@dataclass
class PeersConfig:
    """rlbench and other libraries' PPO (CartPole-v1) or SAC (Pendulum-v1), interleaved per seed."""

    algo: str = option(
        "ppo: ppo-cartpole's setting (CartPole-v1); sac: sac-pendulum's (Pendulum-v1)", choices=ALGOS, default="ppo"
    )
    impls: tuple[str, ...] = option(
        "implementations, in their order on even seeds (reversed on odd ones): rlbench, sb3, rlox, torchrl "
        "(default: rlbench and every installed peer)",
        default=(),
    )
    total_steps: int = option("agent steps per run (0: the built-in benchmark's, 50,000 for ppo, 5,000 for sac)", default=0)
    threads: int = option(
        "torch intra-op threads for every implementation (0: the built-in's, 1 for ppo, 2 for sac)", default=0
    )
    learning_starts: int = option(
        "sac only: agent steps of uniform random actions before the first update, for every implementation (0: the "
        "built-in's, 1,000; a short run to check the plumbing needs fewer)",
        default=0,
    )
    seed: int = option("random seed of the first repeat (repeat k uses seed + k)", default=0)
    eval_episodes: int = option("deterministic evaluation episodes after training, the same for all", default=10)
    threshold: float = option(
        "training return to time, as the mean of the last 10 training episodes (NaN: 100 for CartPole-v1, -200 for "
        "Pendulum-v1; training episodes sample their actions, so at 50,000 steps their mean stays near 150 while the "
        "greedy eval reaches 500)",
        default=math.nan,
    )
    learned: float = option(
        "median eval return an implementation must reach to count as learning (NaN: 450 for ppo, -200 for sac)",
        default=math.nan,
    )
    profile_seeds: tuple[int, ...] = option(
        "seeds whose repeat also trains every peer once more under rlbench's automatic attribution, for phase "
        "shares (untimed; 'none', or a seed outside the run, skips the phase pass)",
        default=(0,),
        minimum=0,
    )

    def validate(self) -> None:
        """Check values.

        Raises:
            UsageError: On an unknown algorithm or implementation, or a negative size.
        """
        check_choices(self)  # --algo among ALGOS
        for name in ("total_steps", "threads", "learning_starts"):
            if getattr(self, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        if self.learning_starts and self.algo != "sac":
            raise UsageError(f"--learning-starts applies to --algo sac only, not {self.algo}")
        if self.eval_episodes < 1:
            raise UsageError(f"--eval-episodes must be at least 1, got {self.eval_episodes}")
        unknown = [i for i in self.impls if i not in IMPLS]
        if unknown:
            raise UsageError(f"unknown implementation {unknown[0]!r} in --impls; choose from {', '.join(IMPLS)}")
        if len(set(self.impls)) != len(self.impls):
            raise UsageError(f"--impls names an implementation twice: {', '.join(self.impls)}")


def peer_module(impl: str) -> Any:
    """The module that runs ``impl``."""
    return importlib.import_module(f"rlbench.suites.peers.{IMPLS[impl]}")


def chosen_impls(config: PeersConfig) -> list[str]:
    """``--impls``, or rlbench and every installed peer."""
    return list(config.impls) or [i for i in IMPLS if peer_module(i).version() is not None]


def check(config: PeersConfig) -> None:
    """Every chosen peer must be installed (checked before anything runs).

    Raises:
        UsageError: Naming the missing library and how to install it.
    """
    missing = [i for i in chosen_impls(config) if peer_module(i).version() is None]
    if missing:
        names = " ".join(PIP[i] for i in missing)
        raise UsageError(f"--impls {missing[0]} is not installed: pip install {names} (or pip install 'rlbench[peers]')")


def setting_for(config: PeersConfig) -> Any:
    """The :class:`~rlbench.suites.peers.common.PeerSetting` of one repeat: the built-in config's defaults."""
    from rlbench.suites.peers.common import PeerSetting

    if config.algo == "ppo":
        from rlbench.algos.ppo.config import PPOConfig as builtin
    else:
        from rlbench.algos.offpolicy.config import SACConfig as builtin
    defaults = builtin()
    hp = {
        f.name: getattr(defaults, f.name)
        for f in fields(defaults)
        if f.name not in ("env", "total_steps", "seed", "threads", "eval_episodes", "device", "what_if")
    }
    if config.learning_starts:
        hp["learning_starts"] = config.learning_starts
    return PeerSetting(
        algo=config.algo,
        env=defaults.env,
        total_steps=config.total_steps or defaults.total_steps,
        seed=config.seed,
        threads=config.threads or defaults.threads,
        eval_episodes=config.eval_episodes,
        hp=hp,
    )


def threshold_of(config: PeersConfig) -> float:
    """The training-return threshold (``--threshold`` or the env's)."""
    if not math.isnan(config.threshold):
        return config.threshold
    return 100.0 if config.algo == "ppo" else -200.0


def learned_bar(config: PeersConfig) -> float:
    """The median eval return that counts as learning (``--learned`` or the algorithm's)."""
    if not math.isnan(config.learned):
        return config.learned
    return 450.0 if config.algo == "ppo" else -200.0


def reached(run: Any, threshold: float) -> tuple[int, float] | None:
    """Agent step and training second at which the mean of the last ``RECENT`` finished episodes first reached
    ``threshold`` (the rule rlbench's own PPO applies), or ``None``."""
    r = run.episode_returns
    for i in range(RECENT - 1, len(r)):
        if sum(r[i - RECENT + 1 : i + 1]) / RECENT >= threshold:
            sec = run.episode_end_s[i] if i < len(run.episode_end_s) else math.nan
            return run.episode_end_steps[i], sec
    return None


def run_metrics(run: Any, position: int, threshold: float) -> list[Metric]:
    """One implementation's timed run as metrics (its ``impl`` parameter is added by the caller)."""
    meta = {"library": run.library, "notes": run.notes, "position": position, "synchronized": False}
    m = [
        Metric(SPS, "steps/s", "higher", [run.env_steps / run.train_s if run.train_s > 0 else math.nan], meta=meta),
        Metric(ENV_STEPS, "steps", "none", [float(run.env_steps)]),
        Metric(INIT_S, "s", "lower", [run.init_s]),
        Metric(TRAIN_S, "s", "lower", [run.train_s]),
        Metric(EVAL_S, "s", "lower", [run.eval_s]),
        Metric(WALL_S, "s", "lower", [run.init_s + run.train_s + run.eval_s]),
        Metric(EVAL_RETURN, "return", "higher", list(run.eval_returns)),
        Metric(TRAIN_EPISODE_RETURN, "return", "none", list(run.episode_returns), x=[float(s) for s in run.episode_end_steps]),
    ]
    tmeta = {"threshold": threshold, "episodes": len(run.episode_returns)}
    hit = reached(run, threshold)
    m.append(Metric(THRESHOLD_REACHED, "bool", "higher", [1.0 if hit else 0.0], meta=tmeta))
    if hit:
        m.append(Metric(STEPS_TO_THRESHOLD, "steps", "lower", [float(hit[0])], meta=tmeta))
        m.append(Metric(TIME_TO_THRESHOLD_S, "s", "lower", [hit[1]], meta=tmeta))
    m += phase_metrics(run.phase_s, run.phase_layers, run.train_s, "timers")
    return m


def phase_metrics(phase_s: dict[str, float], layers: dict[str, str], wall_s: float, source: str) -> list[Metric]:
    """Seconds per phase (``time/<phase>``, layer in meta) and the training wall they are shares of."""
    if not phase_s:
        return []
    m = [Metric(PEER_PHASE_WALL_S, "s", "none", [wall_s], meta={"source": source})]
    for phase, secs in phase_s.items():
        meta = {"layer": layers.get(phase, "other"), "source": source}
        m.append(Metric(time_metric(phase), "s", "none", [secs], meta=meta))
    return m


def _profiled_pass(impl: str, setting: Any) -> list[Metric]:
    """Train ``impl`` once more with the automatic attribution around its training call; its phase metrics."""
    from rlbench.suites.peers.common import profiled

    from rlbench.profiling.session import Session, Settings

    sessions: list[Session] = []

    def span() -> Session:
        sessions.append(Session(Settings(memory=False)))
        return sessions[-1]

    with profiled(span):
        run = getattr(peer_module(impl), f"run_{setting.algo}")(setting)
    if not sessions or sessions[0].outcome is None:
        return []
    outcome = sessions[0].outcome
    phase_s, layers, extra = {}, {}, []
    for metric in outcome.metrics():
        if metric.name.startswith("time/"):
            phase = metric.name[len("time/") :]
            phase_s[phase] = metric.samples[0]
            layers[phase] = metric.meta.get("layer", "other")
        elif metric.name == PROFILE_OVERHEAD_S:
            extra.append(Metric(metric.name, metric.unit, "none", metric.samples, meta={**metric.meta, "source": "profiled"}))
    return phase_metrics(phase_s, layers, run.train_s, "profiled") + extra


def run_peers(config: PeersConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: every implementation trains once with this seed, in ABBA order; one metric list for all."""
    setting = setting_for(config)
    threshold = threshold_of(config)
    order = chosen_impls(config)
    if config.seed % 2:
        order.reverse()
    metrics: list[Metric] = []
    for position, impl in enumerate(order):
        params = {"impl": impl}
        try:
            run = getattr(peer_module(impl), f"run_{config.algo}")(setting)
            found = run_metrics(run, position, threshold)
            if impl != "rlbench" and config.seed in config.profile_seeds:
                found += _profiled_pass(impl, setting)
        except Exception as exc:  # a peer library that fails loses its own row, not the others'
            print(f"rlbench: peer {impl} raised {type(exc).__name__}: {exc}", file=sys.stderr)
            found = [Metric(PEER_ERROR, "count", "lower", [1.0], meta={"error": f"{type(exc).__name__}: {exc}"})]
        for metric in found:
            metric.params = {**metric.params, **params}
        metrics += found
    return metrics


BENCHMARKS = [
    BenchmarkSpec(
        name="peers",
        summary="rlbench's PPO or SAC beside Stable-Baselines3, rlox and TorchRL, interleaved per seed (--algo ppo|sac)",
        config_factory=PeersConfig,
        run=run_peers,
        version=1,
        report="peers",
        check=check,
    )
]

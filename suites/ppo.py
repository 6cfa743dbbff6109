"""``ppo-cartpole``: PPO trained end to end, measured phase by phase, with noise-free op counts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlbench.results.metrics import (
    STEPS_TO_THRESHOLD,
    THRESHOLD_REACHED,
    TIME_TO_THRESHOLD_S,
    Metric,
    counter_metrics,
    training_metrics,
)
from rlbench.run.registry import BenchmarkSpec, RunContext


def ppo_metrics(result: Any, overhead: dict[str, float], counts: dict[str, dict[str, int]] | None = None) -> list[Metric]:
    """Turn a :class:`~rlbench.algos.ppo.train.PPOResult` into metrics (one record each).

    Args:
        result: What the training run measured.
        overhead: Per-event timer costs from :func:`rlbench.instrument.timers.measure_overhead`.
        counts: Op, sync and copy counts of one iteration from :func:`rlbench.algos.ppo.train.count_iteration_ops`.
    """
    m = training_metrics(result, overhead) + counter_metrics(counts or {})
    meta = {"threshold": result.threshold}
    reached = result.steps_to_threshold is not None
    m.append(Metric(THRESHOLD_REACHED, "bool", "higher", [1.0 if reached else 0.0], meta=meta))
    if reached:
        m.append(Metric(STEPS_TO_THRESHOLD, "steps", "lower", [float(result.steps_to_threshold)], meta=meta))
        m.append(Metric(TIME_TO_THRESHOLD_S, "s", "lower", [result.time_to_threshold_s], meta=meta))
    return m


def run_ppo(config: Any, ctx: RunContext) -> list[Metric]:
    """One repeat of a PPO benchmark."""
    from rlbench.algos.ppo.train import count_iteration_ops, train_ppo
    from rlbench.instrument.timers import measure_overhead

    result = train_ppo(config, ctx.device, ctx.callback)
    overhead = measure_overhead(n=10_000, repeats=3)
    counts = count_iteration_ops(config, ctx.device)
    return ppo_metrics(result, overhead, counts)


def check_env(config: Any) -> None:
    """The config's ``--env`` must be a gymnasium id rlbench can drive (checked before anything runs)."""
    from rlbench.algos.scaffold import check_env as check

    check(config.env)


def _ppo_cartpole_config() -> Any:
    from rlbench.algos.ppo.config import PPOConfig

    return replace(PPOConfig(), env="CartPole-v1")


BENCHMARKS = [
    BenchmarkSpec(
        name="ppo-cartpole",
        summary="PPO on CartPole-v1 (batched NumPy env), 50k steps, 8 envs: SPS, phase breakdown, eval return",
        config_factory=_ppo_cartpole_config,
        run=run_ppo,
        version=1,
        check=check_env,
    )
]

"""End-to-end benchmarks: full training runs, measured phase by phase."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlbench.registry import BenchmarkSpec, Metric, RunContext, register


def _ppo_config() -> Any:
    from rlbench.algos.ppo import PPOConfig

    return PPOConfig()


def training_metrics(
    result: Any, overhead: dict[str, float], phases: tuple[str, ...], steady_steps: float, steady_s: float
) -> list[Metric]:
    """Metrics every training benchmark records (one record each): SPS, wall-time parts, returns, phases, timer cost.

    Args:
        result: What the training run measured (``PPOResult`` or ``OffPolicyResult``: same timing attributes).
        overhead: Per-event timer costs from :func:`rlbench.instrument.timers.measure_overhead`.
        phases: Steady-state phase names, parents before children.
        steady_steps: Agent steps taken after warm-up.
        steady_s: Seconds those steps took.
    """
    from rlbench.instrument.timers import estimate_overhead_s

    events = sum(result.phase_events.values())
    wall = result.init_s + result.train_s + result.eval_s
    iters = result.iterations
    m = [
        Metric(
            "sps", "steps/s", "higher", [result.sps], meta={"steps": result.env_steps, "synchronized": result.synchronized}
        ),
        Metric("sps/steady", "steps/s", "higher", [steady_steps / steady_s if steady_s > 0 else math.nan]),
        Metric("wall_s", "s", "lower", [wall]),
        Metric("init_s", "s", "lower", [result.init_s]),
        Metric("warmup_s", "s", "lower", [result.warmup_s]),
        Metric("train_s", "s", "lower", [result.train_s]),
        Metric("eval_s", "s", "lower", [result.eval_s]),
        Metric("env_steps", "steps", "none", [float(result.env_steps)]),
        Metric("iterations", "count", "none", [float(len(iters))]),
        Metric("eval_return", "return", "higher", [float(v) for v in result.eval_returns]),
        Metric("timer/boundary_us", "us", "lower", [overhead["boundary_us"]]),
        Metric("timer/context_us", "us", "lower", [overhead["context_us"]]),
        Metric("timer/events", "count", "none", [float(events)], meta={"context_events": result.context_events}),
        Metric("timer/overhead_s", "s", "lower", [estimate_overhead_s(events, result.context_events, overhead)]),
        Metric("train/episode_return", "return", "none", [float(v) for v in result.episode_returns],
               x=[float(s) for s in result.episode_end_steps]),
        Metric("train/recent_return", "return", "none", [it.recent_return for it in iters],
               x=[float(it.env_steps) for it in iters]),
        Metric("train/elapsed_s", "s", "none", [it.elapsed_s for it in iters], x=[float(it.env_steps) for it in iters]),
    ]  # fmt: skip
    for phase in ("warmup", *phases):
        if phase in result.phase_s:
            events = result.phase_events.get(phase, 0)
            m.append(Metric(f"time/{phase}", "s", "lower", [result.phase_s[phase]], meta={"events": events}))
    steady = iters[1:]
    for phase in phases:
        if phase in result.phase_s:
            m.append(Metric(f"iter_time/{phase}", "s", "lower", [it.phase_s.get(phase, 0.0) for it in steady]))
    for key in sorted({k for it in iters for k in it.diagnostics}):
        m.append(Metric(f"diag/{key}", "", "none", [it.diagnostics.get(key, math.nan) for it in iters],
                        x=[float(it.env_steps) for it in iters]))  # fmt: skip
    return m


def ppo_metrics(result: Any, overhead: dict[str, float], counts: dict[str, dict[str, int]] | None = None) -> list[Metric]:
    """Turn a :class:`~rlbench.algos.ppo.PPOResult` into metrics (one record each).

    Args:
        result: What the training run measured.
        overhead: Per-event timer costs from :func:`rlbench.instrument.timers.measure_overhead`.
        counts: Op, sync and copy counts of one iteration from :func:`rlbench.algos.ppo.count_iteration_ops`.
    """
    from rlbench.algos.ppo import STEADY_PHASES

    steady = result.iterations[1:]
    steady_s = sum(
        it.phase_s.get("collect", 0.0) + it.phase_s.get("advantage", 0.0) + it.phase_s.get("update", 0.0) for it in steady
    )
    steady_steps = sum(result.config.num_envs * result.config.rollout_steps for _ in steady)
    m = training_metrics(result, overhead, STEADY_PHASES, steady_steps, steady_s)
    for kind, per_phase in (counts or {}).items():
        for phase, n in per_phase.items():
            m.append(Metric(f"{kind}/{phase}", "count", "lower", [float(n)]))
    threshold = result.threshold
    reached = result.steps_to_threshold is not None
    meta = {"threshold": threshold}
    m.append(Metric("threshold_reached", "bool", "higher", [1.0 if reached else 0.0], meta=meta))
    if reached:
        m.append(Metric("steps_to_threshold", "steps", "lower", [float(result.steps_to_threshold)], meta=meta))
        m.append(Metric("time_to_threshold_s", "s", "lower", [result.time_to_threshold_s], meta=meta))
    return m


def run_ppo(config: Any, ctx: RunContext) -> list[Metric]:
    """One repeat of a PPO benchmark."""
    from rlbench.algos.ppo import count_iteration_ops, train_ppo
    from rlbench.instrument.timers import measure_overhead

    result = train_ppo(config, ctx.device, ctx.callback)
    overhead = measure_overhead(n=10_000, repeats=3)
    counts = count_iteration_ops(config, ctx.device)
    return ppo_metrics(result, overhead, counts)


def _ppo_cartpole_config() -> Any:
    return replace(_ppo_config(), env="CartPole-v1")


PPO_CARTPOLE = register(
    BenchmarkSpec(
        name="ppo-cartpole",
        summary="PPO on CartPole-v1 (batched NumPy env), 50k steps, 8 envs: SPS, phase breakdown, eval return",
        config_factory=_ppo_cartpole_config,
        run=run_ppo,
        version=1,
    )
)

"""Off-policy end-to-end benchmarks: ``sac-pendulum`` and ``ddpg-pendulum``, with measured what-ifs.

With ``--what-if FIELD=VALUE`` (repeatable, or ``all``), every repeat trains the baseline setting and each
variant, one after another in the same process with the same seed, the order reversed on odd seeds so drift
cancels out. Records carry ``variant`` in their parameters; the report ranks the variants by their
paired effect on SPS, with a bootstrap confidence interval, instead of estimating it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlbench.suites.ppo import check_env

from rlbench.core.variants import variant_configs
from rlbench.results.metrics import BASELINE, FIRST_UPDATE_S, UPDATES, VARIANT, Metric, counter_metrics, training_metrics
from rlbench.run.registry import BenchmarkSpec, RunContext


def offpolicy_metrics(result: Any, overhead: dict[str, float], counts: dict[str, int] | None = None) -> list[Metric]:
    """Turn an :class:`~rlbench.algos.offpolicy.train.OffPolicyResult` into metrics (one record each)."""
    m = training_metrics(result, overhead)
    m.append(Metric(UPDATES, "count", "none", [float(result.updates)], meta={"precision": result.precision}))
    m.append(Metric(FIRST_UPDATE_S, "s", "lower", [result.first_update_s]))
    return m + counter_metrics({"ops": counts or {}})


def count_step_ops(config: Any, device: Any) -> dict[str, int]:
    """Torch ops of one collection step and one gradient update (an extra, untimed run of each; seeded, identical
    run to run): ``{"collect": n, "update": n}``."""
    from rlbench.algos.offpolicy.train import build_offpolicy, sample_batch
    from rlbench.instrument.counters import OpCounter
    from rlbench.instrument.timers import NullTimer

    small = replace(config, compile=False, buffer_size=max(config.batch_size, config.slice_len) * 4)
    parts = build_offpolicy(small, device, NullTimer())
    try:
        for _ in range(math.ceil(small.buffer_size / small.num_envs)):
            parts.collector.step(random=True)
        with OpCounter() as counter:
            counter.phase = "collect"
            parts.collector.step(random=False)
            counter.phase = "update"
            batch = sample_batch(parts.buffer, small, device)
            diag = parts.updater.update(batch)
            if small.prioritized:
                parts.buffer.update_priorities(batch["indices"], diag["td_abs"].cpu())
    finally:
        parts.env.close()
        if hasattr(parts.collector, "close"):
            parts.collector.close()
    return {"collect": int(counter.ops["collect"]), "update": int(counter.ops["update"])}


def run_offpolicy(config: Any, ctx: RunContext) -> list[Metric]:
    """One repeat: the baseline and every what-if variant, interleaved (order reversed on odd seeds)."""
    from rlbench.algos.offpolicy.train import train_offpolicy
    from rlbench.instrument.timers import measure_overhead

    variants = variant_configs(config)
    if config.seed % 2 == 1:
        variants = variants[::-1]
    out: list[Metric] = []
    overhead = measure_overhead(n=10_000, repeats=3)
    for label, cfg in variants:
        result = train_offpolicy(cfg, ctx.device, ctx.callback, label=label if len(variants) > 1 else "")
        counts = count_step_ops(cfg, ctx.device) if label == BASELINE else None
        for metric in offpolicy_metrics(result, overhead, counts):
            metric.params = {**metric.params, VARIANT: label}
            out.append(metric)
    return out


def _sac_config() -> Any:
    from rlbench.algos.offpolicy.config import SACConfig

    return SACConfig()


def _ddpg_config() -> Any:
    from rlbench.algos.offpolicy.config import DDPGConfig

    return DDPGConfig(total_steps=20_000)


BENCHMARKS = [
    BenchmarkSpec(
        name="sac-pendulum",
        summary="SAC on Pendulum-v1, 5k steps (1k random), batch 256, 256x256 MLPs: SPS, update breakdown, what-ifs",
        config_factory=_sac_config,
        run=run_offpolicy,
        version=1,
        check=check_env,
        report="offpolicy",
    ),
    BenchmarkSpec(
        name="ddpg-pendulum",
        summary="DDPG on Pendulum-v1, 20k steps, annealed Gaussian noise, 256x256 MLPs: SPS, update breakdown, what-ifs",
        config_factory=_ddpg_config,
        run=run_offpolicy,
        version=1,
        check=check_env,
        report="offpolicy",
    ),
]

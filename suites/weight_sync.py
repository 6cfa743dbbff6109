"""``weight-sync``: how long pushing a policy's weights to its generators takes, per strategy and payload size.

One sender (the learner's side) and ``--receivers`` receiver processes (the generators' side) on this machine, every
strategy of :mod:`rlbench.engines.weight_sync` at every size in the same run, raw gloo broadcast (``reference``)
among them as the floor the others are compared to. The Ray rows need the ``rlbench[ray]`` extra; without it they
are skipped with a note. Records are micro-benchmark timings (``time/call``, one sample per round), so the micro
report renders the table and the scaling chart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlbench.core.options import check_choices, option
from rlbench.engines.weight_sync import LOCAL, RAY, measure_local, measure_ray
from rlbench.results.metrics import TIME_CALL, Metric
from rlbench.run.registry import BenchmarkSpec, RunContext

GROUP = "weight-sync"
MONARCH = ("monarch-rdma",)


@dataclass
class WeightSyncConfig:
    """Which payloads and strategies to measure."""

    sizes_mb: tuple[int, ...] = option("payload sizes in MiB (float32 weights)", default=(1, 10, 100))
    receivers: int = option("receiver processes (generators)", default=2)
    rounds: int = option("timed rounds per strategy and size (after 2 warm-up rounds)", default=20)
    strategies: tuple[str, ...] = option(
        "strategies to measure: reference (raw gloo), gloo, shm, ray-store, ray-store-torch, monarch-rdma",
        default=LOCAL + RAY + MONARCH,
    )
    seed: int = option("seed of the payload", default=0)

    def validate(self) -> None:
        from rlbench.core.errors import UsageError

        check_choices(self)  # any field that declares its values (none today)
        unknown = sorted(set(self.strategies) - set(LOCAL + RAY + MONARCH))
        if unknown:
            raise UsageError(f"unknown --strategies {', '.join(unknown)}; choose from {', '.join(LOCAL + RAY + MONARCH)}")
        if self.receivers < 1 or self.rounds < 1 or not self.sizes_mb or min(self.sizes_mb) <= 0:
            raise UsageError("--receivers and --rounds must be >= 1 and --sizes-mb positive")


def _measure(strategy: str, weights: np.ndarray, receivers: int, rounds: int) -> list[float]:
    if strategy in MONARCH:
        from rlbench.engines.monarch_engine import measure_rdma

        return measure_rdma(weights, receivers, rounds)
    return (measure_ray if strategy in RAY else measure_local)(strategy, weights, receivers, rounds)


def run_weight_sync(config: WeightSyncConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: every strategy at every size, interleaved by size (strategies alternate order per size)."""
    import importlib.util

    notes = []
    strategies = list(config.strategies)
    if importlib.util.find_spec("ray") is None and any(s in RAY for s in strategies):
        notes.append("ray-store rows: ray is not installed (pip install 'rlbench[ray]')")
        strategies = [s for s in strategies if s not in RAY]
    if importlib.util.find_spec("monarch") is None and any(s in MONARCH for s in strategies):
        notes.append("monarch-rdma rows: torchmonarch is not installed (pip install 'rlbench[monarch]')")
        strategies = [s for s in strategies if s not in MONARCH]
    rng = np.random.default_rng(config.seed)
    out: list[Metric] = []
    for k, mb in enumerate(config.sizes_mb):
        weights = rng.standard_normal(int(mb * 2**20 // 4), dtype=np.float32)
        order = strategies if k % 2 == 0 else strategies[::-1]
        rounds = max(3, config.rounds // 4) if mb >= 100 else config.rounds
        for strategy in order:
            try:
                samples = _measure(strategy, weights, config.receivers, rounds)
            except Exception as exc:
                notes.append(f"{strategy}@{mb}MiB failed: {type(exc).__name__}: {exc}")
                continue
            out.append(
                Metric(
                    TIME_CALL,
                    "s",
                    "lower",
                    samples,
                    meta={"elements": int(weights.nbytes), "bytes": int(weights.nbytes)},
                    params={"group": GROUP, "op": f"{config.receivers} receivers", "impl": strategy, "size": f"{mb} MiB"},
                )
            )
    for m in out:
        m.meta["notes"] = notes
    return out


BENCHMARKS = [
    BenchmarkSpec(
        name="weight-sync",
        summary="micro: weight sync from a learner to N generators, 1/10/100 MiB: raw gloo floor, gloo, shared memory, "
        "Ray object store (NumPy, torch), Monarch RDMABuffer",
        config_factory=WeightSyncConfig,
        run=run_weight_sync,
        version=1,
        report="micro",
    ),
]

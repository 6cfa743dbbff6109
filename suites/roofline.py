"""``rlbench run update-roofline``: an off-policy update measured against this machine's own limits.

One repeat measures the machine (the achievable fp32 matmul rate of a 1024³ product, copy bandwidth, the floor cost of
one op dispatch), then the update as ``sac-pendulum`` runs it (same networks, batch, threads; a replay filled by
random-action steps of the env), timing ``--updates`` updates phase by phase after ``--warmup`` ones. One more update
runs under :class:`~rlbench.instrument.roofline.OpRecorder`, which counts each phase's ops and the FLOPs and shapes
of its matrix products; each product's shape is then timed alone, so a phase's *achievable* time is the sum of its
products at this machine's rate for their own shapes. Per phase the records hold the time, ops, FLOPs, achieved
GFLOP/s, the percent of the achievable rate, and the ops at the dispatch floor: the report says which explains more
of the time (dispatch-bound or compute-bound).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Literal

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option
from rlbench.results.metrics import Metric
from rlbench.run.registry import BenchmarkSpec, RunContext

PEAK_BF16 = "roofline/peak_gflops_bf16"
CACHE_GBPS = "roofline/cache_gbps"
PHASES = ("update/sample", "update/target", "update/critic", "update/actor", "update/alpha", "update/polyak")


@dataclass
class RooflineConfig:
    """The update to measure, as ``sac-pendulum`` / ``ddpg-pendulum`` would run it."""

    algo: Literal["sac", "ddpg"] = option("the off-policy algorithm whose update is measured", default="sac")
    env: str = option("env whose observation and action sizes shape the networks", default="Pendulum-v1")
    batch_size: int = option("transitions per update", default=256)
    hidden: tuple[int, ...] = option("hidden layer sizes of actor and critics", default=(256, 256))
    # the values of the training benchmark's fields of the same names (tests/test_options.py keeps them equal; its
    # constants are not imported here: they import torch, and `rlbench list` stays instant)
    critics: Literal["ensemble", "separate"] = option("critic layout (as the training benchmark)", default="ensemble")
    gradients: Literal["auto", "manual", "autograd"] = option("update gradients (as the training benchmark)", default="auto")
    precision: Literal["auto", "fp32", "bf16"] = option(
        "update precision (as the training benchmark: auto is bf16 on CPUs with AVX512-BF16 or AMX)", default="auto"
    )
    threads: int = option("torch intra-op threads", default=2)
    updates: int = option("timed updates", default=300)
    warmup: int = option("updates before timing", default=30)
    seed: int = option("seed of networks, replay and sampling", default=0)
    device: str = option("torch device: auto, cpu, cuda[:N] or mps", default="auto")

    def validate(self) -> None:
        """Raise :class:`UsageError` on a setting that cannot run."""
        check_choices(self)  # --algo, --critics, --gradients and --precision among their declared values
        if min(self.batch_size, self.updates, self.threads) < 1 or self.warmup < 0 or not self.hidden:
            raise UsageError("--batch-size, --updates and --threads must be at least 1, --warmup 0 or more")


def run_roofline(config: RooflineConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: the machine's limits, then the update's phases against them."""
    import torch

    from rlbench.algos.offpolicy.config import DDPGConfig, SACConfig
    from rlbench.algos.offpolicy.train import build_offpolicy, sample_batch
    from rlbench.instrument import roofline
    from rlbench.instrument.timers import PhaseTimer

    torch.set_num_threads(config.threads)
    device = ctx.device if ctx.device is not None else torch.device("cpu")
    dev = str(device)
    cls = SACConfig if config.algo == "sac" else DDPGConfig
    cfg = cls(
        env=config.env,
        batch_size=config.batch_size,
        hidden=tuple(config.hidden),
        critics=config.critics,
        gradients=config.gradients,
        precision=config.precision,
        threads=config.threads,
        seed=config.seed,
        total_steps=2_000,
        learning_starts=2_000,
    )
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    timer = PhaseTimer(sync)
    parts = build_offpolicy(cfg, device, timer)
    try:
        for _ in range(2_000 // cfg.num_envs):  # a replay of random-action transitions, as before learning starts
            parts.collector.step(random=True)
    finally:
        parts.env.close()
    updater, buffer = parts.updater, parts.buffer

    def one_update() -> None:
        with timer.phase("update/sample"):
            batch = sample_batch(buffer, cfg, device)
        updater.update(batch)

    for _ in range(config.warmup):
        one_update()
    per_phase: dict[str, list[float]] = {}
    totals: list[float] = []
    for _ in range(config.updates):
        before = dict(timer.seconds)
        t0 = timer.now()
        one_update()
        totals.append(timer.now() - t0)
        for name, secs in timer.seconds.items():
            if name.startswith("update/"):
                per_phase.setdefault(name, []).append(secs - before.get(name, 0.0))

    recorder = roofline.OpRecorder()
    original = updater.timer
    updater.timer = _RecordingTimer(recorder)
    try:
        with recorder, recorder.phase("update/sample"):
            batch = sample_batch(buffer, cfg, device)
        with recorder:
            updater.update(batch)
    finally:
        updater.timer = original

    peak = roofline.matmul_gflops(1024, 1024, 1024, torch.float32, dev)
    peak_bf16 = roofline.matmul_gflops(1024, 1024, 1024, torch.bfloat16, dev) if updater.precision == "bf16" else None
    bandwidth = roofline.memory_gbps(256, dev)
    cache_bw = roofline.memory_gbps(roofline.CACHE_MIB, dev)
    floor_us = roofline.dispatch_us(dev)
    rates: dict[tuple[tuple[int, ...], str], float] = {}
    machine = {"phase": "machine"}
    out = [
        Metric("roofline/peak_gflops", "GFLOP/s", "higher", [peak], meta={"shape": "1024x1024x1024 fp32"}, params=machine),
        *(
            [Metric(PEAK_BF16, "GFLOP/s", "higher", [peak_bf16], meta={"shape": "1024x1024x1024 bf16"}, params=machine)]
            if peak_bf16 is not None
            else []
        ),
        Metric("roofline/memory_gbps", "GB/s", "higher", [bandwidth], meta={"what": "256 MiB copy_"}, params=machine),
        Metric(CACHE_GBPS, "GB/s", "higher", [cache_bw], meta={"what": f"{roofline.CACHE_MIB:g} MiB copy_"}, params=machine),
        Metric("roofline/dispatch_us", "us", "lower", [floor_us], meta={"what": "1-element add, out="}, params=machine),
        Metric("roofline/update_s", "s", "lower", totals, meta={"precision": updater.precision}, params={"phase": "update"}),
    ]
    for name in sorted(per_phase, key=lambda n: PHASES.index(n) if n in PHASES else len(PHASES)):
        rec = recorder.phases.get(name, roofline.PhaseOps())
        secs = per_phase[name]
        med = statistics.median(secs)
        achievable = roofline.achievable_seconds(rec, dev, rates)
        shapes = {f"{kind} {'x'.join(map(str, shape))} {dtype}": n for (kind, shape, dtype), n in sorted(rec.matmuls.items())}
        meta = {
            "ops": rec.ops,
            "flops": rec.flops,
            "achieved_gflops": rec.flops / med / 1e9 if med > 0 else math.nan,
            "achievable_s": achievable,
            "dispatch_floor_s": rec.ops * floor_us * 1e-6,
            "bytes": rec.bytes,
            "cached_bytes": rec.cached_bytes,
            "memory_s": roofline.memory_seconds(rec, bandwidth, cache_bw),
            "matmuls": shapes,
            "rates_gflops": {f"{'x'.join(map(str, s))} {dtype}": r for (s, dtype), r in rates.items()},
        }
        out.append(Metric("roofline/phase_s", "s", "lower", secs, meta=meta, params={"phase": name}))
    return out


class _RecordingTimer:
    """The update's timer while the op recorder runs: its phases name the recorder's phases, nothing is timed."""

    def __init__(self, recorder: Any) -> None:
        self.phase = recorder.phase


BENCHMARKS = [
    BenchmarkSpec(
        name="update-roofline",
        summary="an off-policy update (SAC by default) per phase against this machine's matmul rate, bandwidth and "
        "dispatch floor: GFLOP/s, percent of achievable, dispatch- or compute-bound",
        config_factory=RooflineConfig,
        run=run_roofline,
        report="roofline",
    ),
]

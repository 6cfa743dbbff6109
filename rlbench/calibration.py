"""Measure the gate itself on this machine: false alarms on A/A, detection of injected slowdowns.

``rlbench calibrate [--comparisons 20] [--out reports/gate-calibration.md]``

For each benchmark and condition (A/A; B slowed by 5%; B slowed by 10%), it runs ``--comparisons``
independent comparisons. One comparison = ``--rounds`` interleaved rounds (A B, B A, ...), round ``k``
running both sides with seed ``k``, then :func:`rlbench.gate.evaluate` with the threshold under test.
Slowdowns come from the test-only knob ``RLBENCH_INJECT_DELAY`` (see :mod:`rlbench.instrument.timers`):
the phase really runs that much longer, as a regression would make it.

Benchmarks:

* ``ppo-cartpole`` with a short budget, gated on ``iter_time/update`` (per-iteration update times; the
  slowdown is injected into the ``update`` phase);
* the ``gae`` micro-benchmark (``gae_numpy`` at T=128, N=8, every call timed), gated on its per-call time.

Writes the markdown report and a JSON file of every comparison beside it.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import numpy as np

from rlbench.gate import Threshold, evaluate
from rlbench.instrument.timers import INJECT_ENV, PhaseTimer
from rlbench.metrics import TIME_CALL
from rlbench.records import Record

CONDITIONS = (("A/A", 0.0), ("+5%", 0.05), ("+10%", 0.10))


def _records(run: str, metric: str, unit: str, samples: list[float], seed: int) -> Record:
    return Record(
        run_id=run,
        timestamp="",
        benchmark="calibration",
        params={},
        definition_hash="",
        metric=metric,
        unit=unit,
        direction="lower",
        samples=samples,
        repeat=seed,
        seed=seed,
    )


def ppo_side(seed: int, inject: float, steps: int) -> list[float]:
    """Per-iteration update seconds of one short ppo-cartpole run (slowed by ``inject`` when > 0)."""
    from rlbench.algos.ppo.config import PPOConfig
    from rlbench.algos.ppo.train import train_ppo

    if inject:
        os.environ[INJECT_ENV] = f"update:{inject}"
    try:
        result = train_ppo(replace(PPOConfig(), total_steps=steps, seed=seed, eval_episodes=0))
    finally:
        os.environ.pop(INJECT_ENV, None)
    return [it.phase_s["update"] for it in result.iterations[1:]]


def gae_side(seed: int, inject: float, calls: int) -> list[float]:
    """Per-call seconds of ``gae_numpy`` at T=128, N=8 (each call slowed by ``inject`` when > 0)."""
    from rlbench.components.returns.gae import gae_numpy

    rng = np.random.default_rng(seed)
    r, v = rng.standard_normal((128, 8), dtype=np.float32), rng.standard_normal((128, 8), dtype=np.float32)
    d = rng.random((128, 8)) < 0.02
    last = rng.standard_normal(8, dtype=np.float32)
    out = np.empty((128, 8), dtype=np.float32)
    if inject:
        os.environ[INJECT_ENV] = f"gae:{inject}"
    try:
        timer = PhaseTimer()
    finally:
        os.environ.pop(INJECT_ENV, None)
    now = timer.now
    for _ in range(50):  # warm caches
        gae_numpy(r, v, d, last, 0.99, 0.95, out=out)
    samples = []
    for _ in range(calls):
        t0 = now()
        gae_numpy(r, v, d, last, 0.99, 0.95, out=out)
        timer.add("gae", now() - t0)
        samples.append(now() - t0)
    return samples


def one_comparison(side: Any, metric: str, inject: float, rounds: int, size: int, threshold: Threshold) -> dict[str, Any]:
    """Interleaved rounds of A and B, then the gate; returns its verdict and cost."""
    t0 = time.perf_counter()
    base, cand = [], []
    for k in range(rounds):
        order = (("a", 0.0), ("b", inject)) if k % 2 == 0 else (("b", inject), ("a", 0.0))
        for name, frac in order:
            rec = _records(name, metric, "s", side(k, frac, size), k)
            (base if name == "a" else cand).append(rec)
    outcome = evaluate(base, cand, [threshold], learning_drop=None)
    check = outcome.checks[0]
    return {
        "alarm": check.failed,
        "ratio": check.result.ratio,
        "ci": [check.result.ci_low, check.result.ci_high],
        "wall_s": time.perf_counter() - t0,
    }


def calibrate(comparisons: int, rounds: int, threshold_pct: float, ppo_steps: int, gae_calls: int) -> dict[str, Any]:
    """Every benchmark x condition x comparison; returns the raw outcomes."""
    import torch

    torch.set_num_threads(1)
    benches = {
        "ppo-cartpole": (ppo_side, "iter_time/update", ppo_steps, f"{ppo_steps:,} steps per run"),
        "gae": (gae_side, TIME_CALL, gae_calls, f"gae_numpy T=128 N=8, {gae_calls} timed calls per run"),
    }
    out: dict[str, Any] = {"rounds": rounds, "threshold_pct": threshold_pct, "benchmarks": {}}
    for name, (side, metric, size, what) in benches.items():
        threshold = Threshold(metric, threshold_pct / 100.0)
        rows = {}
        for label, inject in CONDITIONS:
            results = [one_comparison(side, metric, inject, rounds, size, threshold) for _ in range(comparisons)]
            rows[label] = {"inject": inject, "results": results}
            alarms = sum(r["alarm"] for r in results)
            print(f"{name} {label}: {alarms}/{comparisons} alarms", flush=True)
        out["benchmarks"][name] = {"metric": metric, "setup": what, "conditions": rows}
    return out

"""Measure the gate itself on this machine: false alarms on A/A, detection of injected slowdowns.

``rlbench calibrate [--comparisons 20] [--out reports/gate-calibration.md]``

For each benchmark and condition (A/A; B slowed by 5%; B slowed by 10%), it runs ``--comparisons``
independent comparisons. One comparison = ``--rounds`` interleaved rounds (A B, B A, ...), round ``k``
running both sides with seed ``k``, then :func:`rlbench.analysis.gate.evaluate` with the threshold under test.
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
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rlbench.analysis.compare import side_load
from rlbench.analysis.gate import Threshold, evaluate
from rlbench.core.children import die_with_parent, end_child
from rlbench.core.errors import DataError
from rlbench.instrument.machine_load import LoadProbe
from rlbench.instrument.timers import INJECT_ENV, PhaseTimer
from rlbench.results.metrics import MACHINE_OTHER_CPU, TIME_CALL
from rlbench.results.records import Record


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


class CPUHog:
    """``n`` processes spinning on the CPU, started and stopped on demand (a busy neighbour on a shared machine)."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def start(self) -> None:
        spin = "import time\nwhile True: pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin], preexec_fn=die_with_parent) for _ in range(self.n)]

    def stop(self) -> None:
        for proc in self.procs:
            end_child(proc, grace_s=2.0)
        self.procs = []


@dataclass(frozen=True)
class Condition:
    """One calibration condition.

    Attributes:
        label: How the report names it.
        inject: Fraction by which side B's timed phase is slowed (0 for A/A).
        hog: Start a CPU hog (one spinning process per core) halfway through the rounds.
        interleave: Rounds alternate A B, B A (``rlbench ab``); ``False`` runs every A round, then every B round
            (two separate ``rlbench run`` invocations compared afterwards), so a hog started halfway hits B alone.
    """

    label: str
    inject: float = 0.0
    hog: bool = False
    interleave: bool = True


CONDITIONS = (
    Condition("A/A"),
    Condition("+5%", 0.05),
    Condition("+10%", 0.10),
    Condition("A/A, CPU hog from halfway, interleaved", hog=True),
    Condition("A/A, CPU hog from halfway, A then B", hog=True, interleave=False),
)


def one_comparison(side: Any, metric: str, cond: Condition, rounds: int, size: int, threshold: Threshold) -> dict[str, Any]:
    """Rounds of A and B (each run's machine load recorded), then the gate with and without its load check."""
    t0 = time.perf_counter()
    base, cand = [], []
    if cond.interleave:
        plan = [pair for k in range(rounds) for pair in ((("a", k), ("b", k)) if k % 2 == 0 else (("b", k), ("a", k)))]
    else:
        plan = [("a", k) for k in range(rounds)] + [("b", k) for k in range(rounds)]
    hog = CPUHog(os.cpu_count() or 1) if cond.hog else None
    try:
        for i, (name, k) in enumerate(plan):
            if hog is not None and i == len(plan) // 2:
                hog.start()
            probe = LoadProbe()
            samples = side(k, cond.inject if name == "b" else 0.0, size)
            load = probe.stop()
            out = base if name == "a" else cand
            out.append(_records(name, metric, "s", samples, k))
            if load.other_cpu is not None:
                out.append(replace(_records(name, MACHINE_OTHER_CPU, "fraction", [load.other_cpu], k), direction="none"))
    finally:
        if hog is not None:
            hog.stop()
    unchecked = evaluate(base, cand, [threshold], learning_drop=None, allow_busy=True).checks[0]
    try:
        evaluate(base, cand, [threshold], learning_drop=None)
        refused = False
    except DataError:
        refused = True
    return {
        "alarm": unchecked.failed and not refused,
        "refused": refused,
        "alarm_without_load_check": unchecked.failed,
        "ratio": unchecked.result.ratio,
        "ci": [unchecked.result.ci_low, unchecked.result.ci_high],
        "load": [side_load(base), side_load(cand)],
        "wall_s": time.perf_counter() - t0,
    }


def calibrate(
    comparisons: int, rounds: int, threshold_pct: float, ppo_steps: int, gae_calls: int, hog_comparisons: int | None = None
) -> dict[str, Any]:
    """Every benchmark x condition x comparison; returns the raw outcomes (``hog_comparisons`` for the hog conditions)."""
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
        for cond in CONDITIONS:
            n = hog_comparisons if cond.hog and hog_comparisons else comparisons
            results = [one_comparison(side, metric, cond, rounds, size, threshold) for _ in range(n)]
            rows[cond.label] = {"inject": cond.inject, "hog": cond.hog, "interleave": cond.interleave, "results": results}
            alarms, refused = sum(r["alarm"] for r in results), sum(r["refused"] for r in results)
            print(f"{name} {cond.label}: {alarms}/{n} alarms, {refused} refused (machine busy)", flush=True)
        out["benchmarks"][name] = {"metric": metric, "setup": what, "conditions": rows}
    return out

"""Measure the gate itself on this machine: false FAILs on A/A, detection of injected slowdowns, INCONCLUSIVE rates.

``rlbench calibrate [--comparisons 20] [--max-rounds 40] [--threshold 2.5] [--out reports/gate-calibration.md]``

For each benchmark and condition it runs independent comparisons of side A (baseline) and side B (candidate), in
this process. A comparison runs as ``rlbench ab --rounds auto`` does: interleaved rounds (A B, B A, ...), round ``k``
running both sides with seed ``k``, and after the rounds of each planned look (10, 20, 40, ..., ``--max-rounds``) the
gate decides with :func:`rlbench.analysis.gate.gate_look`, the very function ``ab`` decides with, at the design's
per-look confidence (:class:`rlbench.analysis.gate.AutoRounds`). The rounds stop at the first look where the
threshold is PASS or FAIL; the verdict at the last look is the comparison's. The 'A then B' conditions instead run
every A round, then every B round (a fixed number: two separate ``rlbench run --repeats N`` invocations), and gate
once at 95%, as ``rlbench gate`` on their records would.

The conditions (``--conditions``): quiet (``aa``, ``plus5``, ``plus10``); one steady CPU-bound neighbour
(``steady-aa``, ``steady-plus5``); two (``steady2-aa``, ``steady2-plus5``); one per core starting halfway
(``hog-interleaved``, ``hog-a-then-b``); a neighbour during B's runs only (``candidate-interleaved``, one process started
before each B run; ``candidate-hogs``, two processes during every B run after every A run).

Slowdowns come from the test-only knob ``RLBENCH_INJECT_DELAY`` (see :mod:`rlbench.instrument.timers`): the phase
really runs that much longer, as a regression would make it. Busy neighbours are processes spinning on the CPU
(:class:`CPUHog`). Every run records the machine's load (:class:`rlbench.instrument.machine_load.LoadProbe`), so
the gate's load checks act as they do on real records.

Benchmarks:

* ``ppo-cartpole`` with ``--ppo-steps`` agent steps, gated on ``iter_time/update`` (per-iteration update times; the
  slowdown is injected into the ``update`` phase);
* the ``gae`` micro-benchmark (``gae_numpy`` at T=128, N=8, every call timed), gated on its per-call time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rlbench.analysis.compare import load_check, side_load
from rlbench.analysis.gate import FAIL, INCONCLUSIVE, AutoRounds, GateOutcome, MachineBusy, Threshold, evaluate, gate_look
from rlbench.core.children import die_with_parent, end_child
from rlbench.core.errors import UsageError
from rlbench.instrument.machine_load import LoadProbe
from rlbench.instrument.timers import INJECT_ENV, PhaseTimer
from rlbench.results.metrics import MACHINE_OTHER_CPU, TIME_CALL
from rlbench.results.records import Record

SEPARATE_CONFIDENCE = 0.95
"""The interval level of the 'A then B' conditions: one look, as ``rlbench gate`` on two runs' records."""


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


PPO_BATCH = 8 * 128
"""Agent steps per ppo-cartpole iteration (8 envs x 128 steps); the first iteration is left out of the samples."""


@dataclass(frozen=True)
class Benchmark:
    """One calibrated benchmark: how a side runs, the metric gated, and the size option's words."""

    name: str
    side: Callable[[int, float, int], list[float]]
    metric: str
    setup: str


def benchmarks(ppo_steps: int, gae_calls: int) -> dict[str, tuple[Benchmark, int]]:
    """The calibrated benchmarks by name, each with its size (agent steps, or timed calls, per run)."""
    return {
        "ppo-cartpole": (Benchmark("ppo-cartpole", ppo_side, "iter_time/update", f"{ppo_steps:,} steps per run"), ppo_steps),
        "gae": (Benchmark("gae", gae_side, TIME_CALL, f"gae_numpy T=128 N=8, {gae_calls} timed calls per run"), gae_calls),
    }


BENCHMARKS = ("ppo-cartpole", "gae")


class CPUHog:
    """``n`` processes spinning on the CPU, started and stopped on demand (a busy neighbour on a shared machine)."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def start(self) -> None:
        if self.procs:
            return
        spin = "import time\nwhile True: pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", spin], preexec_fn=die_with_parent) for _ in range(self.n)]

    def stop(self) -> None:
        for proc in self.procs:
            end_child(proc, grace_s=2.0)
        self.procs = []


QUIET, HALFWAY, STEADY, CANDIDATE = "quiet", "halfway", "steady", "candidate"
HOG_SETTLE_S = 0.05
"""Seconds between starting a neighbour for one B run (``candidate-interleaved``) and the run: a gae run lasts about
10 ms, less than the neighbour's interpreter takes to start."""


@dataclass(frozen=True)
class Condition:
    """One calibration condition.

    Attributes:
        key: Its name on the command line (``--conditions``) and in the JSON.
        label: How the report names it.
        inject: Fraction by which side B's timed phase is slowed (0 for A/A).
        load: ``quiet``; ``halfway``: a CPU hog starts halfway through the rounds (interleaved: halfway through the
            first look's runs, between A and B of its middle round; A then B: as B's runs begin) and runs to the end;
            ``steady``: the hog runs for the whole comparison; ``candidate``: during B's runs only (interleaved: it
            starts before each B run and stops after it).
        hogs: Spinning processes of the hog (``None``: one per core).
        interleave: Rounds alternate A B, B A with ``--rounds auto`` (``rlbench ab``); ``False`` runs every A round,
            then every B round, a fixed number (two separate ``rlbench run`` invocations gated afterwards).
        main: Measured ``--comparisons`` times (the quiet conditions, and the A/A with a hog from halfway, whose
            targets are stated per 20 comparisons); the other loaded conditions ``--hog-comparisons`` times.
    """

    key: str
    label: str
    inject: float = 0.0
    load: str = QUIET
    hogs: int | None = None
    interleave: bool = True
    main: bool = True

    def hog_processes(self) -> int:
        """How many spinning processes its hog runs (0 when quiet)."""
        if self.load == QUIET:
            return 0
        return self.hogs if self.hogs is not None else os.cpu_count() or 1


CONDITIONS = (
    Condition("aa", "A/A"),
    Condition("plus5", "+5%", 0.05),
    Condition("plus10", "+10%", 0.10),
    Condition("hog-interleaved", "A/A, CPU hog from halfway, interleaved", load=HALFWAY),
    Condition("hog-a-then-b", "A/A, CPU hog from halfway, A then B", load=HALFWAY, interleave=False, main=False),
    Condition("steady-aa", "A/A, steady background load (1 process)", load=STEADY, hogs=1),
    Condition("steady-plus5", "+5%, steady background load (1 process)", 0.05, load=STEADY, hogs=1),
    Condition("steady2-aa", "A/A, steady background load (2 processes)", load=STEADY, hogs=2, main=False),
    Condition("steady2-plus5", "+5%, steady background load (2 processes)", 0.05, load=STEADY, hogs=2, main=False),
    Condition(
        "candidate-interleaved",
        "A/A, 1 CPU-bound process during B's runs only, interleaved",
        load=CANDIDATE,
        hogs=1,
        main=False,
    ),
    Condition(
        "candidate-hogs",
        "A/A, 2 CPU-bound processes during B only, A then B",
        load=CANDIDATE,
        hogs=2,
        interleave=False,
        main=False,
    ),
)
BY_KEY = {c.key: c for c in CONDITIONS}


def parse_names(text: str, known: tuple[str, ...], flag: str) -> list[str]:
    """Comma-separated names, each one of ``known``, in ``known``'s order.

    Raises:
        UsageError: An unknown or missing name.
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        what = f"unknown {', '.join(map(repr, unknown))}" if unknown else "no names given"
        raise UsageError(f"{flag} {text!r}: {what}; choose from {', '.join(known)}")
    return [n for n in known if n in names]


def _order(k: int) -> tuple[str, str]:
    """Interleaving, as ``rlbench ab`` runs it: A B on even rounds, B A on odd ones."""
    return ("a", "b") if k % 2 == 0 else ("b", "a")


def one_comparison(
    bench: Benchmark, cond: Condition, size: int, threshold: Threshold, design: AutoRounds, separate_rounds: int
) -> dict[str, Any]:
    """One comparison of A and B under ``cond``: its verdict, rounds used, ratio, interval, loads and wall time."""
    t0 = time.perf_counter()
    base: list[Record] = []
    cand: list[Record] = []
    hog = CPUHog(cond.hog_processes()) if cond.load != QUIET else None

    def run(name: str, k: int) -> None:
        during = hog is not None and cond.load == CANDIDATE and cond.interleave and name == "b"
        if during:
            hog.start()  # type: ignore[union-attr]
            time.sleep(HOG_SETTLE_S)  # spinning, past its interpreter's start-up, when B's run begins
        try:
            probe = LoadProbe()
            samples = bench.side(k, cond.inject if name == "b" else 0.0, size)
            load = probe.stop()
        finally:
            if during:
                hog.stop()  # type: ignore[union-attr]
        out = base if name == "a" else cand
        out.append(_records(name, bench.metric, "s", samples, k))
        if load.other_cpu is not None:
            out.append(replace(_records(name, MACHINE_OTHER_CPU, "fraction", [load.other_cpu], k), direction="none"))

    def gate(confidence: float, allow_busy: bool = False) -> GateOutcome:
        return evaluate(
            base,
            cand,
            [threshold],
            learning_drop=None,
            confidence=confidence,
            allow_busy=allow_busy,
            interleaved=cond.interleave,
        )

    outcome: GateOutcome | None = None
    try:
        if hog is not None and cond.load == STEADY:
            hog.start()
        if cond.interleave:
            confidence, done, runs = design.confidence, 0, 0
            for look in design.looks:
                for k in range(done, look):
                    for name in _order(k):
                        if hog is not None and cond.load == HALFWAY and runs == design.looks[0]:
                            hog.start()  # halfway through the first look's 2 x looks[0] runs
                        run(name, k)
                        runs += 1
                done = look
                outcome, stop = gate_look(lambda c=confidence: gate(c))
                if stop:
                    break
        else:
            confidence, done = SEPARATE_CONFIDENCE, separate_rounds
            for k in range(done):
                run("a", k)
            if hog is not None:  # from halfway (the first B run) or during B only: the same moment when A runs first
                hog.start()
            for k in range(done):
                run("b", k)
    finally:
        if hog is not None:
            hog.stop()
    refused = False
    if outcome is None:  # the last look refused, or the single gate has not run yet
        try:
            outcome = gate(confidence)
        except MachineBusy:
            refused = True
    unchecked = gate(confidence, allow_busy=True).checks[0] if outcome is None else outcome.checks[0]
    check = outcome.checks[0] if outcome is not None else None
    judged = load_check(base, cand, cond.interleave)
    return {
        "verdict": check.verdict if check is not None else INCONCLUSIVE,
        "busy": refused or (check is not None and check.busy),
        "refused": refused,
        "fail_without_load_check": unchecked.verdict == FAIL,
        "rounds": done,
        "ratio": unchecked.result.ratio,
        "ci": [unchecked.result.ci_low, unchecked.result.ci_high],
        "load": [side_load(base), side_load(cand)],
        "pairs_dropped": len(judged.dropped),
        "wall_s": time.perf_counter() - t0,
    }


def calibrate(
    comparisons: int,
    max_rounds: int,
    threshold_pct: float,
    ppo_steps: int,
    gae_calls: int,
    hog_comparisons: int = 10,
    separate_rounds: int = 20,
    names: list[str] | None = None,
    conditions: list[str] | None = None,
    on_comparison: Callable[[str, Condition, int, int, dict[str, Any] | None], None] | None = None,
) -> dict[str, Any]:
    """Every benchmark x condition x comparison; returns the raw outcomes.

    Args:
        comparisons: Comparisons per main condition (:attr:`Condition.main`).
        max_rounds: ``--max-rounds`` of the sequential design.
        threshold_pct: The gate's threshold, in percent.
        ppo_steps: Agent steps per ppo-cartpole run.
        gae_calls: Timed calls per gae run.
        hog_comparisons: Comparisons per other condition.
        separate_rounds: Runs per side of the 'A then B' conditions.
        names: The benchmarks (default: all).
        conditions: Condition keys (default: all).
        on_comparison: Called with (benchmark, condition, index, count, result) before each comparison (result
            ``None``) and after it (progress display).
    """
    import torch

    torch.set_num_threads(1)
    design = AutoRounds.plan(max_rounds)
    benches = benchmarks(ppo_steps, gae_calls)
    conds = [BY_KEY[k] for k in conditions] if conditions else list(CONDITIONS)
    out: dict[str, Any] = {
        "version": 2,
        "threshold_pct": threshold_pct,
        "max_rounds": max_rounds,
        "looks": list(design.looks),
        "look_confidence": design.confidence,
        "separate_rounds": separate_rounds,
        "separate_confidence": SEPARATE_CONFIDENCE,
        "cores": os.cpu_count(),
        "benchmarks": {},
    }
    for name in names or list(BENCHMARKS):
        bench, size = benches[name]
        threshold = Threshold(bench.metric, threshold_pct / 100.0)
        rows = {}
        for cond in conds:
            n = comparisons if cond.main else hog_comparisons
            results = []
            for i in range(n):
                if on_comparison:
                    on_comparison(name, cond, i, n, None)
                results.append(one_comparison(bench, cond, size, threshold, design, separate_rounds))
                if on_comparison:
                    on_comparison(name, cond, i, n, results[-1])
            rows[cond.key] = {
                "label": cond.label,
                "inject": cond.inject,
                "load": cond.load,
                "hogs": cond.hog_processes(),
                "interleave": cond.interleave,
                "results": results,
            }
        out["benchmarks"][name] = {"metric": bench.metric, "setup": bench.setup, "conditions": rows}
    return out

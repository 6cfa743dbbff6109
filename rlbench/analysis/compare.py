"""A-vs-B comparison of records: cases matched, ratio of medians with a bootstrap confidence interval.

Pure functions over :class:`~rlbench.results.records.Record` lists; nothing here reads files or prints.

* A **case** is (benchmark, parameters, metric); its samples on each side are the raw samples of every
  record of that case -- except for outcome metrics (returns: units other than time or rate), where the
  unit of analysis is the repeat: one mean per seed, compared unpaired.
* The **ratio** is ``median(candidate) / median(baseline)``; its 95% interval comes from a percentile
  bootstrap (each side resampled with replacement). When both sides ran the same seeds (``rlbench ab``
  interleaves them round by round), the comparison is **paired**: per seed, the ratio of that seed's
  medians, and the bootstrap resamples seeds — which cancels machine drift between rounds.
* A **verdict** needs both: the interval excludes 1 (significance) and the point estimate differs from
  1 by at least ``min_effect`` (default 5%). The words match the interval: "faster", "slower", "better" or
  "worse" only when it excludes 1; otherwise "no clear change (-3% … +21%)", the interval as a change.
* **What the run could detect**: the interval's half-width on its better side (the one a regression must clear
  to exclude 1), times :data:`POWER_FACTOR`, is the regression this run would have found 4 times in 5 at its
  measured noise.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from rlbench.results.fingerprint import HARDWARE_FIELDS
from rlbench.results.metrics import MACHINE, MACHINE_OTHER_CPU
from rlbench.results.records import Record, case_metric

RATE_OR_TIME_UNITS = ("s", "steps/s", "us", "ms", "ops/s", "req/s")
MIN_SAMPLES = 5  # below this, a bootstrap interval is not trusted: no verdict (and the gate refuses)


def power_factor(confidence: float = 0.95) -> float:
    """``(z(1 - alpha/2) + z(0.80)) / z(1 - alpha/2)`` for an interval at ``confidence`` (``alpha = 1 - confidence``):
    a true change of this many half-widths of that interval is significant 4 times in 5 (1.43 at 95%, 1.35 at 98.33%)."""
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    return (z + NormalDist().inv_cdf(0.80)) / z


POWER_FACTOR = power_factor(0.95)
"""(z(0.975) + z(0.80)) / z(0.975): a true change of this many half-widths of a 95% interval is significant 4 times in 5."""


def level(confidence: float) -> str:
    """An interval's level as people write it: ``95%``, ``98.33%`` (what a Bonferroni-spent look of ``ab --rounds
    auto`` computes), never rounded to a level it is not."""
    return f"{100 * confidence:.4g}%"


DECIDED = ("faster", "slower", "better", "worse", "changed")
"""Verdict words that claim a change (the interval excludes 1 and the change is at least the minimum effect)."""


@dataclass
class Case:
    """One (benchmark, parameters, metric) present on both sides.

    Attributes:
        benchmark: Benchmark id.
        params: Parameters as a canonical JSON string.
        metric: Metric name.
        unit: Unit of the samples.
        direction: ``higher``, ``lower`` or ``none``.
        base: Baseline samples per seed (``None`` key when seeds are unknown).
        cand: Candidate samples per seed.
    """

    benchmark: str
    params: str
    metric: str
    unit: str
    direction: str
    base: dict[int | None, list[float]] = field(default_factory=dict)
    cand: dict[int | None, list[float]] = field(default_factory=dict)

    def per_repeat_means(self, side: str) -> np.ndarray:
        """The mean of each seed's finite samples on one side."""
        means = []
        for vs in getattr(self, side).values():
            arr = np.asarray(vs, dtype=float)
            arr = arr[np.isfinite(arr)]
            if arr.size:
                means.append(float(arr.mean()))
        return np.asarray(means, dtype=float)

    def pooled(self, side: str) -> np.ndarray:
        """Every finite sample of one side."""
        values = [v for vs in getattr(self, side).values() for v in vs]
        arr = np.asarray(values, dtype=float)
        return arr[np.isfinite(arr)]


@dataclass
class CaseResult:
    """The comparison of one case.

    Attributes:
        case: The case compared.
        base_median: Median of the baseline samples.
        cand_median: Median of the candidate samples.
        ratio: ``cand_median / base_median`` (or the median of per-seed ratios when paired).
        ci_low: Lower bound of the confidence interval on ``ratio``.
        ci_high: Upper bound.
        paired: Whether seeds were paired.
        n_base: Baseline sample count.
        n_cand: Candidate sample count.
        significant: The interval excludes 1.
        insufficient: Too few samples (pairs) for an interval; the values are exact when zero-variance counters.
        verdict: ``faster``/``slower`` (time and rate metrics), ``better``/``worse`` (others), or ``changed`` for
            metrics without a direction, only when the interval excludes 1; ``small change (…)`` when it does but the
            change is below the minimum effect; ``no clear change (-3% … +21%)`` when it contains 1; ``no change`` for an
            exactly equal count; ``too few samples`` or ``not comparable`` when there is no interval.
        exact: Noise-free on both sides (the ratio is known exactly).
        units: Independent units behind the interval: paired seeds, else the smaller side's repeats (seeds).
        confidence: The interval's level (0.95; higher at each look of ``ab --rounds auto``).
    """

    case: Case
    base_median: float
    cand_median: float
    ratio: float
    ci_low: float
    ci_high: float
    paired: bool
    n_base: int
    n_cand: int
    significant: bool
    verdict: str
    insufficient: bool = False
    exact: bool = False
    units: int = 0
    confidence: float = 0.95

    @property
    def has_interval(self) -> bool:
        """Whether the confidence interval is known (finite bounds)."""
        return math.isfinite(self.ci_low) and math.isfinite(self.ci_high)

    @property
    def worst_regression(self) -> float:
        """The largest regression the interval admits, as a fraction of the baseline (negative: none, it is better).

        ``1 - low`` for a higher-is-better metric, ``high - 1`` for a lower-is-better one: the interval rules out any
        regression larger than this. 0 for an exact, unchanged count; NaN without an interval or a direction.
        """
        if not self.has_interval or self.case.direction not in ("higher", "lower"):
            return math.nan
        return 1.0 - self.ci_low if self.case.direction == "higher" else self.ci_high - 1.0

    @property
    def worse_half_width(self) -> float:
        """Distance from the estimate to the interval's bound on the worse side (both sides for no direction)."""
        if not self.has_interval or not math.isfinite(self.ratio):
            return math.nan
        if self.case.direction == "higher":
            return max(self.ratio - self.ci_low, 0.0)
        if self.case.direction == "lower":
            return max(self.ci_high - self.ratio, 0.0)
        return max(self.ratio - self.ci_low, self.ci_high - self.ratio, 0.0)

    @property
    def detectable(self) -> float:
        """The smallest regression this run would have found significant 4 times in 5, at its measured noise (fraction).

        A regression shows when the interval around the worse estimate stops reaching 1, so what counts is the
        interval's half-width on its *better* side (toward 1): :func:`power_factor` of its level times it (1.43 at
        95%). 0 for an exact count (any
        change shows); NaN without an interval.
        """
        if self.exact:
            return 0.0
        if not self.has_interval or not math.isfinite(self.ratio):
            return math.nan
        if self.case.direction == "higher":
            half = self.ci_high - self.ratio
        elif self.case.direction == "lower":
            half = self.ratio - self.ci_low
        else:
            half = max(self.ratio - self.ci_low, self.ci_high - self.ratio)
        return power_factor(self.confidence) * max(half, 0.0)

    @property
    def change_range(self) -> str:
        """The interval as a change of the metric, e.g. ``−3.1% … +21.0%``."""
        return change_range(self.ci_low, self.ci_high)

    @property
    def improvement(self) -> float:
        """Signed relative improvement: positive is better (ratio above 1 for higher-is-better metrics).

        Infinite when a noise-free count rises from zero (``-inf`` for a lower-is-better counter: infinitely worse).
        """
        if math.isnan(self.ratio):
            return math.nan
        return self.ratio - 1.0 if self.case.direction == "higher" else 1.0 - self.ratio

    def to_dict(self) -> dict:
        """A JSON-friendly summary."""
        c = self.case
        return {
            "benchmark": c.benchmark,
            "params": json.loads(c.params),
            "metric": c.metric,
            "unit": c.unit,
            "direction": c.direction,
            "base_median": _num(self.base_median),
            "cand_median": _num(self.cand_median),
            "ratio": _num(self.ratio),
            "ci_low": _num(self.ci_low),
            "ci_high": _num(self.ci_high),
            "paired": self.paired,
            "n_base": self.n_base,
            "n_cand": self.n_cand,
            "significant": self.significant,
            "verdict": self.verdict,
            "insufficient": self.insufficient,
            "exact": self.exact,
            "units": self.units,
            "confidence": self.confidence,
            "worst_regression": _num(self.worst_regression),
            "detectable": _num(self.detectable),
        }


def change_range(low: float, high: float) -> str:
    """A ratio interval as a signed change in percent, ``−3.1% … +21.0%`` (a true minus sign)."""

    def pct(v: float) -> str:
        return f"{100 * (v - 1.0):+.1f}%".replace("-", "\u2212")

    return f"{pct(low)} … {pct(high)}"


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _key(r: Record, ignore: frozenset[str]) -> tuple[str, str, str]:
    params = {k: v for k, v in r.params.items() if k not in ignore}
    return r.benchmark, json.dumps(params, sort_keys=True, default=str), case_metric(r)


def match_cases(
    base: list[Record], cand: list[Record], metrics: list[str] | None = None, ignore_params: tuple[str, ...] = ()
) -> list[Case]:
    """Cases present on both sides (optionally only ``metrics``), in the baseline's order.

    ``ignore_params`` are left out of the match, to compare variants that differ only in them
    (``init``, ``device``, ``network``...).
    """
    ignore = frozenset(ignore_params)
    sides: dict[tuple[str, str, str], Case] = {}
    seen: dict[str, set] = defaultdict(set)
    for side, records in (("base", base), ("cand", cand)):
        for r in records:
            if metrics is not None and case_metric(r) not in metrics:
                continue
            if r.metric.startswith(MACHINE):  # context of a measurement, not a measurement to compare
                continue
            k = _key(r, ignore)
            case = sides.get(k)
            if case is None:
                case = sides[k] = Case(r.benchmark, k[1], k[2], r.unit, r.direction)
            getattr(case, side).setdefault(r.seed, []).extend(r.samples)
            seen[side].add(k)
    both = seen["base"] & seen["cand"]
    return [c for k, c in sides.items() if k in both]


def bootstrap_ratio(
    base: np.ndarray, cand: np.ndarray, confidence: float = 0.95, n_boot: int = 4000, seed: int = 0
) -> tuple[float, float, float]:
    """Ratio of medians ``median(cand) / median(base)`` with a percentile-bootstrap interval.

    Returns:
        ``(ratio, low, high)``; NaNs when either side is empty or the baseline median is 0.
    """
    if base.size == 0 or cand.size == 0:
        return math.nan, math.nan, math.nan
    mb, mc = float(np.median(base)), float(np.median(cand))
    if mb == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    rb = np.median(base[rng.integers(0, base.size, (n_boot, base.size))], axis=1)
    rc = np.median(cand[rng.integers(0, cand.size, (n_boot, cand.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = rc / rb
    ratios = ratios[np.isfinite(ratios)]
    alpha = (1.0 - confidence) / 2.0
    return mc / mb, float(np.quantile(ratios, alpha)), float(np.quantile(ratios, 1.0 - alpha))


def bootstrap_paired(
    ratios: np.ndarray, confidence: float = 0.95, n_boot: int = 4000, seed: int = 0
) -> tuple[float, float, float]:
    """Median of per-pair ratios with a percentile-bootstrap interval (pairs resampled)."""
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    meds = np.median(ratios[rng.integers(0, ratios.size, (n_boot, ratios.size))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    return float(np.median(ratios)), float(np.quantile(meds, alpha)), float(np.quantile(meds, 1.0 - alpha))


def compare_case(case: Case, min_effect: float = 0.05, confidence: float = 0.95, n_boot: int = 4000) -> CaseResult:
    """Compare one case (paired by seed when both sides hold the same two or more seeds)."""
    b, c = case.pooled("base"), case.pooled("cand")
    seeds = set(case.base) & set(case.cand)
    timing = case.unit in RATE_OR_TIME_UNITS
    if not timing and None not in case.base and None not in case.cand:
        # outcomes such as returns: the unit is the repeat (its mean), unpaired -- one seed's luck says
        # nothing about another variant's at that seed, and episodes within a repeat are not independent
        b, c = case.per_repeat_means("base"), case.per_repeat_means("cand")
    paired = timing and None not in seeds and len(seeds) >= MIN_SAMPLES and set(case.base) == set(case.cand)
    # noise-free: counters by definition, or anything seen twice or more per side with zero spread
    constant = b.size > 0 and c.size > 0 and np.ptp(b) == 0 and np.ptp(c) == 0
    exact = bool(constant and (case.unit == "count" or min(b.size, c.size) >= 2))
    insufficient = not paired and min(b.size, c.size) < MIN_SAMPLES and not exact
    if exact:  # noise-free: the ratio is known exactly, also from zero (0 -> 2,048 syncs is an infinite increase)
        mb, mc = float(b[0]), float(c[0])
        ratio = mc / mb if mb != 0 else (1.0 if mc == 0 else math.copysign(math.inf, mc))
        low = high = ratio
    elif insufficient:
        ratio = float(np.median(c) / np.median(b)) if b.size and c.size and np.median(b) != 0 else math.nan
        low = high = math.nan
    elif paired:
        per_seed = []
        for s in sorted(seeds):
            mb = np.median(np.asarray(case.base[s], dtype=float))
            mc = np.median(np.asarray(case.cand[s], dtype=float))
            per_seed.append(mc / mb if mb != 0 else math.nan)
        ratio, low, high = bootstrap_paired(np.asarray(per_seed, dtype=float), confidence, n_boot)
    else:
        ratio, low, high = bootstrap_ratio(b, c, confidence, n_boot)
    significant = bool(math.isfinite(low) and (low > 1.0 or high < 1.0)) or bool(exact and ratio != 1.0)
    base_med = float(np.median(b)) if b.size else math.nan
    cand_med = float(np.median(c)) if c.size else math.nan
    units = len(seeds) if paired else min(len(case.base), len(case.cand))
    return CaseResult(
        case,
        base_med,
        cand_med,
        ratio,
        low,
        high,
        paired,
        int(b.size),
        int(c.size),
        significant,
        _verdict(case, ratio, low, high, significant, min_effect, exact),
        insufficient,
        exact,
        units,
        confidence,
    )


def _verdict(case: Case, ratio: float, low: float, high: float, significant: bool, min_effect: float, exact: bool) -> str:
    """Words that the interval supports (see the module docstring)."""
    if math.isnan(ratio):
        return "not comparable"
    if exact and not significant:
        return "no change"  # equal noise-free counts: known exactly
    if not exact and not (math.isfinite(low) and math.isfinite(high)):
        return "too few samples"
    if not significant:
        return f"no clear change ({change_range(low, high)})"
    if abs(ratio - 1.0) < min_effect:
        return f"small change ({change_range(low, high)})"
    if case.direction == "none":
        return "changed"
    better = ratio > 1.0 if case.direction == "higher" else ratio < 1.0
    if case.unit in RATE_OR_TIME_UNITS:
        return "faster" if better else "slower"
    return "better" if better else "worse"


def compare(
    base: list[Record],
    cand: list[Record],
    min_effect: float = 0.05,
    confidence: float = 0.95,
    metrics: list[str] | None = None,
    n_boot: int = 4000,
    ignore_params: tuple[str, ...] = (),
) -> list[CaseResult]:
    """Compare every case present on both sides (see the module docstring)."""
    cases = match_cases(base, cand, metrics, ignore_params)
    return [compare_case(c, min_effect, confidence, n_boot) for c in cases]


DRIFT = 0.10  # halves of a side's samples whose medians differ by more than this, and whose IQRs do not overlap
BIMODAL = 0.555  # Sarle's bimodality coefficient of a uniform distribution: more suggests two modes
MIN_FLAG_SAMPLES = 20


def _chronological(case: Case, side: str) -> np.ndarray:
    values = [v for vs in getattr(case, side).values() for v in vs]
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


def drift(samples: np.ndarray) -> float | None:
    """Relative change from the first half's median to the second's, when it is clear (else ``None``)."""
    if samples.size < MIN_FLAG_SAMPLES:
        return None
    a, b = np.array_split(samples, 2)
    mid = float(np.median(samples))
    if mid == 0:
        return None
    change = (float(np.median(b)) - float(np.median(a))) / abs(mid)
    qa, qb = np.percentile(a, [25, 75]), np.percentile(b, [25, 75])
    separated = qa[1] < qb[0] or qb[1] < qa[0]
    return change if abs(change) > DRIFT and separated else None


def bimodality(samples: np.ndarray) -> float | None:
    """Sarle's bimodality coefficient of the samples, when above :data:`BIMODAL` (else ``None``)."""
    n = samples.size
    if n < MIN_FLAG_SAMPLES or np.ptp(samples) == 0:
        return None
    z = (samples - samples.mean()) / samples.std()
    skew, kurt = float(np.mean(z**3)), float(np.mean(z**4)) - 3.0
    coefficient = (skew**2 + 1.0) / (kurt + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))
    return coefficient if coefficient > BIMODAL else None


def sample_flags(results: list[CaseResult]) -> list[str]:
    """Notes on samples that drift over a run or look bimodal (two machine states), per compared timing case."""
    out = []
    for r in results:
        if r.case.unit not in RATE_OR_TIME_UNITS:
            continue
        for side, name in (("base", "baseline"), ("cand", "candidate")):
            samples = _chronological(r.case, side)
            d, b = drift(samples), bimodality(samples)
            if d is not None:
                out.append(
                    f"FLAG `{r.case.metric}`: the {name}'s samples drift {100 * d:+.0f}% from the first half to "
                    "the second (the machine's speed changed during the run?)"
                )
            if b is not None:
                out.append(
                    f"FLAG `{r.case.metric}`: the {name}'s samples look bimodal (bimodality coefficient {b:.2f} > "
                    f"{BIMODAL}): two machine states?"
                )
    return out


BUSY_DIFFERENCE = 0.10
"""Separate runs (not interleaved) whose other-process CPU shares differ by this much (10% of the machine) can explain a
timing effect."""
HEAVY_LOAD = 0.50
"""Separate runs (not interleaved) with a side whose other processes used more than half the machine (median over
repeats): a neighbour that heavy need not have loaded the other run alike, so its timings cannot back a PASS."""
PAIR_DIFFERENCE = 0.15
"""Interleaved rounds: a pair (one seed on both sides) whose two runs' other-process CPU shares differ by more than this
(15% of the machine) saw a different machine on each side; such pairs are dropped (see :data:`MAX_DROPPED`)."""
MAX_DROPPED = 0.25
"""At most this share of the pairs is dropped for a load that differs between their halves (and only while at least
:data:`MIN_SAMPLES` pairs are left); more such pairs mean the sides were loaded differently, not by chance."""
LOAD_NOISE = 0.02
"""Per-pair load differences this small are measurement noise (the kernel counts CPU time in ticks)."""
SYSTEMATIC = 0.05
"""Interleaved rounds: the kept pairs' load differences, when they lean one way beyond chance (a sign test at 5%), must
also average at least this much (5% of the machine) to explain a timing result."""
LOAD_TOLERANCE = BUSY_DIFFERENCE
"""Interleaved rounds: a timing PASS needs the sides' mean load difference over every pair shown to lie within this
(10% of the machine): an equivalence test, two one-sided tests at 5% (the 90% interval of the mean inside the margin).
The kernel counts CPU time in whole ticks (10 ms of one core), so a 20 ms run's load reads in steps of 25 points and one
pair's halves can differ by 50 by chance; the mean over many pairs is still exact to a few points, and the interval
says when it is. Runs shorter than a few ticks need many rounds to be judged beside a neighbour."""


def _t95(df: int) -> float:
    """Student's t 95% quantile: tabled below 5 degrees of freedom, above them the Cornish-Fisher expansion about the
    normal (within 0.5% of exact)."""
    if df <= 0:
        return math.inf
    if df < 5:
        return {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132}[df]
    z = NormalDist().inv_cdf(0.95)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def side_load(records: list[Record]) -> float | None:
    """Median over repeats of the share of CPU capacity other processes used (``None`` if not recorded)."""
    values = [v for r in records if r.metric == MACHINE_OTHER_CPU for v in r.samples if math.isfinite(v)]
    return float(np.median(values)) if values else None


def _loads_by_seed(records: list[Record]) -> dict[int, float]:
    """Per seed, the median share of CPU capacity other processes used during that seed's repeat(s)."""
    per: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if r.metric == MACHINE_OTHER_CPU and r.seed is not None:
            per[r.seed] += [v for v in r.samples if math.isfinite(v)]
    return {k: float(np.median(v)) for k, v in per.items() if v}


def _times_by_seed(records: list[Record]) -> dict[int, float]:
    """Per seed, the earliest time a record of it was written (unix seconds; seeds without a readable time left out)."""
    from datetime import datetime

    out: dict[int, float] = {}
    for r in records:
        if r.seed is None or not r.timestamp:
            continue
        try:
            t = datetime.fromisoformat(r.timestamp).timestamp()
        except (ValueError, TypeError, OverflowError):
            continue
        out[r.seed] = min(t, out.get(r.seed, t))
    return out


def interleaved_in_time(base: list[Record], cand: list[Record]) -> bool:
    """Whether the two sides' repeats were measured in alternation (``rlbench ab``'s rounds: A B, B A, ...), from the
    times their records were written: the sides take turns at least twice (A B A). Two separate runs (all of A, then
    all of B), or records without times, are not."""
    tb, tc = _times_by_seed(base), _times_by_seed(cand)
    if len(tb) < 2 or len(tc) < 2:
        return False
    events = sorted([(t, 0) for t in tb.values()] + [(t, 1) for t in tc.values()])
    switches = sum(1 for (_, a), (_, b) in zip(events, events[1:]) if a != b)
    return switches >= 2


def _sign_test(d: np.ndarray) -> float:
    """Two-sided p-value of the sign test of differences (those within :data:`LOAD_NOISE` of 0 left out)."""
    from math import comb

    up, down = int(np.sum(d > LOAD_NOISE)), int(np.sum(d < -LOAD_NOISE))
    n = up + down
    if n == 0:
        return 1.0
    k = min(up, down)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass
class LoadCheck:
    """What else the machine was doing on each side, and whether that can explain a timing verdict.

    Interleaved rounds (``rlbench ab``, ``bisect``, ``history confirm``) are judged per pair: a steady neighbour loads
    both halves of every pair alike, and the paired ratio stays unbiased (its interval widens with the noise, and
    ``--rounds auto`` adds rounds). The load can explain a result when the pairs lean one way beyond chance (a neighbour
    during one side's runs only), or when the pairs cannot show the sides' mean load within :data:`LOAD_TOLERANCE` of
    each other (too few pairs for the spread of their tick-counted loads). A few pairs whose halves saw very different
    load (a neighbour that started between them) are dropped from the timings. Separate runs (``gate`` on two stored
    runs) are judged per side: loads :data:`BUSY_DIFFERENCE` apart, or either above :data:`HEAVY_LOAD`, can explain a result.

    Attributes:
        base: Median load of the baseline's repeats (``None``: not recorded).
        cand: Median load of the candidate's repeats.
        interleaved: The sides' rounds alternated.
        pairs: Seeds with the load recorded on both sides.
        dropped: Seeds of the pairs dropped for a load that differs between their halves.
        differ: Pairs whose halves' loads differ by more than :data:`PAIR_DIFFERENCE` (dropped or not).
        shift: Mean load difference (candidate minus baseline) over the pairs kept (``None`` without pairs).
        lean_p: The sign test's p-value of the kept pairs' differences (1 without pairs).
        mean_all: Mean load difference over every pair, dropped ones too (``None`` without pairs).
        bound: Upper end of the absolute mean load difference over every pair, at the 90% interval (two one-sided
            5% tests; ``None`` without pairs).
    """

    base: float | None
    cand: float | None
    interleaved: bool = False
    pairs: int = 0
    dropped: tuple[int, ...] = ()
    differ: int = 0
    shift: float | None = None
    lean_p: float = 1.0
    mean_all: float | None = None
    bound: float | None = None

    @property
    def note(self) -> str | None:
        """A line for the top of a comparison (``None`` when neither side recorded its load)."""
        if self.base is None and self.cand is None:
            return None

        def pct(v: float | None) -> str:
            return "not recorded" if v is None else f"{100 * v:.0f}%"

        line = (
            f"machine load (CPU capacity used by other processes, median over repeats): baseline {pct(self.base)}, "
            f"candidate {pct(self.cand)}"
        )
        if self.interleaved and self.pairs:
            line += f"; interleaved, judged per round pair: {self.pair_words}"
        return line

    @property
    def pair_words(self) -> str:
        """The pairs in words: how many differ, how many were dropped, and which way the rest lean."""
        differ = (
            f"{self.differ} of {self.pairs} pair(s) saw loads more than {100 * PAIR_DIFFERENCE:.0f} points apart"
            if self.differ
            else f"no pair of {self.pairs} saw loads more than {100 * PAIR_DIFFERENCE:.0f} points apart"
        )
        if self.dropped:
            differ += f" ({len(self.dropped)} dropped)"
        if self.shift is not None and self.lopsided:
            side = "candidate" if self.shift > 0 else "baseline"
            busier = f"{100 * abs(self.shift):.0f} points on average (sign test p={self.lean_p:.2g})"
            differ += f"; the {side}'s runs were busier by {busier}"
        elif self.unsettled and self.bound is not None:
            differ += (
                f"; the sides' mean load could differ by up to {100 * self.bound:.0f} points (90% interval), more "
                f"than {100 * LOAD_TOLERANCE:.0f}: more rounds narrow it unless one side really was busier"
            )
        return differ

    @property
    def lopsided(self) -> bool:
        """Interleaved: the kept pairs lean one way beyond chance and by at least :data:`SYSTEMATIC`."""
        return self.shift is not None and self.lean_p < 0.05 and abs(self.shift) >= SYSTEMATIC

    @property
    def unsettled(self) -> bool:
        """Interleaved: the pairs cannot show the sides' mean load difference within :data:`LOAD_TOLERANCE`: too
        few pairs for their spread (short runs read in whole ticks), or a real difference (a neighbour during one
        side's runs, seen in some of them)."""
        return self.bound is not None and self.bound > LOAD_TOLERANCE

    @property
    def asymmetric(self) -> bool:
        """Interleaved: the load may have differed between the sides: the kept pairs lean one way beyond chance
        (:attr:`lopsided`), or every pair together cannot rule out a mean difference above :data:`LOAD_TOLERANCE`
        (:attr:`unsettled`). Pairs far apart both ways are noise that more rounds average out (a bursty neighbour, or
        runs so short that the kernel's ticks decide their load); pairs far apart one way are not. (Counting every
        pair above the drop limit as asymmetric refused ``gae`` A/A as busy in 4 of 10 quiet comparisons and 10 of
        10 beside a steady neighbour; judging the kept pairs' sign alone PASSed a neighbour during B's runs only
        at runs of a few milliseconds, where only some of B's runs saw a tick of it.)"""
        return self.interleaved and (self.lopsided or self.unsettled)

    @property
    def heavy(self) -> bool:
        """Load that makes a timing PASS untrustworthy. Interleaved: :attr:`asymmetric`. Separate runs: either side
        above :data:`HEAVY_LOAD`, or the sides :data:`BUSY_DIFFERENCE` apart (a side not recorded counts as no evidence
        either way)."""
        if self.interleaved:
            return self.asymmetric
        known = [v for v in (self.base, self.cand) if v is not None]
        if any(v > HEAVY_LOAD for v in known):
            return True
        return len(known) == 2 and abs(self.cand - self.base) >= BUSY_DIFFERENCE  # type: ignore[operator]

    @property
    def lean(self) -> int:
        """Which side the load pushed: 1 when the candidate's runs were busier, -1 the baseline's, 0 neither."""
        if self.interleaved:
            if not self.asymmetric:
                return 0
            v = self.shift if self.lopsided else self.mean_all
            return 0 if v is None or v == 0 else (1 if v > 0 else -1)
        if self.base is None or self.cand is None or abs(self.cand - self.base) < BUSY_DIFFERENCE:
            return 0
        return 1 if self.cand > self.base else -1

    def explains(self, r: CaseResult) -> bool:
        """Whether the load difference could have produced this timing result's direction.

        A candidate that looks worse on a busier candidate side, or better on a busier baseline side, is not
        evidence: the other processes' load alone pushes the result that way. A result against the load's push
        stands (if anything it was understated).
        """
        if self.lean == 0:
            return False
        if r.case.unit not in RATE_OR_TIME_UNITS or r.case.direction not in ("higher", "lower") or math.isnan(r.ratio):
            return False
        if r.ratio == 1.0:
            return False
        looks_worse = r.improvement < 0
        return looks_worse == (self.lean > 0)

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "base": self.base,
            "cand": self.cand,
            "interleaved": self.interleaved,
            "pairs": self.pairs,
            "pairs_differ": self.differ,
            "pairs_dropped": len(self.dropped),
            "shift": self.shift,
            "shift_bound": self.bound,
            "busy": self.heavy,
        }


def load_check(base: list[Record], cand: list[Record], interleaved: bool | None = None) -> LoadCheck:
    """Both sides' recorded machine load, judged per pair when the sides were interleaved.

    Args:
        base: Baseline records (with their ``machine/other_cpu`` records, one per repeat).
        cand: Candidate records.
        interleaved: Whether the sides' rounds alternated (``None``: from the records' times,
            :func:`interleaved_in_time`).
    """
    check = LoadCheck(side_load(base), side_load(cand))
    check.interleaved = interleaved_in_time(base, cand) if interleaved is None else interleaved
    if not check.interleaved:
        return check
    lb, lc = _loads_by_seed(base), _loads_by_seed(cand)
    seeds = sorted(set(lb) & set(lc))
    if not seeds:
        return check
    d = {k: lc[k] - lb[k] for k in seeds}
    far = [k for k in seeds if abs(d[k]) > PAIR_DIFFERENCE]
    check.pairs, check.differ = len(seeds), len(far)
    if far and len(far) <= MAX_DROPPED * len(seeds) and len(seeds) - len(far) >= MIN_SAMPLES:
        check.dropped = tuple(far)
    kept = np.asarray([d[k] for k in seeds if k not in check.dropped], dtype=float)
    if kept.size:
        check.shift = float(np.mean(kept))
        check.lean_p = _sign_test(kept)
    every = np.asarray([d[k] for k in seeds], dtype=float)
    check.mean_all = float(np.mean(every))
    spread = _t95(every.size - 1) * float(np.std(every, ddof=1)) / math.sqrt(every.size) if every.size > 1 else 0.0
    check.bound = abs(check.mean_all) + spread
    return check


def without_seeds(records: list[Record], seeds: tuple[int, ...] | frozenset[int]) -> list[Record]:
    """The records without the timings of ``seeds`` (pairs dropped for their load); counters and other metrics stay."""
    if not seeds:
        return records
    drop = set(seeds)
    return [r for r in records if not (r.seed in drop and r.unit in RATE_OR_TIME_UNITS)]


def _why(name: str, base: list[Record], cand: list[Record]) -> str:
    """For differing machine ids: which hardware fields differ (CPU identity, ISA flags, GPUs...), as `` (...)``."""
    if name != "machine":
        return ""

    def values_of(records: list[Record], key: str) -> set[str]:
        return {json.dumps((r.fingerprint.get("machine") or {}).get(key), sort_keys=True) for r in records}

    differ = []
    for key in HARDWARE_FIELDS:
        fb, fc = values_of(base, key), values_of(cand, key)
        if fb != fc:
            differ.append(f"{key} {' / '.join(sorted(fb))} vs {' / '.join(sorted(fc))}")
    return f" ({'; '.join(differ)})" if differ else ""


def mismatches(base: list[Record], cand: list[Record]) -> list[str]:
    """Why two sets of records should not be compared: differing machines, software or benchmark definitions.

    Returns:
        One line per differing field (empty when comparable).
    """
    out = []

    def values(records: list[Record], get) -> set:
        return {json.dumps(get(r), sort_keys=True, default=str) for r in records}

    checks = {
        "machine": lambda r: (r.fingerprint.get("machine") or {}).get("id"),
        "python": lambda r: (r.fingerprint.get("software") or {}).get("python"),
        "torch": lambda r: ((r.fingerprint.get("software") or {}).get("packages") or {}).get("torch"),
        "numpy": lambda r: ((r.fingerprint.get("software") or {}).get("packages") or {}).get("numpy"),
        "torch threads": lambda r: (r.fingerprint.get("software") or {}).get("torch_threads"),
    }
    for name, get in checks.items():
        vb, vc = values(base, get), values(cand, get)
        if name == "torch threads":  # a process that never imported torch (a micro run's: its benchmarks run in a
            vb, vc = vb - {"null"}, vc - {"null"}  # child, with their own --threads) has no setting to differ
            if not vb or not vc:
                continue
        if vb != vc:
            out.append(
                f"{name}: baseline {', '.join(sorted(vb))} vs candidate {', '.join(sorted(vc))}{_why(name, base, cand)}"
            )
    defs_b = {(r.benchmark, r.definition_hash) for r in base}  # parameters may differ; the definition may not
    defs_c = {(r.benchmark, r.definition_hash) for r in cand}
    for bench in sorted({b for b, _ in defs_b} & {b for b, _ in defs_c}):
        hb = sorted(h for b, h in defs_b if b == bench)
        hc = sorted(h for b, h in defs_c if b == bench)
        if hb != hc:
            out.append(f"definition of {bench}: baseline {', '.join(hb)} vs candidate {', '.join(hc)}")
    return out

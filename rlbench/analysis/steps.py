"""Steps in a history: the commits where a series' level changes, with the size of the change and its 95% interval.

Pure functions over :class:`~rlbench.results.history.Series`; nothing here reads files or prints. The method, and what
its calibration on real noise showed, are in ``docs/history-steps.md``.

**Exact series** (counters: ``ops/``, ``syncs/``, ``copies/``, ``flops/``, any ``count`` unit): every change of a
commit's value (the median of its samples, all equal in a noise-free count) from the previous commit's is a step,
with the interval ``(ratio, ratio)``.

**Noisy series** (times, rates): each commit's level is the log of the median of its raw samples (every repeat
pooled). The unit of noise is the commit, not the sample: a commit's repeats run in one process, and the spread
between processes is what a history sees (several times what the samples within one process suggest, on this
project's machines). Then:

0. **Load**: a commit measured while other processes loaded the machine differently from the rest of the series (its
   recorded ``machine/other_cpu`` more than :data:`BUSY_COMMIT` from the load most of its commits saw) is *marked* and
   left out of the search (:func:`marked_commits`): one loaded commit alone never makes a step, not even the newest. A
   series measured at a steady load throughout (a CI runner beside one other job) marks nothing.
1. **Noise**: ``sigma``, the between-commit standard deviation of the log level, from consecutive differences (so
   that steps barely count), without the largest 2% of them (:data:`STEPS_PER_COMMIT`), corrected for that trim;
   never below the standard error of one commit's median from its own samples (its repeats).
2. **Search**: binary segmentation with the least-squares cost (``ruptures.Binseg``, model ``l2``) on the levels in
   units of sigma, with a penalty of ``penalty * log(n)`` per change point (:class:`StepSettings`). Where most commits
   have repeats (two samples or more), the noise leaves out the two largest differences (:data:`REVERT`), not one,
   never below the repeats' standard error: in a short history the 2% trim keeps one jump of a real step and its
   revert in the noise, and would hide both.
3. **Confirmation**, per candidate, between the segments on either side (up to the neighbouring candidates): the
   ratio of the segments' levels (20%-trimmed means of their commits' log levels, :data:`TRIM_SEGMENT`) and its
   interval, a t interval on the log scale with ``sigma``. A step is kept when the interval excludes 1, the change is
   at least ``min_effect``, and the new level holds for at least ``min_run`` commits (except at either end of the
   series: the newest commits are always candidates). Of the candidates that fail, the weakest (smallest change for
   its interval) is dropped and the rest are tested again against their new neighbours, until none fails.

The ratio and interval are not :func:`rlbench.analysis.compare.bootstrap_ratio`'s (a bootstrap of medians of
independent samples): here the independent units are commits, often few on one side, and a process-level noise with
two modes (measured: ``reports/history-steps-calibration.md``) makes a median over a handful of commits jump between
the modes, and its bootstrap with it.

Series whose commit medians are not all positive (losses, diagnostics) are not searched.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from rlbench.results.history import Series
from rlbench.results.metrics import COUNTERS, ITER_TIME, TIME

PHASE_PREFIXES = (TIME, ITER_TIME, *(f"{c}/" for c in COUNTERS))
"""Per-phase metrics: what a step in a top-level figure lists as the phases that moved with it."""


@dataclass(frozen=True)
class StepSettings:
    """The method's knobs (defaults: :data:`DEFAULTS`, calibrated in ``reports/history-steps-calibration.md``).

    Attributes:
        penalty: Cost of one more change point, times ``log(n)``, in units of sigma squared.
        confidence: Confidence of the interval that must exclude 1.
        min_effect: Smallest relative change reported as a step.
        min_run: Commits a new level must hold for, except at the ends of the series.
    """

    penalty: float = 3.0
    confidence: float = 0.95
    min_effect: float = 0.02
    min_run: int = 2


DEFAULTS = StepSettings()


@dataclass
class Step:
    """A change of level in a series.

    Attributes:
        series: The series.
        index: Index in ``series.commits`` of the first bad commit (the first at the new level).
        last_good: The last commit at the old level.
        first_bad: The first commit at the new level.
        ratio: New level over old: for a noisy series, the ratio of the segments' typical commit medians (geometric
            20%-trimmed means); for a counter, of the two commits' values (``inf`` when it rises from zero).
        ci: Its 95% interval (``(ratio, ratio)`` for exact counters).
        worse: The change goes the series' bad way (``False`` when it has no direction).
        phases: For a top-level metric, the per-phase metrics (``time/...``, ``iter_time/...``, counters) of the
            same machine, benchmark and parameters that stepped at the same commit (+-1), largest change first; for a
            phase metric, its sub-phases that did.
    """

    series: Series
    index: int
    last_good: str
    first_bad: str
    ratio: float
    ci: tuple[float, float]
    worse: bool
    phases: list[str]


def _worse(direction: str, ratio: float) -> bool:
    if direction == "higher":
        return ratio < 1.0
    if direction == "lower":
        return ratio > 1.0
    return False


def _step(series: Series, i: int, ratio: float, ci: tuple[float, float]) -> Step:
    return Step(series, i, series.commits[i - 1], series.commits[i], ratio, ci, _worse(series.direction, ratio), [])


def _exact_steps(series: Series) -> list[Step]:
    values = [float(np.median(s)) for s in series.samples]
    steps = []
    for i in range(1, len(values)):
        before, after = values[i - 1], values[i]
        if after == before:
            continue
        ratio = after / before if before != 0 else math.copysign(math.inf, after)
        steps.append(_step(series, i, ratio, (ratio, ratio)))
    return steps


STEPS_PER_COMMIT = 0.02
"""The noise estimate leaves out the largest ``STEPS_PER_COMMIT`` share of consecutive differences (at least one):
room for a step every 50 commits without it counting as noise. Only that few: a trim by robust deviations (a MAD
rule) would also drop the jumps between the two modes of process-level noise, which are the noise, and understate it
(measured: twice the false steps per 100 commits allowed on ppo-cartpole's collect phases)."""


def _trimmed_variance(q: float) -> float:
    """Variance of a standard normal without its largest ``q`` share in absolute value, over its full variance."""
    if q <= 0:
        return 1.0
    c = NormalDist().inv_cdf(1 - q / 2)
    return 1.0 - 2 * c * math.exp(-(c**2) / 2) / math.sqrt(2 * math.pi) / (1 - q)


REVERT = 2
"""Where commits have repeats, the noise estimate leaves out at least this many of the largest consecutive differences
(a step and its revert), not one: in a short history the 2% trim leaves out one, and the other jump then makes the noise
and hides both. The repeats' standard error stays the floor. From 75 commits on, the 2% trim leaves out as many."""


def noise(levels: np.ndarray, within_se: float, keep_out: int = 1) -> float:
    """Between-commit standard deviation of log levels, from consecutive differences (so steps barely count): the root
    mean square of the differences without the largest :data:`STEPS_PER_COMMIT` share of them (at least ``keep_out``),
    corrected for that trim, over sqrt(2). At least ``within_se``, and 1e-4 (a floor for series with no measurable
    noise)."""
    d = np.diff(levels)
    between = 0.0
    drop = max(keep_out, round(STEPS_PER_COMMIT * d.size))
    if d.size >= drop + 2:
        d = d - float(np.median(d))
        kept = np.sort(np.abs(d))[: d.size - drop]
        between = math.sqrt(float(np.mean(kept**2)) / _trimmed_variance(drop / d.size)) / math.sqrt(2)
    elif d.size:
        between = float(np.sqrt(np.mean(d**2))) / math.sqrt(2)
    return max(between, within_se, 1e-4)


BUSY_COMMIT = 0.10
"""A commit whose recorded load (other processes' share of the CPU, median over its repeats) lies this far from the
series' median load was measured on a different machine state: it is marked, and left out of the step search (the
gate's ``BUSY_DIFFERENCE``, a load that can by itself move a timing)."""


def typical_load(loads: list[float]) -> float:
    """The load most of a series' commits were measured at: the centre of the densest window of width
    2 x :data:`BUSY_COMMIT` (ties to the quieter one). Not the median: a history measured quiet up to its middle and
    beside a neighbour after it has its median between the two, which would mark every commit."""
    ordered = sorted(loads)
    best, centre = -1, ordered[0]
    for v in ordered:
        inside = [x for x in ordered if abs(x - v) <= BUSY_COMMIT]
        if len(inside) > best:
            best, centre = len(inside), float(np.median(inside))
    return centre


def marked_commits(series: Series) -> set[str]:
    """The commits of a series measured at a load unlike most of it (see :data:`BUSY_COMMIT`, :func:`typical_load`)."""
    loads = list(series.loads or [])
    known = [v for v in loads if v is not None and math.isfinite(v)]
    if not known or len(loads) != len(series.commits):
        return set()
    typical = typical_load(known)
    return {c for c, v in zip(series.commits, loads) if v is not None and math.isfinite(v) and abs(v - typical) > BUSY_COMMIT}


def loaded_share(series: Series, level: float = BUSY_COMMIT) -> tuple[int, float | None]:
    """How many commits were measured while other processes used more than ``level`` of the CPU, and the series'
    median load (``None`` when none was recorded): what a chart says of a series measured under load."""
    known = [v for v in (series.loads or []) if v is not None and math.isfinite(v)]
    if not known:
        return 0, None
    return sum(v > level for v in known), float(np.median(known))


def _within_se(samples: list[list[float]]) -> float:
    """Median over commits of the standard error of a commit's log median from its own samples (0 if none has two).

    The spread is the samples' median absolute deviation (scaled to a standard deviation), as robust as the median it
    is the error of: one repeat that paid a process's one-time costs (an ``@rlbench.benchmark``'s first call, 3x its
    siblings) must not make the commit look as noisy as that outlier."""
    ses = []
    for s in samples:
        if len(s) >= 2:
            logs = np.log(np.asarray(s, dtype=float))
            spread = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
            ses.append(1.2533 * spread / math.sqrt(len(s)))
    return float(np.median(ses)) if ses else 0.0


def _candidates(z: np.ndarray, penalty: float) -> list[int]:
    import ruptures

    if z.size < 2:
        return []
    bkps = ruptures.Binseg(model="l2", min_size=1, jump=1).fit(z.reshape(-1, 1)).predict(pen=penalty * math.log(z.size))
    return [int(b) for b in bkps if 0 < b < z.size]


TRIM_SEGMENT = 0.2
"""Share cut from each end of a segment's commit levels before averaging them (a 20% trimmed mean): nearly as
efficient as the mean under normal noise, and one slow commit (a busy machine) cannot move it much."""


def _interval(
    levels: np.ndarray, a: int, i: int, b: int, sigma: float, df: int, settings: StepSettings
) -> tuple[float, float, float]:
    """Ratio of the levels of segments [a, i) and [i, b) (20%-trimmed means of log levels) and its t interval."""
    from scipy.stats import t, trim_mean

    before, after = levels[a:i], levels[i:b]
    log_ratio = float(trim_mean(after, TRIM_SEGMENT) - trim_mean(before, TRIM_SEGMENT))

    def var(n: int) -> float:  # a trimmed mean's variance over a mean's, under normal noise: 1.06 at 20%
        return (1.06 if int(TRIM_SEGMENT * n) > 0 else 1.0) / n

    half = float(t.ppf(0.5 + settings.confidence / 2, max(df, 1))) * sigma * math.sqrt(var(before.size) + var(after.size))
    return math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half)


RANK_SEARCH = 12
"""From this many commits on, the search runs on the levels' normal scores (:func:`normal_scores`), not on the levels
in units of sigma. Process-level noise on a shared machine is skewed: most commits near a floor, a quarter of them
10-60% slower (a process that ran on a slowed CPU), and those excursions both inflate sigma and pull least-squares
segments; ranks give each commit one vote, whatever its excursion. Measured on the step calibration's samples and on a
pure-Python benchmark beside a neighbour (``docs/history-steps.md``): fewer false steps in every condition, and as many
+10% steps found or more. A level held by fewer than ``min_run`` commits at either end of the series (the newest
commit alone) is still searched for in units of sigma: its one rank cannot pay the penalty. Below ``RANK_SEARCH``
commits ranks carry too little evidence (7 commits of normal scores cannot pay the penalty, however clear the step),
and the repeats' own noise scale is what tells a short history's step."""


def normal_scores(levels: np.ndarray) -> np.ndarray:
    """The levels' ranks as standard normal quantiles (ties share their mean rank): unit variance under no change."""
    from scipy.stats import norm, rankdata

    return np.asarray(norm.ppf((rankdata(levels) - 0.5) / levels.size), dtype=float)


def _noisy_steps(series: Series, settings: StepSettings) -> list[Step]:
    medians = np.array([float(np.median(s)) for s in series.samples])
    n = medians.size
    if n < 2 or not np.all(medians > 0):
        return []
    levels = np.log(medians)
    within = _within_se(series.samples)
    sigma = noise(levels, within)
    df = n - 2  # the noise comes from n - 1 consecutive differences
    cps = _candidates((levels - np.median(levels)) / sigma, settings.penalty)
    if n >= RANK_SEARCH:
        # ranks cannot tell a level held by fewer than min_run commits at either end (the newest commit alone, say):
        # there the search in units of sigma speaks, as for a short history
        ends = [i for i in cps if i < settings.min_run or i > n - settings.min_run]
        cps = sorted(set(_candidates(normal_scores(levels), settings.penalty)) | set(ends))
        return _confirmed(series, levels, cps, sigma, df, settings)
    if sum(len(s) >= 2 for s in series.samples) * 2 > n:  # repeats: room for a step and its revert
        spare = noise(levels, within, keep_out=REVERT)
        if spare < sigma:
            sigma = spare
            cps = _candidates((levels - np.median(levels)) / sigma, settings.penalty)
    return _confirmed(series, levels, cps, sigma, df, settings)


def _confirmed(
    series: Series, levels: np.ndarray, cps: list[int], sigma: float, df: int, settings: StepSettings
) -> list[Step]:
    """The candidates that hold (see the module docstring's step 3)."""
    n = levels.size
    while True:
        results, failing = {}, []
        bounds = [0, *cps, n]
        for k, i in enumerate(cps):
            a, b = bounds[k], bounds[k + 2]
            ratio, low, high = _interval(levels, a, i, b, sigma, df, settings)
            results[i] = (ratio, (low, high))
            short = (i - a < settings.min_run and a > 0) or (b - i < settings.min_run and b < n)
            if not (low > 1.0 or high < 1.0) or abs(ratio - 1.0) < settings.min_effect or short:
                strength = abs(math.log(ratio)) / max(math.log(high / low) / 2, 1e-12)  # >= 1: the interval excludes 1
                failing.append((strength, i))
        if not failing:
            return [_step(series, i, *results[i]) for i in cps]
        cps.remove(min(failing)[1])  # the weakest goes; the others are tested again against their new neighbours


def detect_steps(series: Series, settings: StepSettings = DEFAULTS) -> list[Step]:
    """The steps of one series, oldest first (see the module docstring). ``phases`` is left empty: see
    :func:`detect_all`."""
    if len(series.commits) != len(series.samples):
        raise ValueError(f"series {series.key()}: {len(series.commits)} commits but {len(series.samples)} sample lists")
    marked = marked_commits(series) if not series.exact else set()  # a counter's count does not care about the load
    loads = list(series.loads) if len(series.loads or []) == len(series.commits) else [None] * len(series.commits)
    present = [(c, s, v) for c, s, v in zip(series.commits, series.samples, loads) if len(s) and c not in marked]
    if len(present) != len(series.commits):  # a commit without samples, or measured under another load, is not a level
        series = Series(
            series.machine,
            series.benchmark,
            series.params,
            series.metric,
            series.unit,
            series.direction,
            series.exact,
            [c for c, _, _ in present],
            [list(s) for _, s, _ in present],
            series.values,
            [v for _, _, v in present],
        )
    if series.exact:
        return _exact_steps(series)
    return _noisy_steps(series, settings)


def _is_phase(metric: str) -> bool:
    return metric.startswith(PHASE_PREFIXES)


def _phase_name(metric: str) -> str:
    return metric.split("/", 1)[1] if "/" in metric else metric


def _merged_order(lists: list[list[str]]) -> dict[str, int]:
    """A rank for every commit consistent with each list's order (a stable topological merge)."""
    after: dict[str, set[str]] = defaultdict(set)
    indeg: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for commits in lists:
        for c in commits:
            first_seen.setdefault(c, len(first_seen))
            indeg.setdefault(c, 0)
        for x, y in zip(commits, commits[1:]):
            if y not in after[x]:
                after[x].add(y)
                indeg[y] += 1
    ready = sorted((c for c, d in indeg.items() if d == 0), key=first_seen.__getitem__)
    rank: dict[str, int] = {}
    while ready:
        c = ready.pop(0)
        rank[c] = len(rank)
        for y in sorted(after[c], key=first_seen.__getitem__):
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
        ready.sort(key=first_seen.__getitem__)
    for c in sorted(set(indeg) - set(rank), key=first_seen.__getitem__):  # a cycle (inconsistent orders): first seen
        rank[c] = len(rank)
    return rank


def detect_all(series: list[Series], settings: StepSettings = DEFAULTS) -> list[Step]:
    """Steps of every series, each with the phases that stepped with it (see :class:`Step`). Ordered by series key,
    then commit."""
    steps = {s.key(): detect_steps(s, settings) for s in series}
    groups: dict[tuple[str, str, str], list[Series]] = defaultdict(list)
    for s in series:
        groups[(s.machine, s.benchmark, json.dumps(s.params, sort_keys=True, default=str))].append(s)
    for members in groups.values():
        rank = _merged_order([s.commits for s in members])
        for s in members:
            for step in steps[s.key()]:
                moved = []
                for other in members:
                    if other is s or not _is_phase(other.metric):
                        continue
                    if _is_phase(s.metric) and not _phase_name(other.metric).startswith(_phase_name(s.metric) + "/"):
                        continue
                    for o in steps[other.key()]:
                        if abs(rank[o.first_bad] - rank[step.first_bad]) <= 1:
                            size = abs(math.log(o.ratio)) if o.ratio > 0 and math.isfinite(o.ratio) else math.inf
                            moved.append((-size, other.metric))
                            break
                step.phases = [m for _, m in sorted(moved)]
    return [st for key in sorted(steps) for st in steps[key]]

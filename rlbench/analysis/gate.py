"""The CI gate: thresholds on compared metrics -> PASS (0), FAIL (1) or INCONCLUSIVE, and errors (2).

Three verdicts per threshold ``metric:X%`` (the direction, higher or lower is better, comes from the records):

* **FAIL** -- the candidate is worse by more than ``X%`` *and* the 95% interval of the ratio lies entirely on the
  worse side of 1 (significantly worse).
* **PASS** -- the interval rules out a regression larger than ``X%``: for a higher-is-better metric its lower bound
  is above ``1 - X%``, for a lower-is-better one its upper bound is below ``1 + X%``. Noise-free counters (exact
  ratios) pass when unchanged, better, or worse by no more than ``X%``.
* **INCONCLUSIVE** -- neither: the run was too noisy to tell. Its advice names the interval, the smallest regression
  the run did rule out, and the rounds that would rule out ``X%`` at the measured noise (the interval's half-width
  shrinks as ``1/sqrt(rounds)``), or a counter to gate on instead. ``on_inconclusive`` maps it to an exit code
  (``error``: 2, the default; ``pass``: 0; ``fail``: 1).

**Load** (other processes' CPU use, recorded per repeat) is judged where it could explain the result
(:func:`rlbench.analysis.compare.load_check`). Interleaved rounds (``ab``, ``bisect``, ``history confirm``) are judged
per pair: a steady neighbour loads both halves of every pair alike, so the verdict rests on the interval; a few pairs
whose halves saw very different load are dropped (the outcome says how many); a load that differs between the sides
beyond chance (a neighbour during one side's runs only), or pairs too few to show the sides' mean load within 10
points of each other, make a timing PASS INCONCLUSIVE ("machine was busy") and
refuse a verdict the load could have produced. Separate runs (``gate`` on two stored runs) are judged per side: loads 10
points apart, or either side above half the machine, do the same.

A gate never passes because nothing was measured: a threshold whose metric is missing on either side, or has no
samples, is an error. Speed never buys learning: when both sides recorded ``eval_return``, the gate also checks that
the candidate's median return did not drop by more than ``learning_drop`` (default 10%), with the same three verdicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from rlbench.analysis.compare import (
    RATE_OR_TIME_UNITS,
    CaseResult,
    LoadCheck,
    compare,
    level,
    load_check,
    power_factor,
    without_seeds,
)
from rlbench.core.errors import DataError, UsageError
from rlbench.results.metrics import EVAL_RETURN
from rlbench.results.records import Record

_THRESHOLD = re.compile(r"^(?P<metric>[A-Za-z0-9_./-]+(@[A-Za-z0-9_./-]+)?):(?P<value>\d+(\.\d+)?)%$")
LEARNING_METRIC = EVAL_RETURN


@dataclass(frozen=True)
class Threshold:
    """``metric`` may get worse by at most ``fraction`` (0.05 for ``5%``)."""

    metric: str
    fraction: float

    @classmethod
    def parse(cls, text: str) -> Threshold:
        """Parse ``metric:X%``.

        Raises:
            UsageError: For anything else.
        """
        m = _THRESHOLD.match(text.strip())
        if not m:
            raise UsageError(
                f"malformed threshold {text!r}: use METRIC:PERCENT%, e.g. sps:5% or time/update:10%, or a followed "
                "role's METRIC@ROLE:PERCENT%, e.g. time/wait/queue@learner:10%"
            )
        fraction = float(m["value"]) / 100.0
        if not math.isfinite(fraction):
            raise UsageError(f"malformed threshold {text!r}: the percentage must be a finite number")
        return cls(m["metric"], fraction)


PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
ON_INCONCLUSIVE = {"error": 2, "pass": 0, "fail": 1}
"""What ``--inconclusive`` makes of an INCONCLUSIVE verdict: the exit code."""
COUNTERS = ("ops/iteration", "syncs/iteration", "copies/iteration")
"""Noise-free counters to suggest when a timing cannot be judged, in order of preference."""


@dataclass
class Check:
    """One threshold applied to one case.

    Attributes:
        threshold: The threshold.
        result: The comparison of the case.
        verdict: ``PASS``, ``FAIL`` or ``INCONCLUSIVE``.
        reason: The row's words (they match the interval).
        advice: For INCONCLUSIVE: what would give a verdict (one clause, no newline).
        busy: INCONCLUSIVE only because the machine was busy (a timing PASS on a heavily loaded machine).
    """

    threshold: Threshold
    result: CaseResult
    verdict: str
    reason: str
    advice: str = ""
    busy: bool = False

    @property
    def failed(self) -> bool:
        """The check found a regression."""
        return self.verdict == FAIL


@dataclass
class GateOutcome:
    """All checks and the exit code they imply (0 pass, 1 regression, INCONCLUSIVE per ``on_inconclusive``)."""

    checks: list[Check]
    on_inconclusive: str = "error"
    confidence: float = 0.95  #: the level of every check's interval (higher at a look of ``ab --rounds auto``)
    load: LoadCheck | None = None  #: the machine's load on both sides, as judged

    def load_notes(self) -> list[str]:
        """Lines on the machine's load: what each side saw and the pairs dropped (none when it was not recorded)."""
        if self.load is None or self.load.note is None:
            return []
        return [self.load.note]

    @property
    def verdict(self) -> str:
        """FAIL if any check failed, else INCONCLUSIVE if any could not be judged, else PASS."""
        verdicts = {c.verdict for c in self.checks}
        return FAIL if FAIL in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else PASS

    @property
    def exit_code(self) -> int:
        """1 on a regression; for INCONCLUSIVE, the code ``on_inconclusive`` names (2 by default); else 0."""
        verdict = self.verdict
        if verdict == FAIL:
            return 1
        return ON_INCONCLUSIVE[self.on_inconclusive] if verdict == INCONCLUSIVE else 0

    def inconclusive_line(self) -> str:
        """One line on the checks that could not be judged, and what would judge them ('' when none)."""
        open_ = [c for c in self.checks if c.verdict == INCONCLUSIVE]
        if not open_:
            return ""
        first = open_[0]
        more = f" (also inconclusive: {', '.join(c.threshold.metric for c in open_[1:])})" if len(open_) > 1 else ""
        return (
            f"gate INCONCLUSIVE for {first.threshold.metric} (limit {100 * first.threshold.fraction:g}%): "
            f"{first.advice}{more}; --inconclusive pass|fail decides such runs instead"
        )


def _worse_by(r: CaseResult) -> float:
    """How much worse the candidate is (positive) as a fraction of the baseline."""
    return -r.improvement


def _significantly_worse(r: CaseResult) -> bool:
    if not r.significant:
        return False
    return r.ratio < 1.0 if r.case.direction == "higher" else r.ratio > 1.0


def rounds_needed(r: CaseResult, fraction: float) -> int | None:
    """Rounds (paired seeds, or repeats per side) that would rule out a regression of ``fraction`` at this noise.

    The interval's half-width on the worse side shrinks as ``1/sqrt(rounds)``; assuming the estimate stays where it
    is, ruling out ``fraction`` needs that half-width below the distance from the estimate to the limit:
    ``units * (half_width / distance)**2``. ``None`` when the estimate itself is at or past the limit (no number of
    rounds rules it out) or the noise is unknown.
    """
    h = r.worse_half_width
    limit = 1.0 - fraction if r.case.direction == "higher" else 1.0 + fraction
    distance = r.ratio - limit if r.case.direction == "higher" else limit - r.ratio
    if not (math.isfinite(h) and math.isfinite(distance)) or distance <= 0 or h <= 0 or r.units < 1:
        return None
    return max(r.units + 1, math.ceil(r.units * (h / distance) ** 2))


def _counter_hint(counters: list[str]) -> str:
    found = [c for c in COUNTERS if c in counters] + [c for c in counters if c not in COUNTERS]
    name = found[0] if found else "ops/iteration"
    where = "" if found else " (record it with `profile --count-ops`)"
    return f"or gate on a noise-free counter such as --fail {name}:0%{where}"


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def _judge(r: CaseResult, t: Threshold, counters: list[str]) -> Check:
    """The verdict of one threshold on one compared case, with words that match its interval."""
    worse = _worse_by(r)
    limit = f"limit {100 * t.fraction:g}%"
    if r.exact:  # noise-free counts: the ratio is exact
        if math.isinf(worse):
            change = "rose" if r.cand_median > r.base_median else "fell"
            reason = f"{change} from {r.base_median:,.0f} to {r.cand_median:,.0f} (noise-free count, exact)"
        elif worse == 0:
            reason = f"unchanged (exact; {limit})"
        else:
            reason = f"{'better' if worse < 0 else 'worse'} by {_pct(abs(worse))} (exact; {limit})"
        return Check(t, r, FAIL if worse > t.fraction else PASS, reason)
    ci = f"{level(r.confidence)} CI of ratio [{r.ci_low:.3f}, {r.ci_high:.3f}]"
    if _significantly_worse(r) and worse > t.fraction:
        return Check(t, r, FAIL, f"worse by {_pct(worse)} (> {100 * t.fraction:g}%), {ci}")
    if r.significant:
        words = f"{'better' if worse < 0 else 'worse'} by {_pct(abs(worse))}"
    else:
        words = f"no clear change ({r.change_range})"
    bound = r.worst_regression
    if bound < t.fraction:
        ruled = "any regression" if bound <= 0 else f"a regression above {_pct(bound)}"
        return Check(t, r, PASS, f"{words}; rules out {ruled} ({limit})")
    reason = f"{words}; rules out only a regression above {_pct(bound)} ({limit})"
    n = rounds_needed(r, t.fraction)
    unit = "paired rounds" if r.paired else "repeats per side"
    if n is not None:
        more = f"about {n} {unit} (now {r.units}) would rule out {100 * t.fraction:g}% at this noise"
    elif worse > 0:
        half = (r.ci_high - r.ci_low) / 2.0
        tell = max(r.units + 1, math.ceil(r.units * (half / worse) ** 2)) if half > 0 and r.units else None
        about = f"about {tell} {unit} (now {r.units})" if tell else f"more {unit}"
        more = f"its estimate is already {_pct(worse)} worse, past the limit: {about} would tell a regression from noise"
    else:
        more = f"no number of rounds rules out a {100 * t.fraction:g}% change of a noisy metric; give a limit above 0%"
    advice = (
        f"{ci} rules out only a regression above {_pct(bound)}, not {100 * t.fraction:g}%; {more}, {_counter_hint(counters)}"
    )
    return Check(t, r, INCONCLUSIVE, reason, advice)


def _rerun(load: LoadCheck) -> str:
    """What would give a verdict the load could not spoil, never what the command already did: interleaved rounds
    with a load that differed between the sides need a steadier load; separate runs need interleaved rounds."""
    if load.interleaved and load.unsettled and not load.lopsided:
        return (
            "the rounds were interleaved, but their loads scatter too much to show both sides saw the same machine "
            "(the kernel reads a short run's load in 10 ms ticks): more rounds (--max-rounds) or longer runs would "
            "show it, unless one side really was busier"
        )
    if load.interleaved:
        return (
            "the rounds were interleaved, so a steady neighbour would have loaded both sides alike: this one did not "
            "(one that runs during one side's runs only?); rerun when the other processes' load is steady or gone"
        )
    return (
        "the two runs were measured separately, so the load was not shared by the sides: compare them with "
        "`rlbench ab` (interleaved rounds, judged per pair) or rerun both at the same load"
    )


def _busy(check: Check, load: LoadCheck) -> Check:
    """A timing PASS that the load could have produced cannot be trusted: INCONCLUSIVE, "machine was busy"."""
    if check.verdict != PASS or check.result.exact or check.result.case.unit not in RATE_OR_TIME_UNITS:
        return check
    reason = f"{check.reason}; but the machine was busy"
    advice = (
        f"machine was busy ({load.note}): other processes' load can hide a regression, so a PASS cannot be trusted; "
        f"{_rerun(load)}, or pass --allow-busy"
    )
    return Check(check.threshold, check.result, INCONCLUSIVE, reason, advice, busy=True)


def evaluate(
    base: list[Record],
    cand: list[Record],
    thresholds: list[Threshold],
    learning_drop: float | None = 0.10,
    confidence: float = 0.95,
    ignore_params: tuple[str, ...] = (),
    allow_busy: bool = False,
    on_inconclusive: str = "error",
    more: str = "run more --repeats or ab --rounds",
    interleaved: bool | None = None,
) -> GateOutcome:
    """Apply the thresholds (and the learning check) to the comparison of ``base`` and ``cand``.

    ``more`` is what the message of a metric with too few samples tells the user to do (the calling command's option).
    ``interleaved`` says whether the sides' rounds alternated (``ab``, ``bisect``, ``history confirm``, ``calibrate``);
    ``None`` tells it from the records' times (:func:`rlbench.analysis.compare.interleaved_in_time`). Interleaved pairs
    whose halves saw very different load are left out of the timings (:attr:`GateOutcome.load` says how many).

    Raises:
        DataError: A threshold's metric is missing on a side, has no samples, or has no direction; or the two sides'
            different load could explain a significant timing result (unless ``allow_busy``).
        UsageError: A threshold that could never fail, or an unknown ``on_inconclusive``.
    """
    if on_inconclusive not in ON_INCONCLUSIVE:
        raise UsageError(f"--inconclusive {on_inconclusive!r}: choose one of {', '.join(ON_INCONCLUSIVE)}")
    metrics = [t.metric for t in thresholds]
    learning = (
        learning_drop is not None
        and any(r.metric == LEARNING_METRIC for r in base)
        and any(r.metric == LEARNING_METRIC for r in cand)
    )
    if learning:
        metrics.append(LEARNING_METRIC)
    load = load_check(base, cand, interleaved)
    if load.dropped and not allow_busy:
        base, cand = without_seeds(base, load.dropped), without_seeds(cand, load.dropped)
    results = compare(base, cand, min_effect=0.0, confidence=confidence, metrics=metrics, ignore_params=ignore_params)
    by_metric: dict[str, list[CaseResult]] = {}
    for r in results:
        by_metric.setdefault(r.case.metric, []).append(r)
    counters = sorted({r.metric for r in base if r.unit == "count"} & {r.metric for r in cand if r.unit == "count"})
    checks: list[Check] = []
    rules = list(thresholds)
    if learning:
        rules.append(Threshold(LEARNING_METRIC, learning_drop))  # type: ignore[arg-type]
    for t in rules:
        found = by_metric.get(t.metric)
        if not found:
            where = [
                side for side, recs in (("baseline", base), ("candidate", cand)) if not any(r.metric == t.metric for r in recs)
            ]
            raise DataError(
                f"gate: metric {t.metric!r} is missing from the {' and '.join(where) or 'matched cases'}; "
                "nothing to compare (a gate never passes on missing data)"
            )
        for r in found:
            if r.n_base == 0 or r.n_cand == 0 or math.isnan(r.ratio):
                raise DataError(f"gate: metric {t.metric!r} has no usable samples (baseline {r.n_base}, candidate {r.n_cand})")
            if r.insufficient:
                raise DataError(
                    f"gate: metric {t.metric!r} has too few samples for a confidence interval (baseline {r.n_base}, "
                    f"candidate {r.n_cand}; at least 5 each, or 5 shared seeds): {more}"
                )
            if r.case.direction not in ("higher", "lower"):
                raise DataError(f"gate: metric {t.metric!r} has no better direction; it cannot be gated")
            if r.case.direction == "higher" and t.fraction >= 1.0:
                raise UsageError(
                    f"--fail {t.metric}:{100 * t.fraction:g}%: {t.metric} is higher-is-better, so it can never get worse "
                    "by 100% or more and this gate could never fail; choose a threshold below 100%"
                )
            checks.append(_judge(r, t, counters))
    refuse_if_busy(base, cand, [c.result for c in checks], allow_busy, load)
    if load.heavy and not allow_busy:
        checks = [_busy(c, load) for c in checks]
    return GateOutcome(checks, on_inconclusive, confidence, load)


def detectable_note(results: list[CaseResult]) -> str | None:
    """One line: the regression size this run could detect per metric, at its measured noise (``None`` if none)."""
    parts = []
    seen = set()
    for r in results:
        if r.case.metric in seen:
            continue
        seen.add(r.case.metric)
        d = r.detectable
        if r.exact:
            parts.append(f"`{r.case.metric}` any change (exact count)")
        elif math.isfinite(d):
            parts.append(f"`{r.case.metric}` {_pct(d)}")
    if not parts:
        return None
    confidence = results[0].confidence
    return (
        f"noise: at this run's measured noise, a regression this large would be found 4 times in 5 "
        f"({power_factor(confidence):.2f} × the {level(confidence)} interval's half-width): "
        + ", ".join(parts[:12])
        + (f", and {len(parts) - 12} more" if len(parts) > 12 else "")
    )


class MachineBusy(DataError):
    """The gate refused a verdict: the two sides' different machine load alone could explain the result (exit 2)."""


def refuse_if_busy(
    base: list[Record],
    cand: list[Record],
    results: list[CaseResult],
    allow_busy: bool,
    load: LoadCheck | None = None,
) -> None:
    """Refuse verdicts that the two sides' different machine load could have produced on its own.

    ``load`` is the check already made (default: :func:`rlbench.analysis.compare.load_check` of the records, interleaving
    told from their times).

    Raises:
        MachineBusy: Unless ``allow_busy``, when a significant timing result leans the way the load difference pushes.
    """
    load = load if load is not None else load_check(base, cand)
    busy = [r for r in results if r.significant and load.explains(r)]
    if busy and not allow_busy:
        names = ", ".join(sorted({r.case.metric for r in busy})[:4])
        rerun = _rerun(load)
        rerun = rerun[:1].upper() + rerun[1:]
        raise MachineBusy(
            f"machine was busy: {load.note}; the difference alone could explain the result for {names}. {rerun}, "
            "or pass --allow-busy to get the verdict anyway; a noise-free counter (--fail ops/iteration:0%) is judged "
            "whatever the load"
        )


FIRST_LOOK = 10
"""The round of ``--rounds auto``'s first look (see :func:`planned_looks`): ``--max-rounds`` may not be below it."""
DEFAULT_MAX_ROUNDS = 40
"""``--max-rounds`` of ``ab``, ``bisect`` and ``history confirm`` when not given."""


def check_max_rounds(max_rounds: int, flag: str = "--max-rounds") -> None:
    """Refuse a ``--max-rounds`` below the first look.

    Raises:
        UsageError: ``max_rounds`` below :data:`FIRST_LOOK` (its one look would come too early to trust).
    """
    if max_rounds < FIRST_LOOK:
        raise UsageError(
            f"{flag} {max_rounds} is below the first look of --rounds auto, after {FIRST_LOOK} rounds (over fewer rounds "
            f"the interval of a median of per-round ratios is narrower than its level says); give {flag} {FIRST_LOOK} or "
            "more"
        )


def planned_looks(max_rounds: int, first: int = FIRST_LOOK) -> list[int]:
    """The rounds at which ``rlbench ab --rounds auto`` looks at its data: ``first``, doubling, and ``max_rounds``.

    Planned before the first round (a group-sequential design): the number of looks fixes what each may spend. The
    first look is at 10 rounds: the interval is a bootstrap of the median of per-round ratios, and over fewer rounds
    it is narrower than its level says (with 5 rounds its ends are about the 2nd and 4th of five values, which hold
    the true median 62.5% of the time, not 98%). ``rlbench calibrate`` measured it: looks from round 5 gave 2 false
    FAILs in 20 A/A comparisons of ``ppo-cartpole``, both at round 5.
    """
    if max_rounds < 2:
        raise UsageError(f"--max-rounds must be at least 2, got {max_rounds}")
    looks, n = [], max(2, min(first, max_rounds))
    while n < max_rounds:
        looks.append(n)
        n *= 2
    return [*looks, max_rounds]


def look_confidence(confidence: float, looks: int) -> float:
    """The interval level each of ``looks`` planned looks uses: Bonferroni alpha spending.

    Each look spends ``(1 - confidence) / looks`` of the error rate, so the chance that *any* look's interval misses
    the true ratio (a false FAIL or a false PASS at any look) stays within ``1 - confidence`` however many looks stop
    early. Conservative (the looks are correlated), and exact in what it promises.
    """
    return 1.0 - (1.0 - confidence) / max(1, looks)


@dataclass(frozen=True)
class AutoRounds:
    """The sequential design of ``rlbench ab --rounds auto``, planned before the first round.

    Attributes:
        looks: The rounds after which the gate looks (:func:`planned_looks`).
        confidence: The interval level every look uses (:func:`look_confidence` of 95% over the looks).
    """

    looks: tuple[int, ...]
    confidence: float

    @classmethod
    def plan(cls, max_rounds: int, confidence: float = 0.95) -> AutoRounds:
        """Looks at 10, 20, 40, ... and ``max_rounds``; at most ``1 - confidence`` false verdicts over them all.

        Raises:
            UsageError: ``max_rounds`` below 2.
        """
        looks = planned_looks(max_rounds)
        return cls(tuple(looks), look_confidence(confidence, len(looks)))


def gate_look(gate: Callable[[], GateOutcome]) -> tuple[GateOutcome | None, bool]:
    """One look of ``--rounds auto``: the gate's outcome at this look, and whether the rounds stop here.

    ``gate`` is the :func:`evaluate` call of the final verdict, with the design's per-look ``confidence``. They stop
    when some threshold FAILs or every threshold is PASS or FAIL. A refusal (the machine was busy, too few samples
    so far) decides nothing yet: the outcome is ``None`` and the rounds go on. ``rlbench ab`` and ``rlbench
    calibrate`` both decide with this function.
    """
    try:
        outcome = gate()
    except DataError:
        return None, False
    return outcome, outcome.verdict == FAIL or all(c.verdict != INCONCLUSIVE for c in outcome.checks)

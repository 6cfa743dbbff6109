"""The CI gate: thresholds on compared metrics -> pass (0), regression (1), error (2).

A threshold ``metric:X%`` fails when the candidate is worse than the baseline by more than ``X%``
*and* the 95% interval of the ratio lies entirely on the worse side of 1 (significance); the
direction (higher or lower is better) comes from the records. ``metric:0%`` suits noise-free
counters: any significant change for the worse fails. A gate never passes because nothing was
measured: a threshold whose metric is missing on either side, or has no samples, is an error.

Speed never buys learning: when both sides recorded ``eval_return``, the gate also fails a candidate
whose median return dropped by more than ``learning_drop`` (default 10%), significantly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rlbench.analysis.compare import CaseResult, compare, load_check
from rlbench.core.errors import DataError, UsageError
from rlbench.results.metrics import EVAL_RETURN
from rlbench.results.records import Record

_THRESHOLD = re.compile(r"^(?P<metric>[A-Za-z0-9_./-]+):(?P<value>\d+(\.\d+)?)%$")
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
            raise UsageError(f"malformed threshold {text!r}: use METRIC:PERCENT%, e.g. sps:5% or time/update:10%")
        fraction = float(m["value"]) / 100.0
        if not math.isfinite(fraction):
            raise UsageError(f"malformed threshold {text!r}: the percentage must be a finite number")
        return cls(m["metric"], fraction)


@dataclass
class Check:
    """One threshold applied to one case."""

    threshold: Threshold
    result: CaseResult
    failed: bool
    reason: str


@dataclass
class GateOutcome:
    """All checks and the exit code they imply (0 pass, 1 regression)."""

    checks: list[Check]

    @property
    def exit_code(self) -> int:
        """1 if any check failed, else 0."""
        return 1 if any(c.failed for c in self.checks) else 0


def _worse_by(r: CaseResult) -> float:
    """How much worse the candidate is (positive) as a fraction of the baseline."""
    return -r.improvement


def _significantly_worse(r: CaseResult) -> bool:
    if not r.significant:
        return False
    return r.ratio < 1.0 if r.case.direction == "higher" else r.ratio > 1.0


def evaluate(
    base: list[Record],
    cand: list[Record],
    thresholds: list[Threshold],
    learning_drop: float | None = 0.10,
    confidence: float = 0.95,
    ignore_params: tuple[str, ...] = (),
    allow_busy: bool = False,
) -> GateOutcome:
    """Apply the thresholds (and the learning check) to the comparison of ``base`` and ``cand``.

    Raises:
        DataError: A threshold's metric is missing on a side, has no samples, or has no direction.
    """
    metrics = [t.metric for t in thresholds]
    learning = (
        learning_drop is not None
        and any(r.metric == LEARNING_METRIC for r in base)
        and any(r.metric == LEARNING_METRIC for r in cand)
    )
    if learning:
        metrics.append(LEARNING_METRIC)
    results = compare(base, cand, min_effect=0.0, confidence=confidence, metrics=metrics, ignore_params=ignore_params)
    by_metric: dict[str, list[CaseResult]] = {}
    for r in results:
        by_metric.setdefault(r.case.metric, []).append(r)
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
                    f"candidate {r.n_cand}; at least 5 each, or 5 shared seeds): run more --repeats or ab --rounds"
                )
            if r.case.direction not in ("higher", "lower"):
                raise DataError(f"gate: metric {t.metric!r} has no better direction; it cannot be gated")
            if r.case.direction == "higher" and t.fraction >= 1.0:
                raise UsageError(
                    f"--fail {t.metric}:{100 * t.fraction:g}%: {t.metric} is higher-is-better, so it can never get worse "
                    "by 100% or more and this gate could never fail; choose a threshold below 100%"
                )
            worse = _worse_by(r)
            failed = _significantly_worse(r) and worse > t.fraction
            if math.isinf(worse):
                change = "rose" if r.cand_median > r.base_median else "fell"
                reason = f"{change} from {r.base_median:,.0f} to {r.cand_median:,.0f} (noise-free count, exact)"
            elif failed:
                reason = (
                    f"worse by {100 * worse:.1f}% (> {100 * t.fraction:g}%), 95% CI of ratio [{r.ci_low:.3f}, {r.ci_high:.3f}]"
                )
            elif worse > t.fraction:
                reason = (
                    f"worse by {100 * worse:.1f}% but not significant (95% CI [{r.ci_low:.3f}, {r.ci_high:.3f}] contains 1)"
                )
            elif worse == 0:
                reason = f"unchanged (limit {100 * t.fraction:g}%)"
            else:
                reason = f"{'better' if worse < 0 else 'worse'} by {100 * abs(worse):.1f}% (limit {100 * t.fraction:g}%)"
            checks.append(Check(t, r, failed, reason))
    refuse_if_busy(base, cand, [c.result for c in checks], allow_busy)
    return GateOutcome(checks)


def refuse_if_busy(base: list[Record], cand: list[Record], results: list[CaseResult], allow_busy: bool) -> None:
    """Refuse verdicts that the two sides' different machine load could have produced on its own.

    Raises:
        DataError: Unless ``allow_busy``, when a significant timing result leans the way the load difference pushes.
    """
    load = load_check(base, cand)
    busy = [r for r in results if r.significant and load.explains(r)]
    if busy and not allow_busy:
        names = ", ".join(sorted({r.case.metric for r in busy})[:4])
        raise DataError(
            f"machine was busy: {load.note}; the difference alone could explain the result for {names}. Rerun on a quiet "
            "machine or use `rlbench ab` (interleaved rounds), or pass --allow-busy to get the verdict anyway"
        )

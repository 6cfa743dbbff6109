"""Pure summary statistics of samples (no I/O, no torch)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def _finite(samples: Sequence[float]) -> list[float]:
    return sorted(float(v) for v in samples if v is not None and math.isfinite(v))


def quantile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (NumPy's default method) of the finite samples; NaN if none."""
    xs = _finite(samples)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(samples: Sequence[float]) -> float:
    """Median of the finite samples; NaN if none."""
    return quantile(samples, 0.5)


@dataclass(frozen=True)
class Summary:
    """Median and spread of a set of samples.

    Attributes:
        n: Number of finite samples.
        median: Median.
        q1: First quartile.
        q3: Third quartile.
        min: Smallest sample.
        max: Largest sample.
        mean: Arithmetic mean.
        std: Sample standard deviation (0 for a single sample).
    """

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    mean: float
    std: float

    @property
    def iqr(self) -> float:
        """Interquartile range."""
        return self.q3 - self.q1


def summarize(samples: Sequence[float]) -> Summary:
    """Summary of the finite samples (all fields NaN, ``n == 0`` when there are none)."""
    xs = _finite(samples)
    if not xs:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan)
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((v - mean) ** 2 for v in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return Summary(len(xs), quantile(xs, 0.5), quantile(xs, 0.25), quantile(xs, 0.75), xs[0], xs[-1], mean, std)


def amdahl_bound(share: float, factor: float = math.inf) -> float:
    """Overall speed-up if a part taking ``share`` of the time became ``factor`` times faster.

    ``1 / ((1 - share) + share / factor)``; with ``factor=inf`` the part's time drops to zero.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must lie in [0, 1], got {share}")
    rest = 1.0 - share
    tail = 0.0 if math.isinf(factor) else share / factor
    return math.inf if rest + tail == 0 else 1.0 / (rest + tail)

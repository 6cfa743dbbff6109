"""The distribution-free interval of a median, for any layer: the history site's per-commit intervals, the harnesses'
ratios. Order statistics of the binomial; no distribution assumed, no resampling."""

from __future__ import annotations

import math
from collections.abc import Sequence


def median_interval(samples: Sequence[float]) -> tuple[float, float, float, int, bool]:
    """Median, interval low and high, sample count, and whether the interval is a 95% one.

    With 6 or more finite samples the interval is the distribution-free 95% interval of the median (order statistics
    ``x[k-1] .. x[n-k]`` with the largest ``k`` that keeps ``P(Binomial(n, 1/2) < k) <= 2.5%``); with fewer it is the
    range of the samples, which cannot reach 95% (``False``).
    """
    xs = sorted(float(v) for v in samples if v is not None and math.isfinite(v))
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan, 0, False
    mid = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    if n < 6:
        return mid, xs[0], xs[-1], n, False
    k = _median_rank(n)
    return mid, xs[k - 1], xs[n - k], n, True


def _median_rank(n: int) -> int:
    """The largest k >= 1 with P(Binomial(n, 1/2) <= k - 1) <= 0.025 (normal approximation beyond 300 samples)."""
    if n > 300:
        return max(1, math.floor(n / 2 - 0.98 * math.sqrt(n)))
    total, cdf, k = 2.0**n, 0.0, 0
    while True:
        cdf += math.comb(n, k) / total
        if cdf > 0.025:
            return max(1, k)
        k += 1

"""Summary statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from rlbench.analysis.stats import amdahl_bound, median, quantile, summarize


def test_quantiles_match_numpy_linear_method() -> None:
    xs = [4.0, 1.0, 3.0, 2.0]
    assert median(xs) == 2.5
    assert quantile(xs, 0.25) == 1.75  # numpy.quantile([1,2,3,4], .25) == 1.75
    assert quantile(xs, 0.75) == 3.25
    assert math.isnan(median([]))
    assert median([1.0, float("nan"), 3.0]) == 2.0


def test_summary() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.n, s.median, s.min, s.max) == (5, 3.0, 1.0, 10.0)
    assert s.iqr == 2.0
    assert s.mean == 4.0
    assert s.std == pytest.approx(math.sqrt((9 + 4 + 1 + 0 + 36) / 4))
    assert summarize([]).n == 0


def test_amdahl_bound() -> None:
    assert amdahl_bound(0.5) == 2.0
    assert amdahl_bound(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl_bound(0.0) == 1.0
    assert math.isinf(amdahl_bound(1.0))
    with pytest.raises(ValueError):
        amdahl_bound(1.5)

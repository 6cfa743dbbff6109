"""Iteration snapshots kept packed (rlbench.profiling.attribution.IterationMark) and read as one matrix
(rlbench.profiling.results.snapshot_matrix): the packed path gives what the dict path gives."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlbench.profiling.attribution import IterationMark
from rlbench.profiling.results import snapshot_matrix


@st.composite
def _runs(draw):
    """Running totals that only gain keys and grow, snapshotted at some boundaries: (snapshots, final totals)."""
    keys = [f"phase{i}" for i in range(draw(st.integers(1, 8)))]
    sizes = sorted(draw(st.lists(st.integers(0, len(keys)), min_size=1, max_size=12)))
    snaps, totals = [], {}
    for n in sizes:
        for k in keys[:n]:
            totals[k] = totals.get(k, 0.0) + draw(st.floats(0, 10, allow_nan=False))
        snaps.append(dict(totals))
    for k in keys:
        totals[k] = totals.get(k, 0.0) + 1.0
    return snaps, totals


@given(_runs())
def test_packed_marks_give_the_matrix_and_snapshots_the_dicts_give(run):
    snaps, final = run
    keys = list(final)
    packed = [IterationMark(i, i, packed=array("d", s.values()).tobytes(), keys=keys) for i, s in enumerate(snaps)]
    plain = [IterationMark(i, i, dict(s)) for i, s in enumerate(snaps)]
    k1, m1 = snapshot_matrix(packed, final)
    k2, m2 = snapshot_matrix(plain, final)
    assert k1 == k2 == keys
    np.testing.assert_array_equal(m1, m2)
    assert [m.excl for m in packed] == snaps
    # once read, a packed mark still takes the packed path
    assert np.array_equal(snapshot_matrix(packed, final)[1], m1)


def test_marks_from_elsewhere_with_keys_the_totals_lack_add_them_after():
    marks = [IterationMark(0.0, 0, {"gone": 1.0}), IterationMark(1.0, 1, {"env": 2.0})]
    keys, m = snapshot_matrix(marks, {"env": 3.0})
    assert keys == ["env", "gone"]
    np.testing.assert_array_equal(m, [[0.0, 1.0], [2.0, 0.0], [3.0, 0.0]])


def test_a_snapshot_longer_than_its_keys_is_refused():
    with pytest.raises(ValueError, match="holds 2 phases, its keys only 1"):
        IterationMark(0.0, 0, packed=array("d", [1.0, 2.0]).tobytes(), keys=["env"])

"""Issue 58's must-show: a 30% slowdown bisected beside a CPU-bound neighbour, then confirmed in the history.

The repository, the bisect (with ``python -c "while True: pass"`` running beside it the whole time), the history and
``history confirm`` are made once a session by the ``loaded_regression`` fixture (tests/history/conftest.py), which
runs alone under pytest-xdist (it measures time) and in the same worker as tests/history/test_site_browser.py, whose
browser test checks the published page.
"""

from __future__ import annotations

import json

import pytest

from tests.history.conftest import rlbench


@pytest.mark.slow
def test_bisect_beside_a_busy_neighbour_names_the_commit_that_added_30_percent(loaded_regression: dict) -> None:
    """Issue 58's must-show: `rlbench bisect` with a CPU-bound neighbour running during the whole bisect (a 2-core
    machine: the neighbour is half of it) names the slow commit, with the rounds and seconds it used."""
    out, shas = loaded_regression["bisect"], loaded_regression["shas"]
    assert out["status"] == "found" and out["first_bad"] == shas["slow"], out
    assert out["last_good"] == shas["docs1"] and out["rounds"] == "auto" and out["max_rounds"] == 40
    assert out["warmup"] == 1 and out["rounds_run"] == sum(t["rounds"] for t in out["tested"]) > 0 and out["seconds"] > 0
    slow = next(t for t in out["tested"] if t["commit"] == shas["slow"])
    assert slow["verdict"] == "FAIL" and 1.15 < slow["ratio"] < 1.45, slow
    assert all(t["verdict"] in ("PASS", "FAIL") for t in out["tested"]), out["tested"]  # nothing skipped for the load


@pytest.mark.slow
def test_history_confirm_confirms_exactly_that_regression(loaded_regression: dict) -> None:
    repo, store, shas = loaded_regression["repo"], loaded_regression["store"], loaded_regression["shas"]
    confirmed = [c for c in loaded_regression["confirm"]["recorded"] if c["verdict"] == "confirmed"]
    assert [(c["last_good"], c["first_bad"]) for c in confirmed] == [(shas["docs1"], shas["slow"])]
    assert [c["pinned"] for c in confirmed] == [shas["slow"]]  # measured over the window, then pinned to it
    shown = json.loads(rlbench(["history", "show", "--store", str(store), "--json"], repo).stdout)
    assert shown["regressions"]["confirmed"] == 1
    (step,) = [st for st in shown["steps"] if st["status"] == "confirmed"]
    assert step["first_bad"] == shas["slow"] and step["confirmation"]["rounds"] >= 10

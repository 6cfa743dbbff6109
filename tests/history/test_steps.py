"""Step detection on synthetic series with seeded noise: steps found where they are, none where there are none."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import rlbench.analysis.steps as steps_module
from rlbench.analysis.steps import DEFAULTS, Step, detect_all, detect_steps, loaded_share, marked_commits
from rlbench.results.history import Series


def commits(n: int) -> list[str]:
    return [f"{i:040x}" for i in range(n)]


def noisy(
    n: int,
    *,
    seed: int,
    at: int | None = None,
    factor: float = 1.0,
    metric: str = "time/update",
    unit: str = "s",
    direction: str = "lower",
    level: float = 0.5,
    between: float = 0.03,
    params: dict | None = None,
) -> Series:
    """``n`` commits x 3 repeats: lognormal noise between commits (``between``) and within them (1%)."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        commit_level = level * (factor if at is not None and i >= at else 1.0) * math.exp(rng.normal(0, between))
        samples.append([commit_level * math.exp(e) for e in rng.normal(0, 0.01, 3)])
    return Series("m1", "ppo-cartpole", params or {}, metric, unit, direction, False, commits(n), samples)


def counter(values: list[float], metric: str = "syncs/update", params: dict | None = None) -> Series:
    return Series(
        "m1", "ppo-cartpole", params or {}, metric, "count", "lower", True, commits(len(values)), [[v] for v in values]
    )


def test_a_20_percent_step_is_found_at_its_commit_with_an_interval_excluding_1() -> None:
    # over seeds 0-299 of this setting the step was found at commit 23 every time; 5% of them also had a false step
    s = noisy(40, seed=0, at=23, factor=1.2)
    steps = detect_steps(s)
    assert len(steps) == 1
    st = steps[0]
    assert isinstance(st, Step) and st.index == 23
    assert st.first_bad == s.commits[23] and st.last_good == s.commits[22]
    assert 1.0 < st.ci[0] <= st.ratio <= st.ci[1]
    assert 1.1 < st.ratio < 1.3 and st.worse


def test_a_faster_rate_is_a_step_that_is_not_worse() -> None:
    s = noisy(40, seed=4, at=10, factor=1.25, metric="sps", unit="steps/s", direction="higher", level=70000.0)
    (st,) = detect_steps(s)
    assert st.index == 10 and st.ci[0] > 1.0 and not st.worse


@pytest.mark.parametrize("seed", range(8))
def test_no_step_on_a_flat_noisy_series(seed: int) -> None:
    assert detect_steps(noisy(60, seed=seed)) == []


def test_one_slow_commit_in_the_middle_is_not_a_step_but_the_newest_commit_can_be() -> None:
    s = noisy(40, seed=5)
    s.samples[20] = [v * 1.5 for v in s.samples[20]]  # one commit measured on a busy machine
    assert detect_steps(s) == []
    s.samples[-1] = [v * 1.5 for v in s.samples[-1]]  # the newest commit: a step until the next commit says otherwise
    (st,) = detect_steps(s)
    assert st.index == 39 and st.ci[0] > 1.0


def test_an_exact_counter_plus_one_is_a_step_with_a_point_interval() -> None:
    s = counter([16.0] * 5 + [17.0] * 6)
    (st,) = detect_steps(s)
    assert st.index == 5 and st.ratio == pytest.approx(17 / 16) and st.ci == (st.ratio, st.ratio) and st.worse
    (up,) = detect_steps(counter([0.0, 0.0, 2048.0]))
    assert up.index == 2 and up.ratio == math.inf
    assert detect_steps(counter([3.0] * 10)) == []


def test_phases_that_stepped_with_a_top_level_metric_are_listed() -> None:
    n, at = 50, 30
    sps = noisy(n, seed=1, at=at, factor=1 / 1.25, metric="sps", unit="steps/s", direction="higher", level=70000.0)
    update = noisy(n, seed=2, at=at, factor=1.4, metric="time/update")
    forward = noisy(n, seed=6, at=at, factor=1.6, metric="time/update/forward")
    env = noisy(n, seed=3, metric="time/collect/env")
    syncs = counter([16.0] * (at + 1) + [17.0] * (n - at - 1))  # one commit later: within +-1
    late = noisy(n, seed=7, at=at + 8, factor=1.5, metric="time/advantage")  # another commit: not listed
    other = noisy(n, seed=8, at=at, factor=1.5, metric="time/collect", params={"num_envs": 4})  # other parameters
    steps = detect_all([sps, update, forward, env, syncs, late, other])
    by_metric = {(st.series.metric, json_params(st.series)): st for st in steps}
    top = by_metric[("sps", "{}")]
    assert top.index == at and top.worse
    assert top.phases == ["time/update/forward", "time/update", "syncs/update"]  # largest change first
    assert by_metric[("time/update", "{}")].phases == ["time/update/forward"]  # a phase lists its sub-phases
    assert by_metric[("time/advantage", "{}")].phases == []
    assert ("time/collect/env", "{}") not in by_metric


def json_params(s: Series) -> str:
    return json.dumps(s.params, sort_keys=True)


def test_series_that_cannot_be_searched_give_no_step() -> None:
    s = noisy(10, seed=0)
    s.samples[3] = [-1.0, -2.0, -1.5]  # a loss, not a time
    assert detect_steps(s) == []
    one = noisy(1, seed=0)
    assert detect_steps(one) == []
    assert DEFAULTS.confidence == 0.95


def test_a_short_history_with_a_step_and_its_revert_finds_both() -> None:
    """Issue 58: 7 commits, 5 repeats each, +22% at commit 3 and back at commit 5: the 2% trim of consecutive
    differences kept one of the two jumps in the noise, and the detector found neither."""
    rng = np.random.default_rng(58)
    factor = [1.0, 1.0, 1.0, 1.22, 1.22, 1.0, 1.0]
    samples = []
    for f in factor:
        level = 0.1 * f * math.exp(rng.normal(0, 0.01))  # the process's level
        samples.append([level * math.exp(e) for e in rng.normal(0, 0.01, 5)])  # 5 repeats in it
    s = Series("m1", "tiny", {}, "wall_s", "s", "lower", False, commits(7), samples)
    found = detect_steps(s)
    assert [(st.index, st.worse) for st in found] == [(3, True), (5, False)]
    assert 1.15 < found[0].ratio < 1.3 and found[0].ci[0] > 1.0
    # without repeats (one sample a commit) the noise cannot be told from the steps: nothing is claimed
    single = Series("m1", "tiny", {}, "wall_s", "s", "lower", False, commits(7), [[x[0]] for x in samples])
    assert all(st.index in (3, 5) for st in detect_steps(single))


@pytest.mark.parametrize("seed", range(6))
def test_repeats_do_not_make_false_steps_on_a_flat_history(seed: int) -> None:
    assert detect_steps(noisy(60, seed=seed)) == []
    assert detect_steps(noisy(12, seed=seed)) == []


def loaded(s: Series, loads: list[float | None]) -> Series:
    s.loads = loads
    return s


def test_one_commit_measured_under_load_is_no_step_not_even_the_newest() -> None:
    s = noisy(40, seed=5)
    loads: list[float | None] = [0.02] * 40
    s.samples[20] = [v * 1.5 for v in s.samples[20]]
    s.samples[-1] = [v * 1.5 for v in s.samples[-1]]
    loads[20] = loads[-1] = 0.55  # both slow commits were measured beside another process
    assert detect_steps(loaded(s, loads)) == []
    assert marked_commits(s) == {s.commits[20], s.commits[-1]}
    assert loaded_share(s) == (2, 0.02)
    # the same slow newest commit on a quiet machine is a step (until the next commit says otherwise)
    assert [st.index for st in detect_steps(loaded(s, [0.02] * 40))] == [39]


def test_a_history_measured_beside_a_steady_neighbour_marks_nothing_and_keeps_its_steps() -> None:
    s = loaded(noisy(40, seed=0, at=23, factor=1.2), [0.52] * 39 + [None])
    assert marked_commits(s) == set()
    (st,) = detect_steps(s)
    assert st.index == 23
    assert loaded_share(s) == (39, 0.52)


def test_a_counter_ignores_the_load() -> None:
    c = counter([16.0] * 5 + [17.0] * 6)
    c.loads = [0.0] * 10 + [0.9]
    (st,) = detect_steps(c)
    assert st.index == 5


def _skewed_history(seed: int, step: float, n: int = 50, at: int = 30) -> Series:
    """Process-level noise as a shared machine makes it: a floor (2% spread), a quarter of the commits 10-65% slower
    (a process on a slowed CPU), 5 repeats each; from ``at`` on, ``1 + step`` times slower."""
    rng = np.random.default_rng(seed)
    levels = 0.08 * np.exp(0.02 * rng.standard_normal(n))
    levels *= np.where(rng.random(n) < 0.25, np.exp(rng.uniform(0.1, 0.5, n)), 1.0)
    levels *= np.where(np.arange(n) >= at, 1 + step, 1.0)
    samples = [list(v * np.exp(0.01 * rng.standard_normal(5))) for v in levels]
    return Series("m", "b", {}, "wall_s", "s", "lower", False, [f"{i:040x}" for i in range(n)], samples, {}, [0.5] * n)


def test_the_rank_search_finds_more_steps_in_skewed_noise_and_no_more_false_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    def rates() -> tuple[int, int]:
        found = sum(any(abs(s.index - 30) <= 1 and s.worse for s in detect_steps(_skewed_history(k, 0.10))) for k in range(60))
        false = sum(len(detect_steps(_skewed_history(k, 0.0))) for k in range(60))
        return found, false

    found, false = rates()
    monkeypatch.setattr(steps_module, "RANK_SEARCH", 10**9)  # the search in units of sigma only, as before it
    sigma_found, sigma_false = rates()
    assert found >= sigma_found + 6 and false <= sigma_false, (found, false, sigma_found, sigma_false)
    assert false <= 4  # of 60 A/A histories of 50 commits

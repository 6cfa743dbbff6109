"""Comparison statistics, the gate's verdicts and exit codes, refusals, and speed x learning."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest

from rlbench.analysis.compare import bootstrap_paired, bootstrap_ratio, compare, mismatches
from rlbench.analysis.gate import Threshold, evaluate
from rlbench.cli import main
from rlbench.core.errors import DataError, UsageError
from rlbench.results.records import Record
from rlbench.results.store import RunWriter

FP = {"machine": {"id": "m1"}, "software": {"python": "3.11", "packages": {"torch": "2.13"}, "torch_threads": 1}}


def rec(run: str, metric: str, samples: list[float], seed: int = 0, direction: str = "lower", unit: str = "s", **kw) -> Record:
    return Record(
        run_id=run,
        timestamp="t",
        benchmark="b",
        params={"n": 1},
        definition_hash="h1",
        metric=metric,
        unit=unit,
        direction=direction,
        samples=list(samples),
        repeat=seed,
        seed=seed,
        fingerprint=kw.pop("fp", FP),
        **kw,
    )


def side(run: str, scale: float, seeds: int = 8, n: int = 30, sps_scale: float = 1.0, ret: float = 450.0, noise: float = 0.02):
    rng = np.random.default_rng(zlib.crc32(f"{run}:{scale}".encode()))  # str hash() is salted per process
    out = []
    for s in range(seeds):
        out.append(rec(run, "time/update", list(scale * (1.0 + noise * rng.standard_normal(n))), seed=s))
        out.append(
            rec(
                run,
                "sps",
                [sps_scale * 30_000 * (1 + noise * rng.standard_normal())],
                seed=s,
                direction="higher",
                unit="steps/s",
            )
        )
        out.append(
            rec(run, "eval_return", list(ret + 20 * rng.standard_normal(10)), seed=s, direction="higher", unit="return")
        )
        out.append(rec(run, "ops/update", [1234.0], seed=s, unit="count"))
    return out


def test_ratio_of_medians_hand_computed() -> None:
    ratio, low, high = bootstrap_ratio(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0, 100.0]))
    assert ratio == pytest.approx(5.0 / 2.0)  # medians 2 and 5
    assert low <= ratio <= high
    r, lo, hi = bootstrap_paired(np.array([1.1, 1.1, 1.1]))
    assert (r, lo, hi) == (pytest.approx(1.1), pytest.approx(1.1), pytest.approx(1.1))
    assert all(math.isnan(v) for v in bootstrap_ratio(np.array([]), np.array([1.0])))


def test_aa_is_no_change_and_shift_is_detected() -> None:
    base = side("a", 1.0)
    same = compare(base, side("b", 1.0), metrics=["time/update"])[0]
    # the interval contains 1: the words say so, and give the interval as a change
    assert same.verdict.startswith("no clear change (") and same.ci_low <= 1.0 <= same.ci_high and same.paired
    slower = compare(base, side("c", 1.10), metrics=["time/update"])[0]
    assert slower.verdict == "slower" and slower.ci_low > 1.05
    faster = compare(base, side("d", 0.8), metrics=["time/update"])[0]
    assert faster.verdict == "faster"
    small = compare(base, side("e", 1.03), metrics=["time/update"], min_effect=0.05)[0]
    # below the minimum effect: never "faster"/"slower"; "no clear change" or, when significant, "small change"
    assert small.verdict.startswith("small change (" if small.significant else "no clear change (")


def test_gate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = {}
    for name, recs in {
        "base": side("base", 1.0),
        "same": side("same", 1.0),
        "slow": side("slow", 1.2, sps_scale=0.85),
    }.items():
        w = RunWriter(tmp_path, run_id=name)
        w.write(recs)
        paths[name] = str(w.path)
    assert (
        main(
            ["gate", paths["base"], paths["same"], "--fail", "sps:5%", "--fail", "time/update:10%", "--fail", "ops/update:0%"]
        )
        == 0
    )
    assert main(["gate", paths["base"], paths["slow"], "--fail", "time/update:10%", "--summary", str(tmp_path / "s.md")]) == 1
    assert "FAIL" in (tmp_path / "s.md").read_text()
    assert main(["gate", paths["base"], paths["same"], "--fail", "nope:5%"]) == 2  # missing metric
    assert main(["gate", paths["base"], paths["same"], "--fail", "sps=5"]) == 2  # malformed
    assert main(["gate", paths["base"], paths["same"]]) == 2  # no threshold at all
    err = capsys.readouterr().err
    assert "missing" in err and "malformed threshold" in err and "no threshold" in err
    assert main(["gate", paths["base"], paths["same"], "--fail", "sps:5%", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["exit_code"] == 0


def test_counters_gate_at_zero_percent() -> None:
    base = side("a", 1.0)
    cand = side("b", 1.0)
    for r in cand:
        if r.metric == "ops/update":
            r.samples = [1235.0]  # one extra op per iteration: the classic regression
    outcome = evaluate(base, cand, [Threshold.parse("ops/update:0%")])
    assert outcome.exit_code == 1 and "worse by 0.1%" in outcome.checks[0].reason


def test_faster_but_not_learning_fails() -> None:
    """A broken variant: 20% faster, but its return collapsed -- the gate must fail it."""
    base = side("a", 1.0)
    broken = side("b", 0.8, sps_scale=1.2, ret=25.0)
    outcome = evaluate(base, broken, [Threshold.parse("sps:5%")])
    by = {c.threshold.metric: c for c in outcome.checks}
    assert not by["sps"].failed and by["eval_return"].failed and outcome.exit_code == 1
    assert evaluate(base, broken, [Threshold.parse("sps:5%")], learning_drop=None).exit_code == 0


def test_mismatch_refused_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = {"machine": {"id": "m2"}, "software": FP["software"]}
    a, b = RunWriter(tmp_path, "a"), RunWriter(tmp_path, "b")
    a.write(side("a", 1.0))
    b.write([Record(**{**r.__dict__, "fingerprint": other, "definition_hash": "h2"}) for r in side("b", 1.0)])
    assert mismatches(read(a.path), read(b.path))[0].startswith("machine: baseline")
    assert main(["compare", str(a.path), str(b.path)]) == 2
    assert "refusing to compare" in capsys.readouterr().err
    assert main(["compare", str(a.path), str(b.path), "--allow-mismatch", "--report", str(tmp_path / "c.md")]) == 0
    text = (tmp_path / "c.md").read_text()
    assert "MISMATCH" in text and "machine" in text and "definition of b" in text


def test_torch_threads_differ_only_where_both_sides_set_them() -> None:
    """A process that never imported torch (a micro run's own: its benchmarks run in a child) records no torch
    threads: that is no mismatch against a side that did, but two settings that differ still are."""

    def with_threads(threads: int | None) -> list[Record]:
        fp = {**FP, "software": {**FP["software"], "torch_threads": threads}}
        return [rec("x", "time/call", [1.0, 1.1], fp=fp)]

    assert mismatches(with_threads(2), with_threads(None)) == []
    assert mismatches(with_threads(None), with_threads(None)) == []
    assert mismatches(with_threads(2), with_threads(1)) == ["torch threads: baseline 2 vs candidate 1"]


def read(path: Path) -> list[Record]:
    from rlbench.results.store import read_records

    return read_records(path)


def test_threshold_parsing() -> None:
    assert Threshold.parse("time/update:10%") == Threshold("time/update", 0.10)
    assert Threshold.parse("sps:0%").fraction == 0.0
    for bad in ("sps", "sps:5", "sps:-5%", ":5%"):
        with pytest.raises(UsageError):
            Threshold.parse(bad)


def test_gate_rejects_directionless_and_empty() -> None:
    base = [rec("a", "env_steps", [1.0, 1.0], direction="none")]
    with pytest.raises(DataError, match="no better direction"):
        evaluate(base, [rec("b", "env_steps", [1.0, 1.0], direction="none")], [Threshold.parse("env_steps:5%")])
    with pytest.raises(DataError, match="no usable samples"):
        evaluate([rec("a", "x", [float("nan")])], [rec("b", "x", [1.0])], [Threshold.parse("x:5%")])


def test_too_few_samples_is_an_error_not_a_pass() -> None:
    base = [rec("a", "sps", [100.0], seed=0, direction="higher", unit="steps/s")]
    cand = [rec("b", "sps", [50.0], seed=0, direction="higher", unit="steps/s")]
    (r,) = compare(base, cand)
    assert r.insufficient and r.verdict == "too few samples" and r.ratio == 0.5
    with pytest.raises(DataError, match="too few samples"):
        evaluate(base, cand, [Threshold.parse("sps:5%")], learning_drop=None)


@pytest.mark.parametrize(
    "content, needle",
    [
        ("", "empty"),
        ('{"schema": 1, "run_id"', "truncated"),
        ("garbage\n", "not JSON"),
        ('{"a": 1}\n', "not an rlbench record"),
    ],
)
def test_gate_on_unreadable_records_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, needle: str
) -> None:
    good = RunWriter(tmp_path / "st", "good")
    good.write(side("good", 1.0))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["gate", str(bad), str(good.path), "--fail", "sps:5%"]) == 2
    assert main(["compare", str(good.path), str(bad)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 2  # one line per command


def test_gate_on_future_schema_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = RunWriter(tmp_path, "good")
    good.write(side("good", 1.0))
    future = tmp_path / "future.jsonl"
    data = json.loads(side("f", 1.0)[0].to_json())
    data["schema"] = 99
    future.write_text(json.dumps(data) + "\n")
    assert main(["gate", str(good.path), str(future), "--fail", "sps:5%"]) == 2
    assert "newer rlbench" in capsys.readouterr().err


def test_a_counter_rising_from_zero_is_an_exact_regression() -> None:
    """0 -> 2,048 syncs per iteration: an infinite, exact increase; the gate fails it instead of refusing it."""

    def side(run: str, value: float) -> list[Record]:
        return [
            Record(run, "t", "b", {}, "h", "syncs/iteration", "count", "lower", [value], repeat=k, seed=k) for k in range(3)
        ]

    base, cand = side("r1", 0.0), side("r2", 2048.0)
    (r,) = compare(base, cand)
    assert r.ratio == math.inf and r.verdict == "worse" and r.significant
    outcome = evaluate(base, cand, [Threshold.parse("syncs/iteration:0%")], learning_drop=None)
    assert outcome.exit_code == 1 and "rose from 0 to 2,048" in outcome.checks[0].reason
    assert evaluate(base, base, [Threshold.parse("syncs/iteration:0%")], learning_drop=None).exit_code == 0


def _timed_side(run: str, seconds: float, other_cpu: float) -> list[Record]:
    recs = []
    for k in range(6):
        recs.append(Record(run, "t", "b", {}, "h", "time/update", "s", "lower", [seconds * (1 + 0.001 * k)], repeat=k, seed=k))
        recs.append(Record(run, "t", "b", {}, "h", "machine/other_cpu", "fraction", "none", [other_cpu], repeat=k, seed=k))
    return recs


def test_a_verdict_the_load_difference_could_explain_is_refused() -> None:
    """20% slower on a candidate side whose machine was 60% busy with other work: no verdict without --allow-busy."""
    base, busy_cand = _timed_side("r1", 1.0, 0.02), _timed_side("r2", 1.2, 0.62)
    threshold = [Threshold.parse("time/update:5%")]
    with pytest.raises(DataError, match=r"machine was busy: .*baseline 2%, candidate 62%.*time/update.*--allow-busy"):
        evaluate(base, busy_cand, threshold, learning_drop=None)
    assert evaluate(base, busy_cand, threshold, learning_drop=None, allow_busy=True).exit_code == 1
    # slower on a busier *baseline*: the load pushed the other way, so the regression stands
    assert evaluate(_timed_side("r1", 1.0, 0.62), _timed_side("r2", 1.2, 0.02), threshold, learning_drop=None).exit_code == 1
    # same load on both sides: an ordinary verdict
    assert evaluate(base, _timed_side("r2", 1.2, 0.03), threshold, learning_drop=None).exit_code == 1
    # machine context is never compared as a case
    assert {r.case.metric for r in compare(base, busy_cand)} == {"time/update"}


def test_faster_on_a_quieter_candidate_is_not_a_verdict_either() -> None:
    from rlbench.analysis.gate import refuse_if_busy

    base, cand = _timed_side("r1", 1.0, 0.7), _timed_side("r2", 0.8, 0.0)
    results = compare(base, cand)
    assert results[0].verdict == "faster"
    with pytest.raises(DataError, match="machine was busy"):
        refuse_if_busy(base, cand, results, allow_busy=False)


def test_drifting_and_bimodal_samples_are_flagged() -> None:
    from rlbench.analysis.compare import bimodality, drift, sample_flags

    rng = np.random.default_rng(0)
    steady = 1.0 + 0.01 * rng.standard_normal(40)
    slowing = np.concatenate([1.0 + 0.01 * rng.standard_normal(20), 1.3 + 0.01 * rng.standard_normal(20)])
    two_states = rng.permutation(np.concatenate([1.0 + 0.01 * rng.standard_normal(20), 1.5 + 0.01 * rng.standard_normal(20)]))
    assert drift(steady) is None and bimodality(steady) is None
    assert drift(slowing) == pytest.approx(0.26, abs=0.05)
    assert drift(two_states) is None and bimodality(two_states) > 0.555

    def side(run: str, samples: np.ndarray) -> list[Record]:
        return [Record(run, "t", "b", {}, "h", "time/update", "s", "lower", list(map(float, samples)), repeat=0, seed=0)]

    flags = sample_flags(compare(side("r1", steady), side("r2", slowing)))
    assert any("candidate's samples drift +" in f for f in flags)  # a step change is also two modes: both may show
    assert not any("baseline" in f for f in flags)


def test_several_runs_per_side_are_merged_by_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlbench.results.store import RunWriter

    store = tmp_path / "s"

    def run(run_id: str, seeds: range, seconds: float) -> None:
        RunWriter(store, run_id).write(
            Record(run_id, "t", "b", {}, "h", "time/update", "s", "lower", [seconds * (1 + 0.001 * k)], repeat=k, seed=k)
            for k in seeds
        )

    run("20260101T000000Z-aaaaaa", range(0, 3), 1.0)
    run("20260101T000001Z-bbbbbb", range(3, 6), 1.0)
    run("20260101T000002Z-cccccc", range(0, 6), 1.2)
    args = ["--store", str(store), "--fail", "time/update:5%", "--no-learning-check", "--json"]
    # one baseline run alone has 3 seeds: too few for a verdict
    assert main(["gate", "20260101T000000Z-aaaaaa", "20260101T000002Z-cccccc", *args]) == 2
    capsys.readouterr()
    # both baseline runs, merged by seed: 6 paired seeds, and the 20% regression is found
    assert main(["gate", "20260101T000000Z-aaaaaa,20260101T000001Z-bbbbbb", "20260101T000002Z-cccccc", *args]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["checks"][0]["n_base"] == 6 and out["checks"][0]["paired"]
    assert main(["gate", "20260101T000000Z-aaaaaa,20260101T000000Z-aaaaaa", "20260101T000002Z-cccccc", *args]) == 2


def test_paired_ratios_are_labelled_as_such() -> None:
    """A paired row's ratio is the median of per-seed ratios: the tables say so instead of calling it a ratio of medians."""
    from rlbench.report.comparison import RATIO_LEGEND, comparison_markdown, gate_markdown

    base, cand = _timed_side("r1", 1.0, 0.0), _timed_side("r2", 1.2, 0.0)
    outcome = evaluate(base, cand, [Threshold.parse("time/update:5%")], learning_drop=None)
    assert outcome.checks[0].result.paired and "(paired)" in gate_markdown(outcome)
    text = comparison_markdown(compare(base, cand), base, cand, [], 0.05)
    assert RATIO_LEGEND in text and "median of the per-seed ratios" in RATIO_LEGEND and "paired" in text


def test_gate_table_names_the_level_its_interval_was_computed_at() -> None:
    from rlbench.analysis.compare import power_factor
    from rlbench.analysis.gate import AutoRounds
    from rlbench.report.comparison import gate_markdown

    design = AutoRounds.plan(40)  # looks at 10, 20, 40: each interval at 1 - 5%/3
    assert len(design.looks) == 3 and design.confidence == pytest.approx(0.983333, abs=1e-6)
    base, cand = side("base", 1.0), side("slow", 1.2)
    rule = [Threshold.parse("time/update:10%")]
    spent = evaluate(base, cand, rule, learning_drop=None, confidence=design.confidence)
    plain = evaluate(base, cand, rule, learning_drop=None)
    wide, narrow = spent.checks[0].result, plain.checks[0].result
    assert wide.confidence == design.confidence and narrow.confidence == 0.95
    assert wide.ci_high - wide.ci_low > narrow.ci_high - narrow.ci_low  # computed at 98.33%: wider
    text = gate_markdown(spent)
    assert "| 98.33% CI |" in text and "95% CI" not in text
    assert "spread evenly over the 3 looks" in text and "the 98.33% interval rules out" in text
    assert f"({power_factor(design.confidence):.2f} × the 98.33% interval" in text
    assert "98.33% CI of ratio" in spent.checks[0].reason
    assert "| 95% CI |" in gate_markdown(plain) and "98.33%" not in gate_markdown(plain)
    assert power_factor(0.95) == pytest.approx((1.959964 + 0.841621) / 1.959964)

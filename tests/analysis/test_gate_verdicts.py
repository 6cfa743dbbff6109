"""Issue 31: three verdicts per threshold (PASS, FAIL, INCONCLUSIVE), words that match the interval, the noise the
run could detect, and load that refuses a PASS as well as a FAIL."""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbench.analysis.compare import Case, CaseResult, compare
from rlbench.analysis.gate import FAIL, INCONCLUSIVE, PASS, Threshold, _judge, evaluate, rounds_needed
from rlbench.cli import main
from rlbench.results.records import Record
from rlbench.results.store import RunWriter

FP = {"machine": {"id": "m1"}, "software": {"python": "3.11", "packages": {"torch": "2.13"}, "torch_threads": 1}}


def sps_side(run: str, values: list[float], load: float | None = None, ops: float | None = None) -> list[Record]:
    """One record per seed: an sps sample (one per run, as `run ppo-cartpole` records it), and the machine's load."""
    out = []
    for k, v in enumerate(values):
        meta = dict(
            run_id=run, timestamp="t", benchmark="ppo", params={}, definition_hash="h", repeat=k, seed=k, fingerprint=FP
        )
        out.append(Record(metric="sps", unit="steps/s", direction="higher", samples=[v], **meta))
        if load is not None:
            out.append(Record(metric="machine/other_cpu", unit="fraction", direction="none", samples=[load], **meta))
        if ops is not None:
            out.append(Record(metric="ops/iteration", unit="count", direction="lower", samples=[ops], **meta))
    return out


def noisy(run: str, scale: float, sigma: float, n: int = 5) -> list[float]:
    rng = np.random.default_rng(zlib.crc32(run.encode()))
    return list(30_000 * scale * np.exp(sigma * rng.standard_normal(n)))


def write(tmp_path: Path, run: str, records: list[Record]) -> str:
    w = RunWriter(tmp_path, run_id=run)
    w.write(records)
    return str(w.path)


def test_a_wide_interval_is_inconclusive_with_one_line_saying_what_would_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue example: 15% worse, not significant, CI about [0.43, 1.76]: the old gate printed PASS, exit 0."""
    base = write(tmp_path, "a", sps_side("a", noisy("a", 1.0, 0.35), ops=1000.0))
    cand = write(tmp_path, "c", sps_side("c", noisy("c", 0.85, 0.35), ops=1000.0))
    code = main(["gate", base, cand, "--fail", "sps:5%", "--summary", str(tmp_path / "s.md")])
    out, err = capsys.readouterr()
    assert code == 2
    line = err.strip()
    assert line.count("\n") == 0 and line.startswith("rlbench: error: gate INCONCLUSIVE for sps (limit 5%)")
    assert "95% CI of ratio [" in line and "rules out only a regression above" in line  # the interval, what it ruled out
    assert "paired rounds (now 5) would rule out 5%" in line or "past the limit" in line  # what would decide it
    assert "--fail ops/iteration:0%" in line  # a counter these records have
    summary = (tmp_path / "s.md").read_text()
    assert "## rlbench gate: INCONCLUSIVE" in summary and "❔ INCONCLUSIVE" in summary and "PASS" not in out.split("\n")[0]
    assert "better by" not in summary and "worse by" not in summary.split("Detectable")[-1].split("PASS:")[0]


def test_inconclusive_policy_is_the_projects_choice_and_the_table_still_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write(tmp_path, "a", sps_side("a", noisy("a", 1.0, 0.35)))
    cand = write(tmp_path, "c", sps_side("c", noisy("c", 0.85, 0.35)))
    args = ["gate", base, cand, "--fail", "sps:5%", "--json"]
    assert main([*args, "--inconclusive", "pass"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["verdict"] == INCONCLUSIVE and json.loads(out)["checks"][0]["verdict"] == INCONCLUSIVE
    assert err.startswith("rlbench: warning: gate INCONCLUSIVE") and err.count("\n") == 1
    assert main([*args, "--inconclusive", "fail"]) == 1
    assert json.loads(capsys.readouterr().out)["exit_code"] == 1
    assert main([*args, "--inconclusive", "maybe"]) == 2  # argparse: not a choice


def test_an_aa_twin_with_a_wide_interval_claims_no_improvement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue example: A against an A/A twin printed "better by 20.9%" with CI [0.689, 2.914]."""
    base, twin = sps_side("a", noisy("a", 1.0, 0.4)), sps_side("b", noisy("twin", 1.0, 0.4))
    (check,) = evaluate(base, twin, [Threshold.parse("sps:5%")], learning_drop=None).checks
    r = check.result
    assert r.ci_low < 1.0 < r.ci_high
    assert check.verdict == INCONCLUSIVE and check.reason.startswith("no clear change (")
    assert "better" not in check.reason and "worse by" not in check.reason
    (row,) = compare(base, twin)
    assert row.verdict.startswith("no clear change (")


def test_a_quiet_but_noisy_run_does_not_pass_an_injected_slowdown() -> None:
    """Issue example: 15% injected into update, five noisy repeats: PASS with "better by 28.1%" at CI [0.632, 1.304]."""
    rng = np.random.default_rng(3)

    def side(run: str, scale: float) -> list[Record]:
        return [
            Record(
                run, "t", "ppo", {}, "h", "time/update", "s", "lower", list(scale * np.exp(0.3 * rng.standard_normal(4))), k, k
            )
            for k in range(5)
        ]

    outcome = evaluate(side("a", 0.118), side("c", 0.118 * 1.15), [Threshold.parse("time/update:5%")], learning_drop=None)
    assert outcome.verdict == INCONCLUSIVE and outcome.exit_code == 2
    assert "rules out only" in outcome.checks[0].reason


def test_tight_intervals_pass_and_fail_as_before() -> None:
    same = evaluate(sps_side("a", noisy("a", 1.0, 0.005)), sps_side("b", noisy("b", 1.0, 0.005)), [Threshold.parse("sps:5%")])
    assert same.verdict == PASS and same.exit_code == 0 and "rules out a regression above" in same.checks[0].reason
    slow = evaluate(sps_side("a", noisy("a", 1.0, 0.005)), sps_side("b", noisy("b", 0.8, 0.005)), [Threshold.parse("sps:5%")])
    assert slow.verdict == FAIL and slow.exit_code == 1
    # a counter that is unchanged passes exactly, also at 0%
    exact = evaluate(
        sps_side("a", [1.0] * 5, ops=10.0), sps_side("b", [1.0] * 5, ops=10.0), [Threshold.parse("ops/iteration:0%")]
    )
    assert exact.verdict == PASS and exact.checks[0].reason.startswith("unchanged (exact")


@pytest.mark.parametrize(
    ("base_load", "cand_load"),
    [(0.82, 0.87), (0.02, 0.15), (0.15, 0.02)],
    ids=["both sides busy", "busier candidate, same result", "busier baseline"],
)
def test_heavy_load_makes_a_pass_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], base_load: float, cand_load: float
) -> None:
    """Issue examples: load on both sides at 80% passed; a busier candidate that came out the same passed."""
    values = noisy("x", 1.0, 0.003)
    base = write(tmp_path, "a", sps_side("a", values, load=base_load, ops=7.0))
    cand = write(tmp_path, "c", sps_side("c", values, load=cand_load, ops=7.0))  # came out the same
    code = main(["gate", base, cand, "--fail", "sps:5%", "--fail", "ops/iteration:0%", "--json"])
    out, err = capsys.readouterr()
    assert code == 2, err
    checks = {c["metric"]: c for c in json.loads(out)["checks"]}
    assert checks["sps"]["verdict"] == INCONCLUSIVE and "machine was busy" in checks["sps"]["reason"]
    assert checks["ops/iteration"]["verdict"] == PASS  # a counter does not care about the load
    assert err.count("\n") == 1 and "machine was busy" in err and "--allow-busy" in err
    assert main(["gate", base, cand, "--fail", "sps:5%", "--allow-busy"]) == 0
    capsys.readouterr()


def test_a_quiet_machine_keeps_its_pass() -> None:
    values = noisy("x", 1.0, 0.003)
    outcome = evaluate(sps_side("a", values, load=0.03), sps_side("c", values, load=0.05), [Threshold.parse("sps:5%")])
    assert outcome.verdict == PASS


def test_the_summary_says_which_regression_this_run_could_detect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write(tmp_path, "a", sps_side("a", noisy("a", 1.0, 0.02), ops=5.0))
    cand = write(tmp_path, "c", sps_side("c", noisy("c", 1.0, 0.02), ops=5.0))
    assert main(["gate", base, cand, "--fail", "sps:20%", "--fail", "ops/iteration:0%"]) == 0
    out = capsys.readouterr().out
    assert "noise: at this run's measured noise, a regression this large would be found 4 times in 5" in out
    assert "`ops/iteration` any change (exact count)" in out and "| Detectable |" in out
    (r,) = compare(sps_side("a", noisy("a", 1.0, 0.02)), sps_side("c", noisy("c", 1.0, 0.02)))
    assert 0 < r.detectable < 0.2
    from rlbench.report.comparison import comparison_markdown

    assert "| Detectable |" in comparison_markdown([r], [], [], [], 0.05)
    assert main(["compare", base, cand, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any(n.startswith("noise:") for n in data["notes"]) and data["cases"][0]["detectable"] > 0


def test_rounds_needed_follows_one_over_root_n() -> None:
    case = Case("b", "{}", "sps", "steps/s", "higher")
    r = CaseResult(case, 1.0, 1.0, 1.0, 0.8, 1.2, True, 5, 5, False, "", units=5)
    # half-width 0.2 must shrink to the 0.05 margin: (0.2 / 0.05)^2 = 16 times the rounds
    assert rounds_needed(r, 0.05) == 80
    past = CaseResult(case, 1.0, 0.9, 0.9, 0.7, 1.1, True, 5, 5, False, "", units=5)
    assert rounds_needed(past, 0.05) is None  # the estimate itself is past the limit


directions = st.sampled_from(["higher", "lower"])


@settings(max_examples=400, deadline=None)
@given(
    low=st.floats(0.2, 2.0),
    width=st.floats(0.0, 1.5),
    at=st.floats(0.0, 1.0),
    direction=directions,
    limit=st.floats(0.0, 0.5),
)
def test_every_verdict_matches_its_interval(low: float, width: float, at: float, direction: str, limit: float) -> None:
    high = low + width
    ratio = low + at * width
    significant = low > 1.0 or high < 1.0
    case = Case("b", "{}", "x", "s", direction)
    r = CaseResult(case, 1.0, ratio, ratio, low, high, True, 8, 8, significant, "", units=8)
    check = _judge(r, Threshold("x", limit), [])
    worse_side = (1.0 - low) if direction == "higher" else (high - 1.0)  # the largest regression the interval admits
    worse = (1.0 - ratio) if direction == "higher" else (ratio - 1.0)
    if check.verdict == PASS:
        assert worse_side < limit
    elif check.verdict == FAIL:
        assert significant and worse > limit and (high < 1.0 if direction == "higher" else low > 1.0)
    else:
        assert check.verdict == INCONCLUSIVE and worse_side >= limit and "\n" not in check.advice
        assert "rules out only" in check.advice
    if not significant:  # "better"/"worse" only when the interval excludes 1
        assert "better" not in check.reason and "worse" not in check.reason and "no clear change" in check.reason
    assert not (math.isnan(check.result.ratio))

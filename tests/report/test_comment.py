"""``rlbench ab --comment``: the pull-request comment body for PASS, FAIL and INCONCLUSIVE, and its marker line."""

from __future__ import annotations

import pytest

from rlbench.analysis.gate import Threshold, evaluate
from rlbench.report.comment import MARKER, pr_comment
from tests.test_compare_gate import side


def _comment(base, cand, rules, **kw):
    outcome = evaluate(base, cand, [Threshold.parse(r) for r in rules], learning_drop=None)
    body = pr_comment(
        outcome,
        base_rev="origin/main",
        head_rev="HEAD",
        base_sha="a" * 40,
        head_sha="b" * 40,
        rounds=8,
        command="rlbench ab origin/main HEAD --fail time/update:5% -- run b",
        **kw,
    )
    return outcome, body


def test_pass_comment_starts_with_the_marker_and_gives_ratio_interval_and_rounds() -> None:
    outcome, body = _comment(side("base", 1.0), side("same", 1.0), ["time/update:10%"], decided_at={"time/update": 5})
    assert outcome.verdict == "PASS"
    lines = body.splitlines()
    assert lines[0] == MARKER and MARKER.startswith("<!--") and MARKER.endswith("-->")  # hidden by GitHub
    assert "✅ **PASS**" in lines[1]
    assert "`origin/main` (`aaaaaaaaaaaa`) → `HEAD` (`bbbbbbbbbbbb`): 8 interleaved rounds" in body
    row = next(line for line in lines if line.startswith("| `time/update`"))
    r = outcome.checks[0].result
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "10%" and cells[2] == "✅ PASS"
    assert cells[3].startswith(f"{r.ratio:.4g}") and cells[4] == f"[{r.ci_low:.4g}, {r.ci_high:.4g}]"
    assert cells[6] == "5"  # decided after 5 rounds
    assert "What would decide" not in body
    assert "<details>" in body and "## rlbench gate: PASS" in body  # the full table folded away
    assert body.rstrip().endswith("</sub>") and "rlbench ab origin/main HEAD" in body


def test_fail_comment_says_fail() -> None:
    outcome, body = _comment(side("base", 1.0), side("slow", 1.2), ["time/update:5%"])
    assert outcome.verdict == "FAIL"
    assert body.splitlines()[0] == MARKER and "❌ **FAIL**" in body.splitlines()[1]
    assert "| `time/update` | 5% | ❌ FAIL |" in body
    assert "What would decide" not in body


def test_inconclusive_comment_says_what_would_decide_it() -> None:
    noisy_base = side("nb", 1.0, seeds=5, n=3, noise=0.3)
    noisy_cand = side("nc", 1.0, seeds=5, n=3, noise=0.3)
    outcome, body = _comment(noisy_base, noisy_cand, ["time/update:1%"])
    assert outcome.verdict == "INCONCLUSIVE"
    assert "❔ **INCONCLUSIVE**" in body.splitlines()[1]
    assert "| `time/update` | 1% | ❔ INCONCLUSIVE |" in body
    assert "**What would decide the INCONCLUSIVE thresholds:**" in body
    advice = outcome.checks[0].advice
    assert advice and "rounds" in advice
    assert "- `time/update` (limit 1%): " in body


@pytest.mark.parametrize("on", ["pass", "fail"])
def test_inconclusive_counted_otherwise_says_so(on: str) -> None:
    base, cand = side("nb", 1.0, seeds=5, n=3, noise=0.3), side("nc", 1.0, seeds=5, n=3, noise=0.3)
    outcome = evaluate(base, cand, [Threshold.parse("time/update:1%")], learning_drop=None, on_inconclusive=on)
    body = pr_comment(outcome, base_rev="a", head_rev="b", base_sha="1" * 40, head_sha="2" * 40, rounds=5)
    assert f"counted as {on.upper()} by `--inconclusive {on}`" in body


def test_user_text_in_the_comment_is_not_markdown() -> None:
    outcome = evaluate(side("base", 1.0), side("same", 1.0), [Threshold.parse("time/update:10%")], learning_drop=None)
    body = pr_comment(outcome, base_rev="feat`x|y", head_rev="<b>HEAD</b>", base_sha="1" * 40, head_sha="2" * 40, rounds=8)
    line = body.splitlines()[3]  # revisions are code spans: a backtick, a pipe or HTML in a branch name renders as typed
    assert line.startswith("``feat`x|y`` (`111111111111`) → `<b>HEAD</b>` (`222222222222`)")
    assert "<b>HEAD</b>" not in body.replace("`<b>HEAD</b>`", "")

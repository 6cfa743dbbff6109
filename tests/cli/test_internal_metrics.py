"""rlbench's own metrics (``profile/*``, ``timer/*``, ``iterations``, ``env_steps``) are hidden by default from
``rlbench compare`` (table, ``--json``, ``--report``, ``--by``) and ``rlbench ab`` (``--report`` and its comparison),
through the one predicate :func:`rlbench.results.metrics.is_internal`; ``--all-metrics`` or ``--metric NAME`` shows
them, and a note says what was hidden. Records keep everything.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlbench.cli import main
from rlbench.results.metrics import INTERNAL_METRICS, is_internal
from rlbench.results.records import Record
from rlbench.results.store import RunWriter, read_run

FP = {"machine": {"id": "m1"}, "software": {"python": "3.11", "packages": {"torch": "2.13"}, "torch_threads": 1}}
USER = {"sps": ("steps/s", "higher"), "time/update": ("s", "lower"), "profile/call_s": ("s", "lower")}
OWN = {
    "timer/overhead_s": ("s", "lower"),
    "profile/overhead_s": ("s", "lower"),
    "iterations": ("count", "none"),
    "env_steps": ("count", "none"),
}


def records(run: str, scale: float, impl: str = "a") -> list[Record]:
    out = []
    for seed in range(6):
        for metric, (unit, direction) in {**USER, **OWN}.items():
            value = 1000.0 if unit == "count" else scale * (1 + 0.01 * seed)
            record = Record(run, "t", "b", {"impl": impl}, "h", metric, unit, direction, [value], fingerprint=FP)
            record.repeat = record.seed = seed
            out.append(record)
    return out


@pytest.fixture()
def runs(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name, recs in {"base": records("base", 1.0), "cand": records("cand", 1.1)}.items():
        w = RunWriter(tmp_path, run_id=name)
        w.write(recs)
        paths[name] = str(w.path)
    both = RunWriter(tmp_path, run_id="both")
    both.write(records("both", 1.0, "a") + records("both", 1.2, "b"))
    paths["both"] = str(both.path)
    return paths


def test_the_predicate() -> None:
    own = ("profile/overhead_s", "profile/events", "timer/overhead_s", "timer/events", "machine/steal", *INTERNAL_METRICS)
    for metric in own:
        assert is_internal(metric), metric
    for metric in ("sps", "time/update", "eval_return", "profile/call_s", "ops/iteration", "my_metric", "wall_s"):
        assert not is_internal(metric), metric


def compared(capsys: pytest.CaptureFixture, *args: str) -> dict:
    assert main(["compare", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_hides_internals_by_default(runs: dict[str, str], capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    out = compared(capsys, runs["base"], runs["cand"])
    assert {c["metric"] for c in out["cases"]} == set(USER)
    assert any("rlbench's own metrics hidden" in n and "--all-metrics" in n for n in out["notes"])
    every = compared(capsys, runs["base"], runs["cand"], "--all-metrics")
    assert {c["metric"] for c in every["cases"]} == set(USER) | set(OWN)
    assert not any("hidden" in n for n in every["notes"])
    named = compared(capsys, runs["base"], runs["cand"], "--metric", "timer/overhead_s", "--metric", "sps")
    assert {c["metric"] for c in named["cases"]} == {"timer/overhead_s", "sps"}  # asked for by name: shown
    # the table and the markdown report
    report = tmp_path / "cmp.md"
    assert main(["compare", runs["base"], runs["cand"], "--report", str(report)]) == 0
    table = capsys.readouterr().out
    text = report.read_text()
    table_rows = "\n".join(line for line in table.splitlines() if "│" in line)  # rich's table, not the note
    report_rows = "\n".join(line for line in text.splitlines() if line.startswith("| b "))
    for metric in OWN:
        assert metric not in table_rows and metric not in report_rows
    for metric in USER:
        assert metric in table_rows and f"`{metric}`" in report_rows
    assert "--all-metrics shows them" in table and "--all-metrics shows them" in text
    # the records themselves keep every metric
    assert {r.metric for r in read_run(runs["cand"])} == set(USER) | set(OWN)


def test_compare_by_hides_internals(runs: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    out = compared(capsys, runs["both"], "--by", "impl")
    assert {c["metric"] for c in out["groups"]["b"]} == set(USER)
    every = compared(capsys, runs["both"], "--by", "impl", "--all-metrics")
    assert {c["metric"] for c in every["groups"]["b"]} == set(USER) | set(OWN)


def test_ab_report_and_comparison_hide_internals(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``rlbench ab`` with the two revisions' runs stood in (run_ab is what measures them; covered in test_ab.py)."""
    import rlbench.analysis.ab as ab

    def fake_run_ab(*args: object, **kwargs: object) -> SimpleNamespace:
        base, head = records("base", 1.0), records("head", 1.1)
        return SimpleNamespace(base=base, head=head, base_rev="a" * 40, head_rev="b" * 40, rounds=6)

    monkeypatch.setattr(ab, "run_ab", fake_run_ab)
    monkeypatch.setattr(ab, "uncommitted_changes", lambda cwd: [])
    monkeypatch.chdir(tmp_path)
    for extra, expect in (((), set(USER)), (("--all-metrics",), set(USER) | set(OWN))):
        report = tmp_path / f"ab{len(extra)}.md"
        assert main(["ab", "main", "--report", str(report), *extra, "--", "run", "b"]) == 0
        printed = capsys.readouterr().out
        for text in (report.read_text(), printed):
            rows = {line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| b ")}
            assert rows == {f"`{m}` ({USER.get(m, OWN.get(m))[0]})" for m in expect}, rows
            assert ("--all-metrics shows them" in text) == (not extra)

"""What ``rlbench run`` says: one name for pyinstrument (``--pyinstrument``, as ``rlbench profile`` spells it; the old
``--profile`` a hidden alias), one line where the report went under ``--quiet``, a training return that says how it
differs from the eval return, and time figures that add up to the wall."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.report import training
from rlbench.results.metrics import EVAL_RETURN, EVAL_S, INIT_S, STARTUP_S, TRAIN_RECENT_RETURN, TRAIN_S, WARMUP_S
from rlbench.results.records import Record

TINY = """
import time

import rlbench


@rlbench.benchmark(summary="a tiny sleep")
def tiny(n: int = 3) -> dict:
    for _ in range(n):
        time.sleep(0.001)
    return {"slept": n * 0.001}
"""


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "bench.py").write_text(textwrap.dedent(TINY))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("flag", ["--pyinstrument", "--profile"])
def test_quiet_says_where_and_pyinstrument_has_one_name(project: Path, capsys: pytest.CaptureFixture, flag: str) -> None:
    store = project / "s"
    assert main(["run", "bench.py:tiny", "--store", str(store), "--quiet", flag]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    m = re.fullmatch(r"rlbench: report written to (\S+\.md) \(records in (\S+\.jsonl)\)", lines[0])
    assert m, lines[0]
    report, records = Path(m.group(1)), Path(m.group(2))
    assert report.is_file() and records.is_file() and report.parent == store
    assert report.with_name(report.stem + "-profile.html").is_file()  # pyinstrument's call tree, under either name


def test_run_help_names_pyinstrument_once(project: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlbench", "run", "bench.py:tiny", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--pyinstrument" in out and "--profile " not in out and "--profile]" not in out
    assert "one line on stderr says where the report" in " ".join(out.split())


def _records() -> list[Record]:
    """Two repeats of a training run, with the figures the console table adds up."""
    out = []

    def add(metric: str, unit: str, samples: list[float], repeat: int, x: list[float] | None = None) -> None:
        r = Record("run", "t", "toy", {}, "h", metric, unit, "none", samples, repeat=repeat, seed=repeat, x=x)
        out.append(r)

    for k, (init, train, warm, ev) in enumerate(((1.0, 0.5, 0.1, 0.05), (1.2, 0.7, 0.1, 0.05))):
        add(INIT_S, "s", [init], k)
        add(TRAIN_S, "s", [train], k)
        add(WARMUP_S, "s", [warm], k)
        add(EVAL_S, "s", [ev], k)
        add(EVAL_RETURN, "return", [400.0 + k] * 8, k)
        add(TRAIN_RECENT_RETURN, "return", [10.0, 50.0, 90.0 + 10 * k], k, x=[1000.0, 2000.0, 3000.0])
    add(STARTUP_S, "s", [2.0], 0)
    return out


def test_the_time_rows_add_up_to_the_wall_and_the_returns_say_why_they_differ(capsys: pytest.CaptureFixture) -> None:
    summary = training.summary(_records())
    assert summary["train_return"] == pytest.approx(95.0)  # the last value of each repeat's curve, median
    assert summary["eval_episodes"] == 8
    assert summary["init_s_total"] == pytest.approx(2.2) and summary["train_s_total"] == pytest.approx(1.2)
    summary.update({"benchmark": "toy", "device": "cpu", "repeats": 2, "records": "r.jsonl", "report": "r.md"})
    summary["cli_wall_s"] = 6.0
    rows = dict(training._time_rows(summary))
    assert rows["Wall, CLI start to report written"] == "6.00 s"
    parts = {
        "  = start-up: imports, before the first repeat": 2.0,
        "  + init: envs, networks, optimizer, 2 repeats": 2.2,
        "  + training, 2 repeats (warm-up 200.0 ms included)": 1.2,
        "  + evaluation, 2 repeats": 0.1,
        "  + rlbench's own work: timer costs, records, report": 0.5,  # the rest: 6 - 2 - 2.2 - 1.2 - 0.1
    }
    assert set(rows) == {"Wall, CLI start to report written", *parts}
    for label, seconds in parts.items():
        assert rows[label] == training.fmt_s(seconds), label
    assert sum(parts.values()) == pytest.approx(6.0)
    training.print_summary(summary)
    printed = " ".join(capsys.readouterr().out.split())
    assert "Training return (last 10 episodes, exploring)" in printed and "95.0" in printed
    assert "Eval return (trained policy, deterministic)" in printed and "400.5" in printed
    assert "exploring actions" in printed and "deterministic actions (its mode) over 8 episodes" in printed
    # without the figures that add up (a profiled script, Ray's parallel repeats): no sum is claimed
    ray = dict(training._time_rows({**summary, "backend": "ray"}))
    assert not any(label.startswith("  +") for label in ray)

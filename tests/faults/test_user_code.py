"""A user's `--impl` that hangs, exits, crashes or fails at benchmark sizes never takes rlbench down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli_together
from tests.faults.fault_helpers import one_line_error, rlbench

pytestmark = pytest.mark.slow  # each runs the gae group's check or benchmarks in subprocesses

USER = """
import os, sys, time
import numpy as np
from rlbench.components.returns.gae import gae_numpy

def good(rewards, values, dones, last_value, gamma, lam):
    return gae_numpy(rewards, values, dones, last_value, gamma, lam)

def hangs(rewards, values, dones, last_value, gamma, lam):
    while True:
        time.sleep(0.01)

def exits(rewards, values, dones, last_value, gamma, lam):
    raise SystemExit(3)

def dies(rewards, values, dones, last_value, gamma, lam):
    os._exit(7)

def big_raises(rewards, values, dones, last_value, gamma, lam):
    if rewards.shape[0] > 1000:
        raise ValueError("too big for me")
    return gae_numpy(rewards, values, dones, last_value, gamma, lam)

def big_hangs(rewards, values, dones, last_value, gamma, lam):
    while rewards.shape[0] > 1000:
        pass
    return gae_numpy(rewards, values, dones, last_value, gamma, lam)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mygae.py").write_text(USER)
    return tmp_path


@pytest.mark.parametrize(
    "fn, expected",
    [
        ("hangs", "did not finish within 1 s (--timeout)"),
        ("exits", "exited with code 3 during its import or correctness check"),
        ("dies", "exited with code 7"),
    ],
)
def test_check_that_hangs_or_exits_is_reported_against_the_implementation(project: Path, fn: str, expected: str) -> None:
    # the check of an implementation that works takes about 0.1 s: a second is plenty, and the hanging one waits less
    proc = rlbench(["run", "gae", "--impl", f"mygae:{fn}", "--timeout", "1", "--quiet"], project, timeout=120)
    err = one_line_error(proc)
    assert f"--impl mygae:{fn}" in err and expected in err, err


def test_failure_at_benchmark_sizes_keeps_the_other_timings(project: Path) -> None:
    """An implementation that raises past the smallest size, and one that hangs there: each run keeps the timings of
    the others and says why that one was not timed (the two runs at once: nothing checked here is a timing)."""

    def args(fn: str) -> list[str]:
        return [
            "run",
            "gae",
            "--impl",
            f"mygae:{fn}",
            "--impl",
            "mygae:good",
            "--select",
            "user or numpy",
            "--max-time",
            "0.02",
            "--timeout",  # each size the implementation hangs at waits this long; a good size takes well under 0.1 s
            "1.5",
            "--json",
            "--report",
            f"{fn}.md",
        ]

    fns = ("big_raises", "big_hangs")
    for fn, proc in zip(fns, run_cli_together([args(fn) for fn in fns], project, timeout=300), strict=True):
        assert proc.returncode == 0, (fn, proc.stderr)
        cases = json.loads(proc.stdout)["cases"]
        timed = {(c["impl"], c["size"]) for c in cases}
        assert {("numpy", s) for s in ("128x8", "2048x64", "1024x1024")} <= timed, fn
        assert {("user:good", s) for s in ("128x8", "2048x64", "1024x1024")} <= timed, fn
        assert (f"user:{fn}", "128x8") in timed and (f"user:{fn}", "2048x64") not in timed
        reason = "too big for me" if fn == "big_raises" else "did not finish within 1.5 s"
        warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlbench: warning:")]
        assert any(f"user:{fn}" in w and reason in w for w in warnings), proc.stderr
        report = (project / f"{fn}.md").read_text()
        assert "Failed, not timed" in report and reason in report, fn


def test_working_directory_and_relative_pythonpath_are_importable(project: Path) -> None:
    """Under the `rlbench` console script (not only `python -m rlbench`), as pytest users expect: one run takes an
    implementation from the working directory and one from a relative PYTHONPATH entry (named apart: a case is
    named after its function)."""
    script = Path(sys.executable).with_name("rlbench")
    if not script.is_file():
        pytest.skip("the rlbench console script is not installed beside this interpreter")
    (project / "pkgs").mkdir()
    (project / "pkgs" / "othergae.py").write_text(USER.replace("def good(", "def other_good("))
    env = {**os.environ, "PYTHONPATH": "pkgs"}
    impls = ["--impl", "mygae:good", "--impl", "othergae:other_good"]
    proc = subprocess.run(
        [str(script), "run", "gae", *impls, "--select", "user", "--max-time", "0.01", "--quiet", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    cases = json.loads(proc.stdout)["cases"]
    assert {(c["impl"], c["size"]) for c in cases} == {
        (impl, size) for impl in ("user:good", "user:other_good") for size in ("128x8", "2048x64", "1024x1024")
    }

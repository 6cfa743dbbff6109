"""Ctrl-C and a component that raises mid-run: a clear line, a non-zero exit, finished repeats kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.core.errors import DataError
from rlbench.results.metrics import Metric
from rlbench.results.store import read_records
from rlbench.run import registry
from rlbench.run.registry import BenchmarkSpec
from tests.cli.cli_helpers import one_line_error


def foreground_signals() -> None:
    """In the child: Ctrl-C and SIGTERM as a foreground command has them (a background shell job ignores SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_keeps_finished_repeats(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlbench",
            "run",
            "ppo-cartpole",
            "--total-steps",
            "4096",
            "--repeats",
            "200",
            "--quiet",
            "--eval-episodes",
            "1",
            "--store",
            "st",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            files = list((tmp_path / "st").glob("*.jsonl"))
            try:
                if files and len({r.repeat for r in read_records(files[0])}) >= 2:
                    break
            except DataError:  # caught the file between its creation and the end of a write: look again
                pass
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("no repeat finished within 90 s")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().count("\n") == 0 and "interrupted" in err and "repeats saved in" in err, err
    repeats = {r.repeat for r in read_records(files[0])}
    assert len(repeats) >= 2 and repeats == set(range(len(repeats)))  # whole repeats only, in order


@dataclass
class _Cfg:
    seed: int = 0


def _flaky_run(cfg: _Cfg, ctx: object) -> list[Metric]:
    if cfg.seed >= 1:
        raise RuntimeError("env worker died")
    return [Metric("sps", "steps/s", "higher", [123.0])]


@pytest.mark.slow
def test_component_raising_mid_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(registry._discover().specs, "flaky", BenchmarkSpec("flaky", "raises in repeat 1", _Cfg, _flaky_run))
    monkeypatch.chdir(tmp_path)
    code = main(["run", "flaky", "--repeats", "3", "--quiet"])
    assert code == 1
    err = capsys.readouterr().err
    one_line_error(subprocess.CompletedProcess([], 1, "", err))
    assert "repeat 1 (seed 1) raised RuntimeError: env worker died" in err and "1 finished repeats saved in" in err
    files = list((tmp_path / ".rlbench").glob("*.jsonl"))
    assert [r.samples for r in read_records(files[0]) if r.metric == "sps"] == [[123.0]]
    tb = list((tmp_path / ".rlbench").glob("*.error.txt"))
    assert tb and "env worker died" in tb[0].read_text()


def test_keyboard_interrupt_outside_the_runner(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def boom(*a: object, **k: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("rlbench.cli.listing.list_command", boom)
    assert main(["list"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_help_explains_every_flag(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlbench", "run", "ppo-cartpole", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    from dataclasses import fields

    from rlbench.algos.ppo.config import PPOConfig

    for f in fields(PPOConfig):
        assert "--" + f.name.replace("_", "-") in out, f.name
    for flag in ("--repeats", "--store", "--report", "--pyinstrument", "--json", "--quiet"):
        assert flag in out

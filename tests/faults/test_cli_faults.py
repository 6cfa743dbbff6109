"""Bad input, unwritable outputs, signals and legitimate-but-odd data: one line, the right exit code, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlbench.results.store import read_records
from tests.cli.cli_helpers import own_worktrees
from tests.faults.fault_helpers import foreground_signals, one_line_error, record, rlbench

pytestmark = pytest.mark.slow

SMALL = ["--total-steps", "1024", "--eval-episodes", "1", "--quiet"]


@pytest.mark.parametrize(
    "args",
    [
        ["--seed", "-1"],
        ["--seed", str(2**70)],
        ["--threads", "10000"],
    ],
)
def test_out_of_range_common_options_are_bad_input(tmp_path: Path, args: list[str]) -> None:
    err = one_line_error(rlbench(["run", "ppo-cartpole", *SMALL, *args], tmp_path))
    assert args[0] in err
    assert not (tmp_path / ".rlbench").exists() or not list((tmp_path / ".rlbench").glob("*.jsonl"))


def test_malformed_test_knob_is_bad_input(tmp_path: Path) -> None:
    env = {**os.environ, "RLBENCH_INJECT_DELAY": "update:x"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlbench", "run", "ppo-cartpole", *SMALL],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "RLBENCH_INJECT_DELAY" in one_line_error(proc)


@pytest.mark.parametrize("env_id", ["LunarLander-v3", "nosuchpkg:Foo-v0"])
def test_env_that_fails_to_import_is_bad_input(tmp_path: Path, env_id: str) -> None:
    assert env_id in one_line_error(rlbench(["run", "sac-pendulum", "--env", env_id, "--quiet"], tmp_path))


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, run in ((a, "20260101T000000Z-aaaaaa"), (b, "20260101T000001Z-bbbbbb")):
        path.write_text("".join(record(run, samples=[100.0 + k], repeat=k, seed=k).to_json() + "\n" for k in range(6)))
    return a, b


def test_outputs_are_checked_before_any_work(tmp_path: Path) -> None:
    a, b = _two_runs(tmp_path)
    (tmp_path / "plain-file").write_text("x")
    bad = str(tmp_path / "plain-file" / "out.md")  # its directory cannot exist
    for args in (
        ["compare", str(a), str(b), "--report", bad],
        ["gate", str(a), str(b), "--fail", "sps:5%", "--summary", bad],
        ["export", str(a), "--format", "pytest-benchmark", "-o", bad],
    ):
        proc = rlbench(args, tmp_path)
        assert "cannot create directory" in one_line_error(proc), args
        assert proc.stdout == "", args  # nothing printed before the error: no PASS followed by a failure
    # a missing directory is created, as `rlbench run --report` does
    ok = rlbench(["gate", str(a), str(b), "--fail", "sps:5%", "--summary", str(tmp_path / "new" / "dir" / "s.md")], tmp_path)
    assert ok.returncode == 0 and (tmp_path / "new" / "dir" / "s.md").is_file(), ok.stderr


def test_a_threshold_that_can_never_fail_is_refused(tmp_path: Path) -> None:
    a, b = _two_runs(tmp_path)
    assert "can never get worse" in one_line_error(rlbench(["gate", str(a), str(b), "--fail", "sps:500%"], tmp_path))


def test_import_of_non_numeric_timings_is_bad_input(tmp_path: Path) -> None:
    data = {"benchmarks": [{"name": "t", "stats": {"median": 1.0, "data": ["fast", 1.0]}}]}
    (tmp_path / "b.json").write_text(json.dumps(data))
    assert "non-numeric" in one_line_error(rlbench(["import", "b.json"], tmp_path))


def test_sac_with_no_update_writes_records_and_a_report(tmp_path: Path) -> None:
    proc = rlbench(
        [
            "run",
            "sac-pendulum",
            "--total-steps",
            "300",
            "--learning-starts",
            "1000",
            "--eval-episodes",
            "1",
            "--quiet",
            "--json",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    report = tmp_path / out["report"]
    assert report.is_file() and "300 agent steps" in report.read_text()


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _leftovers(before: set[str]) -> set[str]:
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    return {p.name for p in tmp.glob("rlbench-*")} - before


def _signal_mid_run(tmp_path: Path, args: list[str], sig: int, wait_for: str) -> tuple[subprocess.CompletedProcess, set]:
    """Start `rlbench ARGS`, send `sig` once a file matching `wait_for` (under tmp_path) has data, wait for the end."""
    before = {p.name for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("rlbench-*")}
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(h.stat().st_size > 0 for h in tmp_path.glob(wait_for)):
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before the signal could be sent"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    time.sleep(0.2)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), _leftovers(before)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_training_keeps_finished_repeats(tmp_path: Path, sig: int, code: int) -> None:
    done, left = _signal_mid_run(
        tmp_path,
        ["run", "ppo-cartpole", "--total-steps", "16384", "--repeats", "50", "--quiet", "--store", "s"],
        sig,
        "s/*.jsonl",
    )
    assert done.returncode == code, done.stderr
    assert "repeats saved in" in done.stderr and "Traceback" not in done.stderr
    repeats = sorted({r.repeat for r in read_records(tmp_path / "s")})
    assert repeats == list(range(len(repeats))) and 1 <= len(repeats) < 50
    assert not left


def test_sigterm_during_micro_leaves_no_child_and_no_temp_dir(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", "run", "gae", "--max-time", "0.5", "--quiet"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    deadline, pytest_child = time.monotonic() + 120, None
    while time.monotonic() < deadline and pytest_child is None:
        for child in _children(proc.pid):  # the chart worker, then the pytest-benchmark subprocess
            try:
                if "benchmark-json" in Path(f"/proc/{child}/cmdline").read_text():
                    pytest_child = child
            except OSError:
                pass
        time.sleep(0.01)
    assert pytest_child is not None, "the micro run never started its pytest-benchmark child"
    tmp_dirs = [Path(os.readlink(f"/proc/{pytest_child}/cwd"))]  # the child runs in the micro run's temporary directory
    assert tmp_dirs[0].name.startswith("rlbench-micro-")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert not Path(f"/proc/{pytest_child}").exists(), "the pytest child outlived rlbench"
    assert not [p for p in tmp_dirs if p.exists()], "the micro run's temporary directory was left behind"


def test_sigterm_during_ab_removes_worktrees(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        pytest.skip("needs rlbench's own git checkout")
    before = own_worktrees(repo)
    args = ["ab", "HEAD", "HEAD", "--rounds", "5", "--", "run", "ppo-cartpole", "--total-steps", "16384"]
    env_tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    before_tmp = {p.name for p in env_tmp.glob("rlbench-ab-*")}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(env_tmp.glob("rlbench-ab-*/store-*/*.jsonl")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert own_worktrees(repo) == before
    assert {p.name for p in env_tmp.glob("rlbench-ab-*")} <= before_tmp
    assert subprocess.run(["pgrep", "-f", f"rlbench-ab-{proc.pid}-"], capture_output=True, text=True).stdout.strip() == ""


def test_ab_in_a_user_repository_names_a_missing_script(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "x.txt").write_text("x")
    subprocess.run(["git", "add", "x.txt"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"], cwd=tmp_path, check=True)
    proc = rlbench(["ab", "HEAD", "HEAD", "--rounds", "1", "--json", "--", "profile", "--", "python", "train.py"], tmp_path)
    assert "no such script: 'train.py'" in one_line_error(proc)
    assert subprocess.run(["git", "worktree", "list"], cwd=tmp_path, capture_output=True, text=True).stdout.count("\n") == 1


BROKEN_ENV = """
import gymnasium as gym
import numpy as np


class Broken(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Box(-2, 2, (1,), np.float32)

    def __init__(self):
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, a):
        self.t += 1
        if self.t > 150:
            raise RuntimeError("the env broke")
        return np.zeros(3, np.float32), 0.0, False, self.t % 50 == 0, {}


gym.register("Broken-v0", entry_point="brokenenv:Broken")
"""


@pytest.mark.parametrize("quiet", [False, True], ids=["progress-on", "quiet"])
def test_a_benchmark_that_raises_ends_with_one_line_even_with_progress_on(tmp_path: Path, quiet: bool) -> None:
    (tmp_path / "brokenenv.py").write_text(BROKEN_ENV)
    args = ["run", "sac-pendulum", "--env", "brokenenv:Broken-v0", "--total-steps", "400", "--learning-starts", "100"]
    err = one_line_error(rlbench(args + ["--quiet"] * quiet, tmp_path), code=1)
    assert "raised RuntimeError: the env broke" in err and "traceback in" in err


def test_report_of_imported_pytest_benchmark_records(tmp_path: Path) -> None:
    """A plain pytest-benchmark file (no rlbench extra_info, a NaN-free summary only) imports and renders."""
    data = {
        "benchmarks": [
            {"name": "test_a", "fullname": "t.py::test_a", "params": None, "stats": {"median": 1e-3, "rounds": 5}},
            {"name": "test_b", "fullname": "t.py::test_b", "stats": {"median": 2e-3, "data": [2e-3, 2.1e-3]}},
        ]
    }
    (tmp_path / "b.json").write_text(json.dumps(data))
    assert rlbench(["import", "b.json", "--store", "s"], tmp_path).returncode == 0
    proc = rlbench(["report", "s", "-o", "-"], tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "# rlbench micro-benchmark report" in proc.stdout and "t.py::test_b" in proc.stdout

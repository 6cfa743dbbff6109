"""`rlbench run TARGET --backend ray`: every case a Ray task, records streamed into one store, none lost or doubled.

The end-to-end tests drive the real command on a user's benchmark of ``./suites/`` (a sleep, so a case can be killed
while it runs): one on a 2-node ``ray.cluster_utils`` cluster joined with ``--address``, where a worker is killed
mid-case and another case raises, and one on the local Ray the command starts itself, stopped by Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rlbench.suites.scripts import fanout as harness

from rlbench.results.store import read_records
from rlbench.run.fanout import TASK_NAME, plan_cases
from rlbench.run.runner import resolve_run_target
from tests.cli.cli_helpers import run_cli
from tests.faults.fault_helpers import cmdline, descendants, foreground_signals, gone, one_line_error

ray = pytest.importorskip("ray", reason="--backend ray needs the rlbench[ray] extra (CI installs it)")

# under pytest-xdist, one Ray at a time (tests/conftest.py)
pytestmark = pytest.mark.one_at_a_time("ray")

SUITE = '''
import os
import time

import rlbench


@rlbench.benchmark(summary="sleeps, then reports the process it ran in")
def nap(seconds: float = 0.0, fail_seed: int = -1, seed: int = 0) -> dict[str, float]:
    """A case that takes a while.

    Args:
        seconds: how long to sleep.
        fail_seed: the seed whose case raises.
    """
    if seed == fail_seed:
        raise ValueError(f"seed {seed} fails on purpose")
    time.sleep(seconds)
    return {"pid": float(os.getpid())}
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "naps.py").write_text(SUITE)
    return tmp_path


def _wait_for_case(timeout: float = 90) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = harness.case_workers()  # pid -> case label
        if found:
            return next(iter(found.items()))
        time.sleep(0.1)
    raise AssertionError("no Ray worker started a case")


def test_the_kill_harness_looks_for_the_title_rlbench_gives_a_case_worker():
    assert harness.TASK_NAME == TASK_NAME


def test_cases_split_micro_groups_and_repeats():
    micro = resolve_run_target("micro")
    cases = plan_cases(micro, micro.config_factory(), repeats=2)
    assert [c.label for c in cases[:2]] == ["gae, repeat 0", "buffers, repeat 0"]
    from rlbench.suites.micro.runner import GROUPS

    n = len(GROUPS)
    assert n >= 6 and len(cases) == 2 * n and {c.repeat for c in cases} == {0, 1}
    assert [c.label for c in cases[:n]] == [f"{g}, repeat 0" for g in GROUPS]
    assert all(c.part.group == (c.label.split(",")[0],) and c.config.group == () for c in cases)
    assert [c.config.seed for c in cases] == [0] * n + [1] * n
    ppo = resolve_run_target("ppo-cartpole")
    assert [(c.label, c.part.seed) for c in plan_cases(ppo, ppo.config_factory(), repeats=3)] == [
        ("repeat 0", 0),
        ("repeat 1", 1),
        ("repeat 2", 2),
    ]


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@pytest.mark.alone  # kills a case 0.3 s into its 1.5 s sleep: another test's load makes that a race
@pytest.mark.slow
def test_a_killed_worker_is_retried_once_and_nothing_is_lost_or_doubled(project, two_nodes):
    args = ["run", "nap", "--fail-seed", "4", "--seconds", "1.5", "--quiet"]
    # the same cases run serially, for the comparison at the end: started now, it sleeps beside the Ray run (a serial
    # case's process has no Ray worker's title, so the search for a case to kill never finds it)
    serial = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args, "--repeats", "4", "--store", "serial"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rlbench",
                *args,
                "--repeats",
                "5",
                "--store",
                "st",
                "--backend",
                "ray",
                "--address",
                two_nodes.address,
            ],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        killed, label = _wait_for_case()
        time.sleep(0.3)  # mid-case: it sleeps 1.5 s
        os.kill(killed, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        line = one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), code=1)
        assert out == ""  # Ray's "(raylet) A worker died" lines go to the run's log, not stdout (--json keeps it clean)
        assert "case repeat 4 raised ValueError: seed 4 fails on purpose" in line and "4 of 5 cases saved" in line, line

        records = [r for r in read_records(next((project / "st").glob("*.jsonl"))) if r.metric == "pid"]
        assert Counter(r.repeat for r in records) == {0: 1, 1: 1, 2: 1, 3: 1}  # 0 lost, 0 duplicated
        (retried,) = [r for r in records if r.meta["case"] == label]
        assert retried.samples == [float(retried.meta["worker_pid"])] and retried.meta["worker_pid"] != killed
        assert len({r.fingerprint["node"]["ray_node_id"] for r in records}) == 2  # one CPU a node: both nodes ran cases
        assert "ValueError: seed 4 fails on purpose" in (project / "st" / f"{records[0].run_id}.error.txt").read_text()
        assert "worker died" in (project / "st" / f"{records[0].run_id}.ray.log").read_text()

        # the same records as a serial run of the same cases: one per repeat, with the same parameters
        _, serial_err = serial.communicate(timeout=120)
        assert serial.returncode == 0, serial_err
        expected = [r for r in read_records(next((project / "serial").glob("*.jsonl"))) if r.metric == "pid"]
        assert sorted((r.repeat, r.seed) for r in expected) == sorted((r.repeat, r.seed) for r in records)
        assert {json.dumps(r.params, sort_keys=True) for r in expected} == {
            json.dumps(r.params, sort_keys=True) for r in records
        }
    finally:  # a failed check above leaves no serial run behind
        if serial.poll() is None:
            serial.kill()
            serial.communicate()


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "what"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_and_sigterm_cancel_the_cases_and_stop_the_local_ray(project, sig, code, what):
    """Ray's own SIGTERM handler in the driver exits 1 with a stack trace; rlbench keeps its own (exit 143)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlbench",
            "run",
            "nap",
            "--seconds",
            "60",
            "--repeats",
            "2",
            "--backend",
            "ray",
            "--store",
            "st",
        ],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    _wait_for_case()
    started = descendants(proc.pid)  # the Ray this command started: GCS, raylet, workers
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert err.strip().splitlines()[-1].startswith(f"rlbench: {what}") and "0 of 2 cases saved" in err, err
    deadline = time.monotonic() + 15
    while [p for p in started if not gone(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [cmdline(p) for p in started if not gone(p)] == []


@pytest.mark.slow
def test_backend_options_are_checked_before_anything_runs(project):
    err = one_line_error(run_cli(["run", "nap", "--address", "127.0.0.1:1"], cwd=project))
    assert "--address names a Ray cluster: add --backend ray" in err
    for flag in ("--pyinstrument", "--profile"):  # --profile: --pyinstrument's old name, still accepted
        err = one_line_error(run_cli(["run", "nap", "--backend", "ray", flag], cwd=project))
        assert "--pyinstrument records this process only" in err
    err = one_line_error(run_cli(["run", "micro", "--group", "nope"], cwd=project))
    assert "unknown --group 'nope'" in err

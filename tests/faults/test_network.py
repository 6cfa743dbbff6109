"""Waiting on the network: a Ray address nothing answers at, or one that accepts connections but is no Ray cluster,
is a one-line exit 2 within seconds, `ray://` included; a SIGTERM while rlbench waits on an address is exit 143 with
a message at once, like everywhere else."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.fault_helpers import foreground_signals, one_line_error, rlbench

pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # each test starts rlbench, which imports Ray, in a subprocess
MICRO = ["run", "gae", "--select", "numpy and T128xN8", "--max-time", "0.05", "--quiet", "--backend", "ray"]
PIPELINE = ["run", "grpo-pipeline", "--engine", "ray", "--updates", "5", "--quiet"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", [MICRO, PIPELINE], ids=["fan-out", "ray-engine"])
@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_unreachable_address_is_a_usage_error_within_seconds(tmp_path: Path, command: list[str], scheme: str) -> None:
    address = f"{scheme}127.0.0.1:{_free_port()}"  # nothing listens there
    t0 = time.monotonic()
    proc = rlbench([*command, "--address", address, "--store", "s"], tmp_path, timeout=60)
    assert "cannot reach the Ray cluster" in one_line_error(proc)
    assert time.monotonic() - t0 < 20
    assert not list((tmp_path / "s").glob("*.jsonl")) if (tmp_path / "s").exists() else True


@pytest.mark.parametrize("address", ["nohost", "http://127.0.0.1:6379", "127.0.0.1:0"])
def test_malformed_address_is_a_usage_error(tmp_path: Path, address: str) -> None:
    proc = rlbench([*MICRO, "--address", address, "--store", "s"], tmp_path, timeout=60)
    assert "--address" in one_line_error(proc)


def _silent_listener() -> socket.socket:
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never says a word
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    return silent


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_an_address_that_accepts_but_is_no_ray_cluster_is_a_usage_error_within_seconds(
    tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before, ray.init waited on it inside Ray's C++ client, where no Python signal handler runs: a SIGTERM took
    # effect only some 30 s later
    monkeypatch.setenv("RLBENCH_CONNECT_S", "1")
    silent = _silent_listener()
    try:
        t0 = time.monotonic()
        address = f"{scheme}127.0.0.1:{silent.getsockname()[1]}"
        proc = rlbench([*MICRO, "--address", address, "--store", "s"], tmp_path, timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        silent.close()
    assert "says nothing within 1 s, so it is no Ray cluster" in one_line_error(proc)
    assert elapsed < 20


def test_sigterm_while_waiting_on_a_silent_address_is_exit_143_at_once(tmp_path: Path) -> None:
    silent = _silent_listener()
    conn = None
    try:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlbench", *MICRO, "--address", address, "--store", "s"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "200", "RLBENCH_CONNECT_S": "120"},  # still waiting when the signal comes
            preexec_fn=foreground_signals,
        )
        silent.settimeout(60)
        conn, _ = silent.accept()  # rlbench (Ray imported) has connected: it waits for the address to answer
        time.sleep(0.5)  # well inside that wait
        assert proc.poll() is None, proc.communicate()[1]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if conn is not None:
            conn.close()
        silent.close()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("rlbench: terminated"), err
    assert elapsed < 10, elapsed

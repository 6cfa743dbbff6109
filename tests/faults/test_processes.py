"""Nothing the measured code starts outlives rlbench: a script's Pool workers and Popen children, the local pipeline
engine's roles, forkserver and resource tracker end on a normal end, a timeout, Ctrl-C, SIGTERM and rlbench's own
``kill -9``; a Ctrl-C'd or timed-out profile keeps what its repeat in flight measured.

Every process is found by a unique marker in its environment, never by name: other rlbench runs may share the machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import pytest

from rlbench.results.store import RecordsWarning, read_records
from tests.faults.fault_helpers import foreground_signals

pytestmark = pytest.mark.slow

MARKER = "RLBENCH_TEST_MARKER"
POOL_SCRIPT = """\
import multiprocessing as mp, os, subprocess, sys, time

def square(x):
    time.sleep(0.01)
    return x * x

if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with mp.Pool(2) as pool:
        open("started", "w").close()
        for i in range(int(os.environ.get("ITERS", "1000000"))):
            pool.map(square, range(4))
            time.sleep(0.02)
    print("done")
"""


def marked(marker: str) -> list[str]:
    """Live (not zombie) processes whose environment holds ``marker``: pid and command line."""
    out = []
    needle = f"{MARKER}={marker}".encode()
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle not in env.read_bytes():
                continue
            if (env.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            command = (env.parent / "cmdline").read_bytes().replace(b"\0", b" ")[:100]
            out.append(f"{env.parent.name} {command!r}")
        except (OSError, IndexError):
            continue
    return out


def wait_gone(marker: str, seconds: float = 15.0) -> list[str]:
    """What is still running with ``marker`` after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def start(args: list[str], cwd: Path, marker: str, **env: str) -> subprocess.Popen[str]:
    full_env = {**os.environ, MARKER: marker, "COLUMNS": "200", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )


def kill_marked(marker: str) -> None:
    """Clean up after a failed test (only our own marked processes)."""
    for line in marked(marker):
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except OSError:
            pass


def _records(store: Path) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordsWarning)
        return read_records(store) if list(store.glob("*.jsonl")) else []


@pytest.mark.parametrize("how", ["TERM", "INT", "KILL", "timeout", "normal"])
def test_profile_leaves_no_process_of_the_script(tmp_path: Path, how: str) -> None:
    (tmp_path / "train.py").write_text(POOL_SCRIPT)
    marker = uuid.uuid4().hex
    before = {p.name for p in Path(tempfile.gettempdir()).glob("rlbench-profile-*")}
    extra = ["--timeout", "4"] if how == "timeout" else []
    env = {"ITERS": "20"} if how == "normal" else {}
    proc = start(["profile", "--quiet", *extra, "--store", "s", "--", "python", "train.py"], tmp_path, marker, **env)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), proc.communicate()[1]
        time.sleep(1.5)
        if how in ("TERM", "INT", "KILL"):
            proc.send_signal({"TERM": signal.SIGTERM, "INT": signal.SIGINT, "KILL": signal.SIGKILL}[how])
        # the pipes close only when nothing holding them runs: a child left behind would hang this
        _, err = proc.communicate(timeout=60)
        left = wait_gone(marker)
        assert not left, f"left running after {how}: {left}"
    finally:
        kill_marked(marker)
    code = {"TERM": 143, "INT": 130, "KILL": -9, "timeout": 1, "normal": 0}[how]
    assert proc.returncode == code, err
    if how == "KILL":
        return
    assert how == "normal" or err.strip().splitlines()[-1].startswith("rlbench: "), err
    records = _records(tmp_path / "s")
    assert records, err  # the repeat in flight measured something, and it is kept
    if how != "normal":
        assert all(r.meta.get("cut") for r in records if r.metric != "profile/command_s")
        path = re.search(r" in (\S+\.jsonl);", err)
        assert path and (tmp_path / path.group(1)).is_file(), err  # the file it names exists
        assert "as far as it ran" in err
    after = {p.name for p in Path(tempfile.gettempdir()).glob("rlbench-profile-*")}
    assert not {d for d in after - before if f"-{proc.pid}-" in d}


def test_interrupted_profile_names_no_file_it_did_not_write(tmp_path: Path) -> None:
    """Ctrl-C before the script measured anything: nothing saved, and no records file named."""
    (tmp_path / "train.py").write_text("import time\nopen('started', 'w').close()\ntime.sleep(600)\n")
    marker = uuid.uuid4().hex
    proc = start(["profile", "--quiet", "--store", "s", "--", "python", "train.py"], tmp_path, marker)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_marked(marker)
    assert proc.returncode == 130, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("rlbench: interrupted"), err
    for word in line.split():
        if word.endswith(".jsonl") or word.endswith(".jsonl;"):
            assert (tmp_path / word.rstrip(";")).is_file() or Path(word.rstrip(";")).is_file(), line


def test_local_pipeline_leaves_no_process_and_no_folder_after_kill_9(tmp_path: Path) -> None:
    """The roles' parent is the forkserver, not rlbench: they watch rlbench's pid and end when it is gone, and the
    forkserver and resource tracker follow; the first role to see it gone removes multiprocessing's pymp-* folder.

    The parent here reads rlbench's output to its end before it reaps rlbench (``communicate``), as a CI step or a
    harness does: until then the killed rlbench is a zombie, which the roles must count as gone, or they hold the
    pipes open and the parent waits for ever."""
    marker = uuid.uuid4().hex
    args = ["run", "grpo-pipeline", "--updates", "100000", "--quiet", "--store", "s"]
    with tempfile.TemporaryDirectory(prefix="p") as private:  # short: the forkserver's socket path must fit AF_UNIX
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlbench", *args],
            cwd=tmp_path,
            env={**os.environ, MARKER: marker, "TMPDIR": private},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=foreground_signals,
        )
        try:
            deadline = time.monotonic() + 120
            while len(marked(marker)) < 5 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)  # rlbench, the forkserver, the resource tracker, two generators and the scorer
            time.sleep(2)
            assert proc.poll() is None
            proc.send_signal(signal.SIGKILL)
            try:
                proc.communicate(timeout=30)  # EOF once every process holding rlbench's pipes has ended
            except subprocess.TimeoutExpired:
                pytest.fail(f"rlbench's pipes still open 30 s after kill -9; running: {marked(marker)}")
            left = wait_gone(marker)
            assert not left, f"left running after kill -9: {left}"
            folders = [p.name for p in Path(private).iterdir() if p.name.startswith(("pymp-", "rlbench-"))]
            assert not folders, f"left in TMPDIR after kill -9: {folders}"
        finally:
            kill_marked(marker)


def test_local_pipeline_leaves_no_temporary_folder(tmp_path: Path) -> None:
    """multiprocessing's pymp-* folder (the forkserver's socket) is removed at the end of the run: rlbench leaves
    through os._exit, after the libraries' atexit handlers, which remove it."""
    with tempfile.TemporaryDirectory(prefix="p") as private:  # short: the forkserver's socket path must fit AF_UNIX
        args = ["run", "grpo-pipeline", "--updates", "5", "--quiet", "--store", "s"]
        proc = subprocess.run(
            [sys.executable, "-m", "rlbench", *args],
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": private},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        left = [p.name for p in Path(private).iterdir() if p.name.startswith(("pymp-", "rlbench-"))]
    assert not left, f"left in TMPDIR: {left}"


def test_an_exited_process_not_yet_reaped_is_not_alive() -> None:
    """A zombie answers signal 0, but it runs nothing: what watches a pid (the local roles) must see it gone."""
    from rlbench.core.children import pid_alive

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(proc.pid)  # exited, and still unreaped: os.kill(pid, 0) alone would say alive
    os.kill(proc.pid, 0)
    proc.wait()
    assert pid_alive(os.getpid())


def test_a_group_left_with_zombies_only_is_over_and_not_waited_for() -> None:
    """A script's exited children wait for a reaper as zombies (forever, under a container init that reaps nothing):
    the group is over, so ending a repeat's stragglers must not wait out its grace (it did: 1.1 s per TorchRL profile)."""
    from rlbench.core.children import end_stragglers, group_alive

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        assert group_alive(live.pid)  # a running member
    finally:
        live.kill()
    deadline = time.monotonic() + 30
    while group_alive(live.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not group_alive(live.pid)  # killed, unreaped: signal 0 to the group alone would still find it
    os.killpg(live.pid, 0)
    t0 = time.monotonic()
    end_stragglers(live.pid, grace_s=5.0)
    assert time.monotonic() - t0 < 2.5  # returns at once, not after the 5 s grace
    live.wait()

"""The pipeline on Monarch (experimental engine): it learns, and a failing or killed role fails the run by name."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests import child_env
from tests.faults.fault_helpers import cmdline, descendants, foreground_signals, gone

pytest.importorskip("monarch", reason="the Monarch engine needs the rlbench[monarch] extra (CI installs it)")


from rlbench.engines.base import PipelineConfig, PipelineError
from rlbench.engines.monarch_engine import run
from tests.pipeline.pipeline_helpers import assert_learned

pytestmark = pytest.mark.slow  # starts Monarch actors in processes (or the CLI in a subprocess) and trains the pipeline


def test_monarch_pipeline_learns_and_measures_every_actor():
    out = run(PipelineConfig(engine="monarch", generators=2, updates=300, seed=0, timeout_s=300))
    assert out.engine["engine"] == "monarch" and out.engine["weight_sync"].startswith("rdma/")
    assert out.updates == 300
    assert_learned(out.greedy_reward)
    assert sorted(t.actor for t in out.timelines) == ["generator-0", "generator-1", "learner", "scorer"]
    assert all(t.split()["busy"] > 0 for t in out.timelines)
    # every generator took weights through the RDMA board, and never a version older than one it had
    assert {s.actor for s in out.syncs} == {"generator-0", "generator-1"} and all(s.latency_s >= 0 for s in out.syncs)
    for name in ("generator-0", "generator-1"):
        versions = [s.version for s in out.syncs if s.actor == name]
        assert versions == sorted(set(versions)), name
    assert len({where for where in out.nodes.values()}) == 4  # four processes
    assert len(out.lags) == 300 * 4


def test_an_exception_in_a_generator_reaches_the_driver_with_its_name(monkeypatch):
    monkeypatch.setattr(PipelineConfig, "validate", lambda self: None)
    with pytest.raises(PipelineError, match="generator-0 failed: ValueError: need group_size") as info:
        run(PipelineConfig(engine="monarch", generators=1, batch_states=0, updates=10, timeout_s=120))
    assert info.value.partial is not None


KILL_SCORER = """
import json, os, signal, threading
from tests.pipeline.pipeline_helpers import count_learner_updates
from rlbench.engines.base import PipelineConfig, PipelineError
from rlbench.engines.monarch_engine import run
from monarch import actor as monarch_actor
pids, ready, progressed = {}, threading.Event(), count_learner_updates()
def on_start(started):
    pids.update(started)
    ready.set()
def kill():
    ready.wait(120)
    progressed.wait(120)
    os.kill(pids["scorer"], signal.SIGKILL)
threading.Thread(target=kill, daemon=True).start()
try:
    run(PipelineConfig(engine="monarch", generators=1, updates=10**6, timeout_s=120), on_start=on_start)
except PipelineError as exc:
    partial = exc.partial
    print(json.dumps({"error": str(exc), "updates": partial.updates, "actors": [t.actor for t in partial.timelines],
                      "hook": monarch_actor.unhandled_fault_hook.__module__}), flush=True)
    os._exit(0)  # Monarch 0.7 may crash this client ~30 s later on a message to the dead process (see the engine)
"""


def test_a_killed_process_fails_the_run_and_keeps_what_was_measured():
    """In a child process: Monarch 0.7's client can crash ~30 s after a role's process was killed (a message it could
    not deliver comes back to it), which must not take the test session down with it."""
    proc = subprocess.run([sys.executable, "-c", KILL_SCORER], capture_output=True, text=True, timeout=240, env=child_env())
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1])
    assert out["error"].startswith("scorer failed: its process died"), out
    assert out["updates"] > 0 and "learner" in out["actors"]
    assert out["hook"] == "rlbench.engines.monarch_engine"  # not Monarch's default, which exits the client


def test_sigterm_stops_the_run_and_leaves_no_monarch_process(tmp_path):
    args = ["run", "grpo-pipeline", "--engine", "monarch", "--updates", "1000000", "--store", str(tmp_path), "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlbench", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=foreground_signals,
    )
    deadline = time.monotonic() + 90
    while len(descendants(proc.pid)) < 4 and time.monotonic() < deadline:  # queues, scorer, 2 generators
        time.sleep(0.2)
    children = descendants(proc.pid)
    assert len(children) >= 4, [cmdline(p) for p in children]
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM): 0 of 1 repeats saved" in err
    deadline = time.monotonic() + 15
    while [p for p in children if not gone(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [cmdline(p) for p in children if not gone(p)] == []

"""The pipeline on Monarch (experimental engine): it learns, and a failing or killed role fails the run by name."""

from __future__ import annotations

import os
import signal
import threading

import pytest

pytest.importorskip("monarch", reason="the Monarch engine needs the rlbench[monarch] extra (CI installs it)")

import monarch.actor

from rlbench.engines.base import PipelineConfig, PipelineError
from rlbench.engines.monarch_engine import run


def test_monarch_pipeline_learns_and_measures_every_actor():
    out = run(PipelineConfig(engine="monarch", generators=2, updates=300, seed=0, timeout_s=300))
    assert out.engine["engine"] == "monarch" and out.engine["weight_sync"].startswith("rdma/")
    assert out.updates == 300 and out.greedy_reward[0] < 0.35 and out.greedy_reward[1] >= 0.9, out.greedy_reward
    assert sorted(t.actor for t in out.timelines) == ["generator-0", "generator-1", "learner", "scorer"]
    assert all(t.split()["busy"] > 0 for t in out.timelines)
    # every generator took weights through the RDMA board, and never a version older than one it had
    assert {s.actor for s in out.syncs} == {"generator-0", "generator-1"} and all(s.latency_s >= 0 for s in out.syncs)
    for name in ("generator-0", "generator-1"):
        versions = [s.version for s in out.syncs if s.actor == name]
        assert versions == sorted(set(versions)), name
    assert len({where for where in out.nodes.values()}) == 4  # four processes
    assert monarch.actor.unhandled_fault_hook is not None and len(out.lags) == 300 * 4


def test_an_exception_in_a_generator_reaches_the_driver_with_its_name(monkeypatch):
    monkeypatch.setattr(PipelineConfig, "validate", lambda self: None)
    with pytest.raises(PipelineError, match="generator-0 failed: ValueError: need group_size") as info:
        run(PipelineConfig(engine="monarch", generators=1, batch_states=0, updates=10, timeout_s=120))
    assert info.value.partial is not None


def test_a_killed_process_fails_the_run_keeps_what_was_measured_and_the_client_survives(learner_progressed):
    pids: dict[str, int] = {}
    ready = threading.Event()
    hook = monarch.actor.unhandled_fault_hook

    def on_start(started: dict[str, int]) -> None:
        pids.update(started)
        ready.set()

    def kill() -> None:
        ready.wait(120)
        learner_progressed.wait(120)
        os.kill(pids["scorer"], signal.SIGKILL)

    threading.Thread(target=kill, daemon=True).start()
    with pytest.raises(PipelineError, match="its process died") as info:
        run(PipelineConfig(engine="monarch", generators=1, updates=10**6, timeout_s=120), on_start=on_start)
    partial = info.value.partial
    assert partial.updates > 0 and "learner" in {t.actor for t in partial.timelines}
    assert monarch.actor.unhandled_fault_hook is hook  # Monarch's own hook (exit the client) is back after the run

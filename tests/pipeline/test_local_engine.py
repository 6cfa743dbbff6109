"""The pipeline on the embedded engine: it learns, measures every stage, syncs weights, and fails cleanly."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rlbench.engines.base import PipelineConfig, PipelineError
from rlbench.engines.local import run
from tests.faults.fault_helpers import gone
from tests.pipeline.pipeline_helpers import assert_learned

pytestmark = pytest.mark.slow  # the embedded engine runs its roles in worker processes


@pytest.mark.parametrize("sync", ["shm", "gloo"])
def test_local_pipeline_learns_and_measures_every_stage(sync):
    pids: dict[str, int] = {}
    cfg = PipelineConfig(generators=2, updates=300, weight_sync=sync, seed=0, timeout_s=120)
    out = run(cfg, on_start=pids.update)
    assert out.updates == 300 and out.samples == 300 * 4 * 64 * 8
    assert_learned(out.greedy_reward)
    names = sorted(t.actor for t in out.timelines)
    assert names == ["generator-0", "generator-1", "learner", "scorer"]
    for t in out.timelines:
        assert t.split()["busy"] > 0 and t.ended > t.started, t.actor
    # every generator took new weights through the chosen strategy
    assert {s.actor for s in out.syncs} == {"generator-0", "generator-1"}
    assert all(s.nbytes == out.weight_bytes and 0 <= s.latency_s < 30 for s in out.syncs)
    assert len(out.transfer_s) == len(out.syncs)
    assert len(out.lags) == 300 * 4 and min(out.lags) >= 0
    assert out.slices_generated >= out.slices_scored >= 300 * 4
    assert len(out.queue_depth) == 100 and out.ended > out.started  # sampled every 3rd update
    assert sorted(pids) == ["generator-0", "generator-1", "scorer"] and all(gone(p) for p in pids.values())


def test_a_failing_generator_fails_the_run_with_its_name(monkeypatch):
    monkeypatch.setattr(PipelineConfig, "validate", lambda self: None)  # let a bad setting reach the generator
    cfg = PipelineConfig(generators=1, updates=50, batch_states=0, timeout_s=60)  # it raises when it starts
    with pytest.raises(PipelineError, match="generator-0 failed: ValueError: need group_size") as info:
        run(cfg)
    assert info.value.actor == "generator-0" and info.value.partial is not None


def test_a_killed_process_fails_the_run_keeps_what_was_measured_and_leaves_nothing():
    pids: dict[str, int] = {}
    started = threading.Event()

    def on_start(p: dict[str, int]) -> None:
        pids.update(p)
        started.set()

    def kill_a_generator() -> None:
        started.wait(60)
        time.sleep(2.0)  # let some updates happen
        os.kill(pids["generator-1"], signal.SIGKILL)

    killer = threading.Thread(target=kill_a_generator, daemon=True)
    killer.start()
    with pytest.raises(PipelineError, match="generator-1 failed: its process killed by signal 9") as info:
        run(PipelineConfig(generators=2, updates=1_000_000, timeout_s=120), on_start=on_start)
    killer.join()
    partial = info.value.partial
    assert partial is not None and partial.updates > 0 and partial.samples > 0
    # the scorer may have died too: a process killed while writing leaves a torn message in the shared queue
    assert {t.actor for t in partial.timelines} >= {"learner", "generator-0"}
    assert all(gone(p) for p in pids.values())

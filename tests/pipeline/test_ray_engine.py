"""The pipeline on Ray: it learns, reports every actor and its node, and a failing or killed actor fails the run."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray", reason="the Ray engine needs the rlbench[ray] extra (CI installs it)")

from rlbench.engines.base import PipelineConfig, PipelineError  # noqa: E402
from rlbench.engines.ray_engine import run  # noqa: E402
from tests.pipeline.pipeline_helpers import assert_learned  # noqa: E402

# under pytest-xdist, one Ray at a time (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.one_at_a_time("ray")]  # starts a local Ray and trains the pipeline on it


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray.init(
        address="local",  # a new local Ray, whatever another run left behind
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 * 2**20,
        _node_ip_address="127.0.0.1",
    )
    yield
    ray.shutdown()


def test_ray_pipeline_learns_and_measures_every_actor(local_ray):
    out = run(PipelineConfig(engine="ray", generators=2, updates=300, seed=0, timeout_s=300))
    assert out.engine == {"engine": "ray", "weight_sync": "store"}
    assert out.updates == 300
    assert_learned(out.greedy_reward)
    assert sorted(t.actor for t in out.timelines) == ["generator-0", "generator-1", "learner", "scorer"]
    assert all(t.split()["busy"] > 0 for t in out.timelines)
    assert {s.actor for s in out.syncs} == {"generator-0", "generator-1"} and all(s.latency_s >= 0 for s in out.syncs)
    node = ray.get_runtime_context().get_node_id()
    assert set(out.nodes.values()) == {node} and len(out.nodes) == 4
    assert len(out.queue_depth) == 100 and len(out.lags) == 300 * 4


def test_an_exception_in_a_generator_reaches_the_driver_with_its_name(local_ray, monkeypatch):
    monkeypatch.setattr(PipelineConfig, "validate", lambda self: None)
    with pytest.raises(PipelineError, match="generator-0 failed: ValueError: need group_size") as info:
        run(PipelineConfig(engine="ray", generators=1, batch_states=0, updates=10, timeout_s=120))
    assert info.value.partial is not None


def test_a_killed_actor_fails_the_run_and_keeps_what_was_measured(local_ray, learner_progressed):
    import threading

    handles: dict = {}
    ready = threading.Event()

    def on_start(actors):
        handles.update(actors)
        ready.set()

    def kill():
        ready.wait(120)
        learner_progressed.wait(120)
        ray.kill(handles["scorer"])

    threading.Thread(target=kill, daemon=True).start()
    with pytest.raises(PipelineError, match="scorer failed: its actor died") as info:
        run(PipelineConfig(engine="ray", generators=1, updates=10**6, timeout_s=120), on_start=on_start)
    partial = info.value.partial
    assert partial.updates > 0 and "learner" in {t.actor for t in partial.timelines}

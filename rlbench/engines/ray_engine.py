"""The Ray engine (``--engine ray``, extra ``rlbench[ray]``): generators and the scorer as Ray actors.

Slices travel through two ``ray.util.queue.Queue`` actors (generators → scorer → learner), bounded like the local
engine's. Weights travel through the object store (``--weight-sync store``): the learner puts the flat float32
array once per version (a NumPy array, which Ray stores without pickling a torch tensor's copy and receivers
read zero-copy) and hands the reference to every generator; a generator loads the newest reference between slices.

Generators and the scorer are threaded actors: their loop runs in one call while ``set_weights`` and ``stop``
arrive on another thread. A role that raises ends its loop call with a ``RayTaskError``; an actor whose process
dies, with an ``ActorDiedError``; both fail the run with the actor's name, keeping what was measured. Ray is
started here unless it already runs in the process (``--address`` joins a cluster); what was started is shut down
on the way out, Ctrl-C included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rlbench.engines.base import PipelineConfig, PipelineError, PipelineRun, now, policy_hidden, sync_strategy
from rlbench.engines.loops import (
    generator_loop,
    learner_loop,
    merge_reports,
    queue_get,
    queue_put,
    scorer_loop,
    throttled,
    wait_until,
)
from rlbench.engines.ray_connect import init_ray

POLL_S = 0.05


class _StoreReader:
    """A generator's side of ``store``: the newest ``(version, [ref], published)`` handed over by the learner."""

    def __init__(self, box: dict[str, Any]) -> None:
        self.box = box

    def poll(self, mine: int, load: Callable[[Any], None]) -> tuple[int, float, float] | None:
        latest = self.box.get("latest")
        if latest is None or latest[0] <= mine:
            return None
        import ray

        version, refs, published = latest
        t0 = time.perf_counter()
        load(ray.get(refs[0]))
        return version, published, time.perf_counter() - t0

    def close(self) -> None:
        self.box.clear()


class GeneratorActor:
    """A generator as a Ray actor (wrapped with ``ray.remote`` when the engine starts)."""

    def __init__(self, cfg: PipelineConfig, index: int, trajectories: Any) -> None:
        import torch

        torch.set_num_threads(1)
        self.cfg, self.index, self.out = cfg, index, trajectories
        self.box: dict[str, Any] = {}
        self.stopping = False

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def set_weights(self, version: int, refs: list[Any], published: float) -> None:
        latest = self.box.get("latest")
        if latest is None or latest[0] < version:
            self.box["latest"] = (version, refs, published)

    def stop(self) -> None:
        self.stopping = True

    def run(self) -> dict[str, Any]:
        stopped = lambda: self.stopping
        return generator_loop(self.cfg, self.index, _put(self.out, stopped), lambda _: _StoreReader(self.box), stopped)


class ScorerActor:
    """The scorer as a Ray actor."""

    def __init__(self, cfg: PipelineConfig, trajectories: Any, scored: Any) -> None:
        self.cfg, self.inp, self.out = cfg, trajectories, scored
        self.stopping = False

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def stop(self) -> None:
        self.stopping = True

    def run(self) -> dict[str, Any]:
        stopped = lambda: self.stopping
        from ray.util.queue import Empty

        return scorer_loop(self.cfg, queue_get(self.inp, Empty, POLL_S), _put(self.out, stopped), stopped)


def _put(q: Any, stopped: Callable[[], bool]) -> Any:
    from ray.util.queue import Full

    return queue_put(q, stopped, Full, POLL_S)


def run(cfg: PipelineConfig, on_start: Callable[[dict[str, Any]], None] | None = None) -> PipelineRun:
    """Run the pipeline on Ray; the learner runs in this (driver) process.

    Args:
        cfg: The pipeline (``cfg.address`` joins a cluster; empty starts a local Ray).
        on_start: Called with ``{actor: handle}`` once the actors exist (monitoring, fault tests).

    Raises:
        PipelineError: A role failed or its actor died (``partial`` holds what was measured).
        TimeoutError: The run exceeded ``cfg.timeout_s``.
    """
    import ray
    from ray.exceptions import ActorDiedError, RayActorError, RayTaskError
    from ray.util.queue import Empty, Queue

    from rlbench.components.pipeline.policy import FlatPolicy
    from rlbench.components.pipeline.roles import Learner
    from rlbench.components.pipeline.task import BanditTask
    from rlbench.components.pipeline.timeline import Timeline

    cfg.validate()
    t_start = now()
    started_ray = False
    if not ray.is_initialized():
        # a deadline on reaching --address; Ray's native SIGTERM handler would exit 1 with a stack trace
        init_ray(ray, cfg.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        started_ray = True
    task = BanditTask(cfg.state_dim, cfg.actions, cfg.seed)
    policy = FlatPolicy(cfg.state_dim, cfg.actions, policy_hidden(cfg), cfg.layers, cfg.seed)
    learner = Learner(task, policy, lr=cfg.lr, clip=cfg.clip, kl_coef=cfg.kl_coef, seed=cfg.seed)
    out = PipelineRun(weight_bytes=policy.nbytes, engine={"engine": "ray", "weight_sync": sync_strategy(cfg)})
    actors: dict[str, Any] = {}
    loops: dict[str, Any] = {}
    reports: dict[str, dict[str, Any]] = {}
    nodes: dict[str, str] = {}
    queues: list[Any] = []
    learner_tl = None
    deadline = time.monotonic() + (cfg.timeout_s or float("inf"))
    try:
        trajectories, scored = Queue(maxsize=cfg.queue_size), Queue(maxsize=cfg.queue_size)
        queues += [trajectories, scored]
        # spread over the cluster's nodes (one node: all here); the roles' CPUs are not reserved, so that the
        # pipeline also runs where Ray was started with few CPUs, as on a laptop or in CI
        gen_cls = ray.remote(num_cpus=0, max_concurrency=2, scheduling_strategy="SPREAD")(GeneratorActor)
        scorer_cls = ray.remote(num_cpus=0, max_concurrency=2, scheduling_strategy="SPREAD")(ScorerActor)
        for i in range(cfg.generators):
            actors[f"generator-{i}"] = gen_cls.remote(cfg, i, trajectories)
        actors["scorer"] = scorer_cls.remote(cfg, trajectories, scored)
        nodes.update(zip(actors, ray.get([a.node.remote() for a in actors.values()]), strict=True))
        nodes["learner"] = str(ray.get_runtime_context().get_node_id())
        if on_start is not None:
            on_start(dict(actors))
        loops.update({name: a.run.remote() for name, a in actors.items()})
        out.startup_s = now() - t_start

        def check() -> None:
            done, _ = ray.wait(list(loops.values()), num_returns=len(loops), timeout=0)
            for name, ref in loops.items():
                if ref in done:
                    _raise_for(name, ref, ray, RayTaskError, (ActorDiedError, RayActorError))

        health = throttled(check)

        def get() -> Any:
            while True:
                health()
                try:
                    return scored.get(timeout=POLL_S)
                except Empty:
                    check()
                    wait_until(deadline, cfg.timeout_s)

        def publish(weights: Any, version: int) -> None:
            t0 = now()
            ref = ray.put(weights.copy())  # the learner's buffer keeps changing: the store holds this version
            for name, a in actors.items():
                if name.startswith("generator"):
                    a.set_weights.remote(version, [ref], t0)

        learner_tl = learner_loop(cfg, out, get, publish, learner, depth=lambda: (trajectories.qsize(), scored.qsize()))
    except PipelineError as exc:
        _stop(actors, loops, reports, queues, ray)
        out.updates = out.updates or learner.version
        exc.partial = merge_reports(out, learner_tl or Timeline("learner"), reports, nodes)
        raise
    finally:
        _stop(actors, loops, reports, queues, ray)
        if started_ray:
            ray.shutdown()
    return merge_reports(out, learner_tl, reports, nodes)


def _raise_for(name: str, ref: Any, ray: Any, task_error: type, died: tuple[type, ...]) -> None:
    try:
        ray.get(ref)
    except task_error as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        raise PipelineError(name, f"{type(cause).__name__}: {cause}") from None
    except died as exc:
        raise PipelineError(name, f"its actor died before the run ended ({type(exc).__name__})") from None
    raise PipelineError(name, "its loop returned before the run ended")


def _stop(
    actors: dict[str, Any], loops: dict[str, Any], reports: dict[str, dict[str, Any]], queues: list[Any], ray: Any
) -> None:
    """Stop the loops, collect what each role measured, kill the actors and the queues (once)."""
    if not actors or reports:
        return
    for a in actors.values():
        try:
            a.stop.remote()
        except Exception:
            pass
    for name, ref in loops.items():
        try:
            reports[name] = ray.get(ref, timeout=10)
        except Exception:
            reports[name] = {}
    reports.setdefault("_stopped", {})
    for a in actors.values():
        ray.kill(a)
    for q in queues:
        q.shutdown(force=True)

"""The roles' loops, the same on every engine: an engine passes in how slices and weights travel.

* :func:`generator_loop` — take newer weights, generate a slice, put it downstream; until stopped;
* :func:`scorer_loop` — take a slice, reward it, pass it on; until stopped;
* :func:`learner_loop` — wait for fresh scored slices, update, publish the weights; for ``cfg.updates`` updates.

Each loop books its time on a :class:`~rlbench.components.pipeline.timeline.Timeline` (``busy/...``,
``wait/input``, ``wait/output``, ``sync/...``), so every engine measures the same phases the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from rlbench.components.pipeline.timeline import Timeline
from rlbench.engines.base import PipelineConfig, PipelineRun, SyncEvent, now, policy_hidden

Put = Callable[[Any, Callable[[], None] | None], bool]  # put(item, call while blocked) -> False once stopped
Get = Callable[[], Any]  # the next item, or None after a short wait


class Reader(Protocol):
    """A generator's side of weight sync."""

    def poll(self, mine: int, load: Callable[[Any], None]) -> tuple[int, float, float] | None:
        """``(version, published, transfer seconds)`` if a newer version was loaded, else ``None``."""

    def close(self) -> None:
        """Release what the reader holds."""


def generator_loop(
    cfg: PipelineConfig, index: int, put: Put, reader: Callable[[Any], Reader], stopped: Callable[[], bool]
) -> dict[str, Any]:
    """Run generator ``index`` until ``stopped()``; returns its report (timeline, syncs, transfer times, count)."""
    from rlbench.components.pipeline.policy import FlatPolicy
    from rlbench.components.pipeline.roles import Generator
    from rlbench.components.pipeline.task import BanditTask

    name = f"generator-{index}"
    task = BanditTask(cfg.state_dim, cfg.actions, cfg.seed)
    policy = FlatPolicy(cfg.state_dim, cfg.actions, policy_hidden(cfg), cfg.layers, cfg.seed)
    gen = Generator(task, policy, cfg.group_size, cfg.batch_states, index, seed=cfg.seed * 1000 + index + 1)
    weights = reader(policy)
    tl = Timeline(name)
    syncs: list[SyncEvent] = []
    transfers: list[float] = []
    made = 0

    def take_weights() -> None:
        t0 = now()
        got = weights.poll(gen.version, policy.load)
        if got is None:
            return
        tl.spans.append(("sync/weights", t0, now()))
        version, published, transfer = got
        gen.version = version
        syncs.append(SyncEvent(name, version, published, now(), policy.nbytes))
        transfers.append(transfer)

    try:
        while not stopped():
            take_weights()
            with tl.span("busy/generate"):
                s = gen.generate()
            made += 1
            with tl.span("wait/output"):
                if not put(s, take_weights):
                    break
    finally:
        weights.close()
    return {"timeline": tl.close(), "syncs": syncs, "transfer_s": transfers, "count": made}


def scorer_loop(cfg: PipelineConfig, get: Get, put: Put, stopped: Callable[[], bool]) -> dict[str, Any]:
    """Run the scorer until ``stopped()``; returns its report (timeline, count)."""
    from rlbench.components.pipeline.roles import Scorer
    from rlbench.components.pipeline.task import BanditTask

    scorer = Scorer(BanditTask(cfg.state_dim, cfg.actions, cfg.seed), cfg.scorer_ms / 1000)
    tl = Timeline("scorer")
    scored = 0
    while not stopped():
        with tl.span("wait/input"):
            s = get()
        if s is None:
            continue
        with tl.span("busy/score"):
            s = scorer.score(s)
        scored += 1
        with tl.span("wait/output"):
            if not put(s, None):
                break
    return {"timeline": tl.close(), "count": scored}


def learner_loop(
    cfg: PipelineConfig,
    out: PipelineRun,
    get: Callable[[], Any],
    publish: Callable[[Any, int], None],
    learner: Any,
    depth: Callable[[], tuple[int, int]] | None = None,
) -> Timeline:
    """Train ``cfg.updates`` updates on fresh scored slices, publishing the weights after each; fills ``out``.

    ``get()`` blocks until the next scored slice (and raises when a role failed or the run timed out);
    ``depth()`` gives the trajectory and scored queue depths, sampled about 100 times a run. Both measurements
    (queue depths, the greedy evaluation) are booked as ``measure/...``, apart from the learner's work.
    """
    from rlbench.components.pipeline.replay import VersionWeightedReplay

    replay = VersionWeightedReplay(cfg.replay, seed=cfg.seed)
    tl = Timeline("learner")
    pending = [get()]  # every role is up: the measured run starts
    out.started = tl.started = now()
    out.greedy_reward = (learner.greedy_reward(), 0.0)
    every = max(cfg.updates // 10, 1)
    depth_every = max(cfg.updates // 100, 1)  # about 100 queue-depth samples (on Ray each is an actor call)
    while learner.version < cfg.updates:
        with tl.span("wait/input"):
            while len(pending) < cfg.slices_per_update:
                pending.append(get())
        for s in pending:
            replay.add(s)
        pending = []
        with tl.span("busy/update"):
            stats = learner.update(replay.sample(cfg.slices_per_update))
        out.lags += stats["lags"]
        out.samples += stats["samples"]
        out.updates = learner.version
        with tl.span("sync/publish"):
            publish(learner.policy.weights(), learner.version)
        if depth is not None and learner.version % depth_every == 0:
            with tl.span("measure/queues"):
                out.queue_depth.append((now(), *depth()))
        if learner.version % every == 0:
            with tl.span("measure/eval"):
                out.reward_history.append((learner.version, learner.greedy_reward()))
    out.ended = now()
    out.greedy_reward = (out.greedy_reward[0], learner.greedy_reward())
    return tl


def merge_reports(
    out: PipelineRun, learner_tl: Timeline, reports: dict[str, dict[str, Any]], nodes: dict[str, str]
) -> PipelineRun:
    """Put the roles' reports (timelines, syncs, counts) and their nodes into ``out``."""
    out.ended = out.ended or now()
    out.timelines = [learner_tl.close()]
    out.nodes = dict(nodes)
    for name, rep in sorted(reports.items()):
        if "timeline" not in rep:
            continue
        out.timelines.append(rep["timeline"])
        if name.startswith("generator"):
            out.syncs += rep["syncs"]
            out.transfer_s += rep["transfer_s"]
            out.slices_generated += rep["count"]
        elif name == "scorer":
            out.slices_scored += rep["count"]
    return out


def queue_put(q: Any, stopped: Callable[[], bool], full: type[Exception], poll_s: float) -> Put:
    """``put(item, on_wait)`` on a bounded queue: waits while it is full (calling ``on_wait``), False once stopped.

    Args:
        q: A queue with ``put(item, timeout=...)`` (``multiprocessing.Queue``, ``ray.util.queue.Queue``).
        stopped: Whether the role has been told to stop.
        full: The exception the queue raises when a put times out.
        poll_s: How long one attempt waits.
    """

    def put(item: Any, on_wait: Callable[[], None] | None) -> bool:
        while not stopped():
            try:
                q.put(item, timeout=poll_s)
                return True
            except full:
                if on_wait is not None:
                    on_wait()
        return False

    return put


def queue_get(q: Any, empty: type[Exception], poll_s: float) -> Get:
    """``get()``: the next item, or ``None`` after ``poll_s`` (``empty`` is the queue's timeout exception)."""

    def get() -> Any:
        try:
            return q.get(timeout=poll_s)
        except empty:
            return None

    return get


CHECK_S = 0.5  # how often the learner looks at the roles' health while slices keep arriving


def throttled(fn: Callable[[], None], every_s: float = CHECK_S) -> Callable[[], None]:
    """``fn`` at most once per ``every_s`` seconds.

    The learner checks the roles when its input runs dry, and with this also while slices keep flowing: one dead
    generator of several starves nothing, and must still fail the run at once.
    """
    last = [time.monotonic()]

    def call() -> None:
        t = time.monotonic()
        if t - last[0] >= every_s:
            last[0] = t
            fn()

    return call


def wait_until(deadline: float, timeout_s: float) -> None:
    """Raise ``TimeoutError`` once past ``deadline`` (``time.monotonic()``)."""
    if time.monotonic() > deadline:
        raise TimeoutError(f"the pipeline ran past --timeout-s {timeout_s:g}")

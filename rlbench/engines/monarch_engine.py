"""The Monarch engine (experimental, extra ``rlbench[monarch]``): the reference design as its authors wrote it.

As in Monarch's own distributed-PPO example, the roles are Monarch actors on process meshes of this host:
the generators on one mesh, the trajectory and scored queues (``QueueActor``, async endpoints) and the scorer on
another; the learner runs in the driver. Weights travel through an ``RDMABuffer`` over the learner's publish board
(``--weight-sync rdma``): after each update the learner writes the flat weights between two copies of the version
number, tells the generators the version (a broadcast, no reply awaited), and each generator reads the board with
``read_into`` between slices and loads it when both copies agree (a read that raced a write is retried at the next
poll). Without an ibverbs NIC Monarch falls back to TCP, so on such a machine this measures the fallback, not RDMA.

Faults: Monarch's default ``unhandled_fault_hook`` exits the client; this engine replaces it (for the rest of the
process: a late event of a stopped mesh must not exit it), so a dead process fails the run with the actor's name,
keeps what was measured, and stops the meshes. An exception in a role's
loop reaches the driver through its ``report`` endpoint.
"""

from __future__ import annotations

import asyncio
import collections
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

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

try:  # the actor classes must be importable in Monarch's worker processes, so they live at module level
    from monarch.actor import Actor, endpoint
except ImportError:  # pragma: no cover - get_engine names the missing extra before this module is imported
    Actor = object  # type: ignore[assignment,misc]

    def endpoint(fn: Any) -> Any:  # type: ignore[no-redef]
        return fn


POLL_S = 0.05
HEADER = 24  # int64 version (first copy), float64 publish time, int64 version (second copy, after the weights)


def _where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class QueueActor(Actor):
    """A bounded queue as an actor (the reference's ``TrajectoryQueue``). Its endpoints never wait: an actor handles
    one message at a time, so a ``get`` waiting for an item would hold back the ``put`` that brings it; callers
    (:class:`_Queue`) retry after a short sleep instead."""

    def _handle_undeliverable_message(self, message: Any) -> bool:
        """A reply to a role whose process died: dropped (escalated, Monarch would crash the client after 30 s)."""
        return True

    def __init__(self, maxsize: int) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self.maxsize = maxsize

    @endpoint
    def offer(self, item: Any) -> bool:
        if len(self.items) >= self.maxsize:
            return False
        self.items.append(item)
        return True

    @endpoint
    def take(self) -> tuple[bool, Any]:
        return (True, self.items.popleft()) if self.items else (False, None)

    @endpoint
    def depth(self) -> int:
        return len(self.items)


class _Queue:
    """A :class:`QueueActor` behind the ``put(item, timeout)`` / ``get(timeout)`` of a standard queue."""

    RETRY_S = 0.002

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def put(self, item: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.actor.offer.call_one(item).get():
            if time.monotonic() > deadline:
                raise queue.Full
            time.sleep(self.RETRY_S)

    def get(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            ok, item = self.actor.take.call_one().get()
            if ok:
                return item
            if time.monotonic() > deadline:
                raise queue.Empty
            time.sleep(self.RETRY_S)

    def qsize(self) -> int:
        return int(self.actor.depth.call_one().get())


class _BoardReader:
    """A generator's side of ``rdma``: reads the learner's board when a newer version was announced."""

    def __init__(self, board: Any, announced: dict[str, Any], nbytes: int) -> None:
        import torch

        self.board, self.announced = board, announced
        self.local = torch.empty(HEADER + nbytes, dtype=torch.uint8)
        self.nbytes = nbytes

    def poll(self, mine: int, load: Callable[[Any], None]) -> tuple[int, float, float] | None:
        if self.announced.get("version", 0) <= mine:
            return None
        t0 = time.perf_counter()
        self.board.read_into(self.local).get()
        raw = self.local.numpy()
        first, published = int(raw[:8].view(np.int64)[0]), float(raw[8:16].view(np.float64)[0])
        second = int(raw[16 + self.nbytes : HEADER + self.nbytes].view(np.int64)[0])
        if first != second or first <= mine:
            return None  # the read raced the learner's write: the next poll reads again
        load(raw[16 : 16 + self.nbytes].view(np.float32))
        return first, published, time.perf_counter() - t0

    def close(self) -> None:
        pass


class _Role(Actor):
    """A role whose loop runs in a thread, so that ``halt``, ``announce`` and ``report`` reach it while it works."""

    def __init__(self) -> None:
        import torch

        torch.set_num_threads(1)
        self.stopping = False
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def _launch(self, body: Callable[[], dict[str, Any]]) -> None:
        def target() -> None:
            try:
                self.result = body()
            except BaseException as exc:  # reported through `report`
                self.error = exc

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    @endpoint
    async def where(self) -> str:
        return _where()

    @endpoint
    async def halt(self) -> None:
        self.stopping = True

    @endpoint
    async def status(self) -> str | None:
        """``None`` while the loop runs; else why it ended (its exception, or that it returned)."""
        if self.thread is None or self.thread.is_alive():
            return None
        if self.error is not None:
            lines = str(self.error).strip().splitlines()
            return f"{type(self.error).__name__}: {lines[-1] if lines else ''}"
        return "its loop returned before the run ended"

    @endpoint
    async def report(self, timeout: float) -> dict[str, Any]:
        """What the loop measured, once it ended (call after ``halt``: an actor runs one message at a time, and the
        replies to its loop's own calls wait behind a pending ``report``)."""
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join, timeout)
        return self.result or {}


class GeneratorActor(_Role):
    """A generator (the reference's ``Generator``): samples G actions per state with the newest weights it read."""

    def __init__(self, cfg: PipelineConfig, trajectories: Any, board: Any, nbytes: int) -> None:
        super().__init__()
        self.cfg, self.out, self.board, self.nbytes = cfg, _Queue(trajectories), board, nbytes
        self.announced: dict[str, Any] = {}

    @endpoint
    async def announce(self, version: int) -> None:
        self.announced["version"] = max(version, self.announced.get("version", 0))

    @endpoint
    async def start(self, index: int) -> None:
        stopped = lambda: self.stopping
        put = queue_put(self.out, stopped, queue.Full, POLL_S)
        reader = lambda _: _BoardReader(self.board, self.announced, self.nbytes)
        self._launch(lambda: generator_loop(self.cfg, index, put, reader, stopped))


class ScorerActor(_Role):
    """The scorer (the reference's ``Scorer``): rewards each slice and passes it on."""

    def __init__(self, cfg: PipelineConfig, trajectories: Any, scored: Any) -> None:
        super().__init__()
        self.cfg, self.inp, self.out = cfg, _Queue(trajectories), _Queue(scored)

    @endpoint
    async def start(self) -> None:
        stopped = lambda: self.stopping
        get = queue_get(self.inp, queue.Empty, POLL_S)
        self._launch(lambda: scorer_loop(self.cfg, get, queue_put(self.out, stopped, queue.Full, POLL_S), stopped))


class _Board:
    """The learner's side of ``rdma``: ``[version | publish time | weights | version]`` behind one ``RDMABuffer``."""

    def __init__(self, nbytes: int) -> None:
        import torch
        from monarch.rdma import RDMABuffer

        self.tensor = torch.zeros(HEADER + nbytes, dtype=torch.uint8)
        self.raw = self.tensor.numpy()
        self.nbytes = nbytes
        self.buffer = RDMABuffer(self.tensor)

    def write(self, weights: np.ndarray, version: int, published: float) -> None:
        self.raw[:8].view(np.int64)[0] = version
        self.raw[8:16].view(np.float64)[0] = published
        self.raw[16 : 16 + self.nbytes].view(np.float32)[:] = weights
        self.raw[16 + self.nbytes : HEADER + self.nbytes].view(np.int64)[0] = version


def run(cfg: PipelineConfig, on_start: Callable[[dict[str, Any]], None] | None = None) -> PipelineRun:
    """Run the pipeline on Monarch process meshes of this host; the learner runs in this (driver) process.

    Args:
        cfg: The pipeline.
        on_start: Called with ``{actor: process id}`` once the actors exist (monitoring, fault tests).

    Raises:
        PipelineError: A role failed or its process died (``partial`` holds what was measured).
        TimeoutError: The run exceeded ``cfg.timeout_s``.
    """
    import warnings

    import monarch.actor
    from monarch.actor import this_host
    from monarch.rdma import RDMATcpFallbackWarning

    from rlbench.components.pipeline.policy import FlatPolicy
    from rlbench.components.pipeline.roles import Learner
    from rlbench.components.pipeline.task import BanditTask
    from rlbench.components.pipeline.timeline import Timeline

    cfg.validate()
    # RDMATcpFallbackWarning: the strategy's name says which transport ran instead ("rdma/tcp")
    warnings.filterwarnings("ignore", category=RDMATcpFallbackWarning)
    t_start = now()
    task = BanditTask(cfg.state_dim, cfg.actions, cfg.seed)
    policy = FlatPolicy(cfg.state_dim, cfg.actions, policy_hidden(cfg), cfg.layers, cfg.seed)
    learner = Learner(task, policy, lr=cfg.lr, clip=cfg.clip, kl_coef=cfg.kl_coef, seed=cfg.seed)
    from monarch.rdma import get_rdma_backend

    # "rdma/tcp" where Monarch fell back to TCP (no ibverbs NIC): the report says which transport was measured
    strategy = f"{sync_strategy(cfg)}/{get_rdma_backend()}"
    out = PipelineRun(weight_bytes=policy.nbytes, engine={"engine": "monarch", "weight_sync": strategy})
    faults: list[str] = []
    dead: set[str] = set()  # roles whose process died: nothing more is sent to them
    _FAULTS.append(faults)
    monarch.actor.unhandled_fault_hook = _on_fault  # for good: a late event of a stopped mesh must not exit us
    meshes: list[Any] = []
    actors: dict[str, Any] = {}
    reports: dict[str, dict[str, Any]] = {}
    learner_tl = None
    deadline = time.monotonic() + (cfg.timeout_s or float("inf"))
    try:
        board = _Board(policy.nbytes)
        host = this_host()
        service = host.spawn_procs(per_host={"procs": 1})
        scoring = host.spawn_procs(per_host={"procs": 1})
        gens = host.spawn_procs(per_host={"procs": cfg.generators})
        meshes += [service, scoring, gens]
        trajectories = service.spawn("trajectories", QueueActor, cfg.queue_size)
        scored = service.spawn("scored", QueueActor, cfg.queue_size)
        scorer = scoring.spawn("scorer", ScorerActor, cfg, trajectories, scored)
        generators = gens.spawn("generator", GeneratorActor, cfg, trajectories, board.buffer, policy.nbytes)
        actors = {f"generator-{i}": generators.slice(procs=i) for i in range(cfg.generators)}
        actors["scorer"] = scorer
        nodes = {name: a.where.call_one().get() for name, a in actors.items()}
        nodes["learner"] = _where()
        if on_start is not None:
            on_start({name: int(where.rsplit(":", 1)[1]) for name, where in nodes.items() if name != "learner"})
        for i in range(cfg.generators):
            actors[f"generator-{i}"].start.call_one(i).get()
        scorer.start.call_one().get()
        out.startup_s = now() - t_start
        scored_q = _Queue(scored)

        def check() -> None:
            for name, a in actors.items():
                try:
                    why = a.status.call_one().get(timeout=10)
                except Exception as exc:  # SupervisionError: its process is gone
                    dead.add(name)
                    raise PipelineError(name, f"its process died ({_last_line(exc)})") from None
                if why is not None:
                    raise PipelineError(name, why)
            if faults:
                raise PipelineError("a queue", f"its process died ({faults[0]})")

        health = throttled(check)

        def get() -> Any:
            while True:
                health()
                try:
                    return scored_q.get(POLL_S)
                except queue.Empty:
                    check()
                    wait_until(deadline, cfg.timeout_s)
                except Exception as exc:  # the queues' process died: name the role if one died with it
                    check()
                    raise PipelineError("the scored queue", f"its process died ({_last_line(exc)})") from None

        def publish(weights: Any, version: int) -> None:
            board.write(weights, version, now())
            generators.announce.broadcast(version)

        def depth() -> tuple[int, int]:
            return _Queue(trajectories).qsize(), scored_q.qsize()

        learner_tl = learner_loop(cfg, out, get, publish, learner, depth=depth)
    except PipelineError as exc:
        _stop(actors, reports, meshes, dead)
        out.updates = out.updates or learner.version
        exc.partial = merge_reports(out, learner_tl or Timeline("learner"), reports, {})
        raise
    finally:
        _stop(actors, reports, meshes, dead)
        _FAULTS.remove(faults)
    return merge_reports(out, learner_tl, reports, nodes)


_FAULTS: list[list[str]] = []  # the fault lists of the runs in progress in this process


def _on_fault(failure: Any) -> None:
    """Monarch's ``unhandled_fault_hook`` once this engine ran: book the fault on the runs in progress, else drop it.

    Monarch's default exits the client process. A supervision event can arrive after a run stopped its meshes (a
    killed process reported late), and the process hosting rlbench (the CLI, a test session, a notebook) must not
    die of it: returning normally drops the event, which Monarch logs.
    """
    line = _last_line(Exception(failure.report()))
    for faults in _FAULTS:
        faults.append(line)


def _last_line(exc: BaseException) -> str:
    """The last line of an exception's message (Monarch's supervision errors end with the cause)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _stop(actors: dict[str, Any], reports: dict[str, dict[str, Any]], meshes: list[Any], dead: set[str]) -> None:
    """Halt the loops, collect what each role measured, stop the process meshes (once); nothing is sent to a dead
    role (a message Monarch cannot deliver comes back to the client, which it then crashes)."""
    if reports.get("_stopped") is not None or not meshes:
        return
    reports["_stopped"] = {}
    actors = {name: a for name, a in actors.items() if name not in dead}
    for a in actors.values():
        try:
            a.halt.call_one().get(timeout=5)
        except Exception:
            pass
    for name, a in actors.items():
        try:
            reports[name] = a.report.call_one(10.0).get(timeout=15)
        except Exception:
            reports[name] = {}
    for mesh in meshes:
        try:
            mesh.stop().get(timeout=10)
        except Exception:
            pass


class BoardReaderActor(Actor):
    """A weight-sync benchmark receiver: reads the learner's board into its own memory (``--strategies monarch-rdma``)."""

    def __init__(self, board: Any, nbytes: int) -> None:
        import torch

        self.board = board
        self.local = torch.empty(nbytes, dtype=torch.uint8)

    @endpoint
    async def load(self) -> int:
        await self.board.read_into(self.local)
        return int(self.local.numel())


def measure_rdma(weights: np.ndarray, receivers: int, rounds: int) -> list[float]:
    """Seconds per round for ``receivers`` processes to read ``weights`` through one ``RDMABuffer`` (2 warm-up rounds).

    A round: the learner copies the weights into its registered board, then every receiver reads the board (the
    round ends when the last read completed), as the engine's generators do. Over TCP where no ibverbs NIC exists.
    """
    import warnings

    import torch
    from monarch.actor import this_host
    from monarch.rdma import RDMABuffer, RDMATcpFallbackWarning

    warnings.filterwarnings("ignore", category=RDMATcpFallbackWarning)
    board = torch.zeros(weights.nbytes, dtype=torch.uint8)
    raw = board.numpy().view(np.float32)
    procs = this_host().spawn_procs(per_host={"procs": receivers})
    try:
        readers = procs.spawn("reader", BoardReaderActor, RDMABuffer(board), weights.nbytes)
        out = []
        for v in range(rounds + 2):
            t0 = time.perf_counter()
            np.copyto(raw, weights)
            readers.load.call().get()
            if v >= 2:
                out.append(time.perf_counter() - t0)
        return out
    finally:
        procs.stop().get(timeout=30)

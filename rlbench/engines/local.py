"""The embedded engine: generators and the scorer in processes on this machine, the learner in the driver.

Slices travel through bounded ``multiprocessing`` queues (generators → scorer → learner). Weights travel by

* ``shm``: one shared-memory block the learner copies the flat weights into, guarded by a sequence counter
  (odd while writing), which each generator checks between slices and copies out when it is newer;
* ``gloo``: a ``torch.distributed`` gloo broadcast from the learner (rank 0) to every generator. A collective
  needs every generator to join: the learner announces a version and waits in the broadcast until all have
  finished their current slice, which is the real cost of collective sync and is measured as such.

Processes start from a ``forkserver`` that has imported torch once. A role that raises reports its traceback
through the results queue; a process that dies is noticed by its exit code; both fail the run with the actor's
name, keeping what was measured. Ctrl-C or SIGTERM in the driver stops and reaps every process and frees the
shared memory.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import secrets
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from rlbench.components.pipeline.timeline import Timeline
from rlbench.core.children import pid_alive
from rlbench.engines.base import PipelineConfig, PipelineError, PipelineRun, describe, now, policy_hidden, sync_strategy
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

POLL_S = 0.05  # how often a blocked role looks at the stop flag and for new weights
# what reading a queue raises when its writer was killed mid-message (a torn pickle); shutdown must survive it, or
# the exception replaces Ctrl-C's and processes are left unreaped
TORN = (EOFError, OSError, ValueError, pickle.UnpicklingError)
JOIN_S = 5.0


def bounded(fn: Callable[[], None], seconds: float) -> None:
    """Run ``fn`` in a daemon thread and wait at most ``seconds`` for it.

    Reading a queue whose writer was killed mid-put can block for good: ``poll`` sees the message's first bytes, the
    rest never comes, and this process holds the pipe's write end too, so no EOF ends the read. Shutdown reads
    through this, so such a read is abandoned (the thread keeps the queue's read lock, and later non-blocking reads
    of that queue find it taken and return at once) instead of hanging the CLI.
    """

    def run() -> None:
        try:
            fn()
        except BaseException:  # a closed or torn queue at exit: nothing left to read
            pass

    t = threading.Thread(target=run, name="rlbench-drain", daemon=True)
    t.start()
    t.join(seconds)


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "rlbench.engines.local"])
    return ctx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- weight sync ----------------------------------------------------------------------------------------------------
class ShmBoard:
    """The learner's side of ``shm``: a shared block, a version and a sequence counter (odd while writing)."""

    def __init__(self, ctx: Any, nbytes: int) -> None:
        # named for the process that owns it (as torch names its own segments), so a leaked one says whose it is
        name = f"rlbench_{os.getpid()}_{secrets.token_hex(6)}"
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=max(nbytes, 1))
        self.seq = ctx.Value("q", 0, lock=False)
        self.version = ctx.Value("q", 0, lock=False)
        self.published = ctx.Value("d", 0.0, lock=False)
        self.nbytes = nbytes

    def handle(self) -> tuple[Any, ...]:
        return (self.shm.name, self.seq, self.version, self.published, self.nbytes)

    def publish(self, weights: np.ndarray, version: int) -> None:
        t0 = now()
        self.seq.value += 1
        np.frombuffer(self.shm.buf, np.float32, weights.size)[:] = weights
        self.version.value, self.published.value = version, t0
        self.seq.value += 1

    def close(self) -> None:
        self.shm.close()
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass


class ShmReader:
    """A generator's side of ``shm``: copies newer weights in between slices."""

    def __init__(self, handle: tuple[Any, ...]) -> None:
        name, self.seq, self.version, self.published, nbytes = handle
        self.shm = shared_memory.SharedMemory(name=name)
        self.view = np.frombuffer(self.shm.buf, np.float32, nbytes // 4)

    def poll(self, mine: int, load: Any) -> tuple[int, float, float] | None:
        """``(version, published, transfer seconds)`` if a newer consistent version was loaded, else ``None``."""
        s1 = self.seq.value
        version = self.version.value
        if s1 % 2 or version <= mine:
            return None
        t0 = time.perf_counter()
        load(self.view)
        transfer = time.perf_counter() - t0
        if self.seq.value != s1:  # the learner wrote meanwhile: take the next one
            return None
        return version, self.published.value, transfer

    def close(self) -> None:
        del self.view
        self.shm.close()


class GlooBoard:
    """The learner's side of ``gloo``: announce a version, then broadcast the flat weights to every generator."""

    def __init__(self, ctx: Any, port: int, world: int, weights: np.ndarray) -> None:
        import torch
        import torch.distributed as dist

        self.version = ctx.Value("q", 0, lock=False)
        self.published = ctx.Value("d", 0.0, lock=False)
        self.port, self.world = port, world
        self.dist, self.torch = dist, torch
        self.buffer = torch.from_numpy(weights)  # the policy's own flat buffer: broadcast without a copy
        self.nbytes = weights.nbytes
        self.ready = False

    def handle(self) -> tuple[Any, ...]:
        return (self.port, self.world, self.version, self.published, self.nbytes)

    def connect(self) -> None:
        self.dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{self.port}", rank=0, world_size=self.world, timeout=_timedelta(120)
        )
        self.ready = True

    def publish(self, weights: np.ndarray, version: int) -> None:
        self.published.value = now()
        self.version.value = version
        self.dist.broadcast(self.buffer, src=0)

    def close(self) -> None:
        if self.ready and self.dist.is_initialized():
            self.dist.destroy_process_group()
        self.ready = False


class GlooReader:
    """A generator's side of ``gloo``: joins the broadcast of each announced version."""

    def __init__(self, handle: tuple[Any, ...], rank: int, policy: Any) -> None:
        import torch.distributed as dist

        port, world, self.version, self.published, _ = handle
        self.dist = dist
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=_timedelta(120)
        )
        self.buffer = policy.flat  # received straight into the policy's flat buffer

    def poll(self, mine: int, load: Any) -> tuple[int, float, float] | None:
        version = self.version.value
        if version <= mine:
            return None
        t0 = time.perf_counter()
        self.dist.broadcast(self.buffer, src=0)
        return version, self.published.value, time.perf_counter() - t0

    def close(self) -> None:
        if self.dist.is_initialized():
            self.dist.destroy_process_group()


def _timedelta(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


# --- the roles' processes -------------------------------------------------------------------------------------------
def _child_setup(driver: tuple[int, str]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    _watch_driver(driver)
    import torch

    torch.set_num_threads(1)


def _driver() -> tuple[int, str]:
    """What a role watches: the driver's pid, and the temporary folder its multiprocessing made (``pymp-*``: the
    forkserver's socket), which only the driver's own exit would remove."""
    from multiprocessing import util

    return os.getpid(), util.get_temp_dir()


def _watch_driver(driver: tuple[int, str], poll_s: float = 0.2) -> None:
    """End this role's process when the driver is gone (a ``kill -9`` of rlbench): a role's parent is the forkserver,
    not the driver, so nothing else would tell it, and it would run (and hold the forkserver and the resource tracker)
    for good. The driver's multiprocessing folder goes with it (every role tries; the first one removes it)."""
    pid, folder = driver

    def watch() -> None:
        while pid_alive(pid):
            time.sleep(poll_s)
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="rlbench-watch-driver", daemon=True).start()


def generator_main(
    cfg: PipelineConfig, index: int, chans: dict[str, Any], board: tuple[Any, ...], driver: tuple[int, str]
) -> None:
    """A generator process (:func:`~rlbench.engines.loops.generator_loop`); its report goes to the results queue."""
    name = f"generator-{index}"
    stop = chans["stop"]
    try:
        _child_setup(driver)
        shm = sync_strategy(cfg) == "shm"
        report = generator_loop(
            cfg,
            index,
            queue_put(chans["trajectories"], stop.is_set, queue.Full, POLL_S),
            lambda policy: ShmReader(board) if shm else GlooReader(board, index + 1, policy),
            stop.is_set,
        )
        chans["results"].put(("done", name, report))
    except BaseException as exc:  # reported to the driver, which fails the run with this actor's name
        chans["results"].put(("error", name, describe(exc)))


def scorer_main(cfg: PipelineConfig, chans: dict[str, Any], driver: tuple[int, str]) -> None:
    """The scorer process (:func:`~rlbench.engines.loops.scorer_loop`); its report goes to the results queue."""
    stop = chans["stop"]
    try:
        _child_setup(driver)
        get = queue_get(chans["trajectories"], queue.Empty, POLL_S)
        report = scorer_loop(cfg, get, queue_put(chans["scored"], stop.is_set, queue.Full, POLL_S), stop.is_set)
        chans["results"].put(("done", "scorer", report))
    except BaseException as exc:
        chans["results"].put(("error", "scorer", describe(exc)))


# --- the driver (learner) -------------------------------------------------------------------------------------------
class _Procs:
    """The role processes and their channels; :meth:`shutdown` leaves nothing behind."""

    def __init__(self, ctx: Any, cfg: PipelineConfig) -> None:
        self.ctx, self.cfg = ctx, cfg
        self.chans = {
            "trajectories": ctx.Queue(cfg.queue_size),
            "scored": ctx.Queue(cfg.queue_size),
            "results": ctx.Queue(),
            "stop": ctx.Event(),
        }
        self.procs: dict[str, Any] = {}
        self.reports: dict[str, dict[str, Any]] = {}
        self.closed = False

    def start(self, board: tuple[Any, ...]) -> None:
        for i in range(self.cfg.generators):
            self._spawn(f"generator-{i}", generator_main, (self.cfg, i, self.chans, board, _driver()))
        self._spawn("scorer", scorer_main, (self.cfg, self.chans, _driver()))

    def _spawn(self, name: str, target: Any, args: tuple[Any, ...]) -> None:
        p = self.ctx.Process(target=target, args=args, name=f"rlbench-{name}", daemon=True)
        p.start()
        self.procs[name] = p

    def check(self) -> None:
        """Raise :class:`PipelineError` if a role reported an error or its process died."""
        self._drain_results(block=False)
        for name, p in self.procs.items():
            if p.exitcode is not None and name not in self.reports:
                self._drain_results(block=True, timeout=0.5)  # its last words may be in flight
                if name not in self.reports:
                    code = p.exitcode
                    why = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
                    raise PipelineError(name, f"its process {why} before the run ended")

    def _drain_results(self, block: bool, timeout: float = 0.0, raise_errors: bool = True) -> None:
        while True:
            try:
                kind, name, payload = self.chans["results"].get(block=block, timeout=timeout or None)
            except queue.Empty:
                return
            except TORN:  # a message cut off by a writer killed mid-put: the exit codes say who died
                return
            if kind == "error":
                self.reports[name] = {"error": payload}
                if raise_errors:
                    raise PipelineError(name, payload)
            else:
                self.reports[name] = payload
            block = False

    def shutdown(self) -> None:
        """Stop every role, collect their reports, and reap every process (once)."""
        if self.closed:
            return
        self.closed = True
        self.chans["stop"].set()
        deadline = time.monotonic() + JOIN_S
        while time.monotonic() < deadline and any(p.is_alive() for p in self.procs.values()):
            for q in (self.chans["trajectories"], self.chans["scored"]):  # unblock writers
                bounded(lambda q=q: _discard(q), POLL_S * 4)
            bounded(lambda: self._drain_results(block=True, timeout=POLL_S, raise_errors=False), POLL_S * 4)
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
            p.join(timeout=JOIN_S)
            if p.is_alive():
                p.kill()
                p.join()
        bounded(lambda: self._drain_results(block=True, timeout=POLL_S, raise_errors=False), POLL_S * 4)
        for q in (self.chans["trajectories"], self.chans["scored"], self.chans["results"]):
            q.cancel_join_thread()
            q.close()


def _discard(q: Any) -> None:
    """Empty ``q`` without waiting (its writers are being stopped)."""
    try:
        while True:
            q.get_nowait()
    except (queue.Empty, *TORN):
        pass


def run(cfg: PipelineConfig, on_start: Callable[[dict[str, int]], None] | None = None) -> PipelineRun:
    """Run the pipeline with processes on this machine; the learner runs here.

    Args:
        cfg: The pipeline.
        on_start: Called with ``{actor: pid}`` once the role processes are started (monitoring, fault tests).

    Raises:
        PipelineError: A role failed or its process died (``partial`` holds what was measured).
        TimeoutError: The run exceeded ``cfg.timeout_s``.
    """
    from rlbench.components.pipeline.policy import FlatPolicy
    from rlbench.components.pipeline.roles import Learner
    from rlbench.components.pipeline.task import BanditTask

    cfg.validate()
    t_start = now()
    task = BanditTask(cfg.state_dim, cfg.actions, cfg.seed)
    policy = FlatPolicy(cfg.state_dim, cfg.actions, policy_hidden(cfg), cfg.layers, cfg.seed)
    learner = Learner(task, policy, lr=cfg.lr, clip=cfg.clip, kl_coef=cfg.kl_coef, seed=cfg.seed)
    ctx = _context()
    out = PipelineRun(weight_bytes=policy.nbytes, engine={"engine": "local", "weight_sync": sync_strategy(cfg)})
    board: Any = (
        ShmBoard(ctx, policy.nbytes)
        if sync_strategy(cfg) == "shm"
        else GlooBoard(ctx, _free_port(), cfg.generators + 1, policy.weights())
    )
    procs = _Procs(ctx, cfg)
    nodes = dict.fromkeys(["learner", "scorer", *(f"generator-{i}" for i in range(cfg.generators))], socket.gethostname())
    learner_tl: Timeline | None = None
    deadline = time.monotonic() + (cfg.timeout_s or float("inf"))

    health = throttled(procs.check)

    def get() -> Any:
        while True:
            health()
            try:
                s = procs.chans["scored"].get(timeout=POLL_S)
            except queue.Empty:
                procs.check()
                wait_until(deadline, cfg.timeout_s)
                continue
            if not out.startup_s:
                out.startup_s = now() - t_start
            return s

    def depth() -> tuple[int, int]:
        return _qsize(procs.chans["trajectories"]), _qsize(procs.chans["scored"])

    try:
        procs.start(board.handle())
        if on_start is not None:
            on_start({name: p.pid for name, p in procs.procs.items()})
        if isinstance(board, GlooBoard):
            board.connect()
        learner_tl = learner_loop(cfg, out, get, board.publish, learner, depth)
    except PipelineError as exc:
        procs.shutdown()
        board.close()
        out.updates = out.updates or learner.version
        exc.partial = merge_reports(out, learner_tl or Timeline("learner"), procs.reports, nodes)
        raise
    finally:
        procs.shutdown()
        board.close()
    out.engine["pid"] = os.getpid()
    return merge_reports(out, learner_tl, procs.reports, nodes)


def _qsize(q: Any) -> int:
    try:
        return int(q.qsize())
    except (NotImplementedError, OSError):
        return -1

"""Weight sync from a learner to N receivers, one strategy at a time: what ``rlbench run weight-sync`` times.

A round starts when the sender starts publishing a new version and ends when every receiver has acknowledged having
that version in its own flat weight buffer (a shared array the sender polls, so the latency is read on one clock).
Strategies:

* ``reference`` — raw ``torch.distributed`` gloo broadcast of the flat buffer, receivers already waiting in it: the
  floor the other strategies are compared to;
* ``gloo`` — the local engine's collective: the sender announces the version, each receiver sees it and joins the
  broadcast;
* ``shm`` — the local engine's shared memory: the sender copies into a shared block, receivers copy out;
* ``ray-store`` — the Ray engine's object store with a flat NumPy array (receivers read it zero-copy, copy it in);
* ``ray-store-torch`` — the same with a torch tensor, which Ray pickles through a copy (for contrast).

The receivers live here, in the package, so that worker processes can import them from any checkout or install.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import numpy as np

LOCAL = ("reference", "gloo", "shm")
RAY = ("ray-store", "ray-store-torch")
CONNECT_S = 60.0  # a process group whose members never arrive fails instead of waiting torch's 30 minutes


def _ack(acks: Any, index: int, version: int) -> None:
    acks[index] = version


def local_receiver(strategy: str, index: int, n: int, handle: Any, acks: Any, rounds: int) -> None:
    """A receiver process: load every version into its own buffer and acknowledge it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)
    buf = torch.zeros(n)
    if strategy == "shm":
        from rlbench.engines.local import ShmReader

        reader = ShmReader(handle)
        mine = 0
        while mine < rounds:
            got = reader.poll(mine, lambda src: np.copyto(buf.numpy(), src))
            if got is None:
                time.sleep(20e-6)
                continue
            mine = got[0]
            _ack(acks, index, mine)
        reader.close()
        return
    import torch.distributed as dist

    port, world, version = handle
    url = f"tcp://127.0.0.1:{port}"
    dist.init_process_group("gloo", init_method=url, rank=index + 1, world_size=world, timeout=timedelta(seconds=CONNECT_S))
    try:
        for v in range(1, rounds + 1):
            if strategy == "gloo":  # join when the version is announced, as a generator does between slices
                while version.value < v:
                    time.sleep(20e-6)
            dist.broadcast(buf, src=0)
            _ack(acks, index, v)
    finally:
        dist.destroy_process_group()


def measure_local(strategy: str, weights: np.ndarray, receivers: int, rounds: int) -> list[float]:
    """Seconds per round (publish start to every receiver acknowledged), warm-up rounds dropped."""
    from rlbench.engines.local import ShmBoard, _context, _free_port

    ctx = _context()
    total = rounds + 2
    acks = ctx.Array("q", receivers, lock=False)
    board: Any = None
    dist = None
    if strategy == "shm":
        board = ShmBoard(ctx, weights.nbytes)
        handle: Any = board.handle()
    else:
        import torch.distributed as dist

        port = _free_port()
        version = ctx.Value("q", 0, lock=False)
        handle = (port, receivers + 1, version)
    procs = [
        ctx.Process(target=local_receiver, args=(strategy, i, weights.size, handle, acks, total), daemon=True)
        for i in range(receivers)
    ]
    for p in procs:
        p.start()
    out: list[float] = []
    try:
        buf = None
        if dist is not None:
            import torch

            url = f"tcp://127.0.0.1:{port}"
            dist.init_process_group(
                "gloo", init_method=url, rank=0, world_size=receivers + 1, timeout=timedelta(seconds=CONNECT_S)
            )
            buf = torch.from_numpy(weights)
        for v in range(1, total + 1):
            t0 = time.perf_counter()
            if board is not None:
                board.publish(weights, v)
            else:
                version.value = v
                dist.broadcast(buf, src=0)
            while min(acks[:]) < v:
                if not all(p.is_alive() for p in procs) and min(acks[:]) < v:
                    raise RuntimeError(f"a {strategy} receiver died (exit codes {[p.exitcode for p in procs]})")
                time.sleep(10e-6)
            if v > 2:
                out.append(time.perf_counter() - t0)
    finally:
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        if board is not None:
            board.close()
    return out


class _RayReceiver:
    def __init__(self, n: int) -> None:
        self.buf = np.zeros(n, np.float32)

    def load(self, refs: list[Any]) -> int:
        import ray

        value = ray.get(refs[0])
        if hasattr(value, "numpy"):
            value = value.numpy()
        np.copyto(self.buf, value)
        return int(self.buf.size)


def measure_ray(strategy: str, weights: np.ndarray, receivers: int, rounds: int) -> list[float]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    actors = [ray.remote(num_cpus=0)(_RayReceiver).remote(weights.size) for _ in range(receivers)]
    try:
        out = []
        for v in range(rounds + 2):
            t0 = time.perf_counter()
            if strategy == "ray-store":
                ref = ray.put(weights)
            else:
                import torch

                ref = ray.put(torch.from_numpy(weights))
            ray.get([a.load.remote([ref]) for a in actors])
            if v >= 2:
                out.append(time.perf_counter() - t0)
            del ref
        return out
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()

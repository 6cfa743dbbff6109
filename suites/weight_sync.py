"""``weight-sync``: how long pushing a policy's weights to its generators takes, per strategy and payload size.

One sender (the learner's side) and ``--receivers`` receiver processes (the generators' side) on this machine. A
round starts when the sender starts publishing a new version and ends when every receiver has acknowledged having
that version in its own flat weight buffer (a shared array the sender polls, so the latency is read on one clock).
Strategies, all measured in the same run:

* ``reference`` — raw ``torch.distributed`` gloo broadcast of the flat buffer, receivers already waiting in it: the
  floor that the other strategies are compared to (the report's ratios are against it);
* ``gloo`` — the local engine's collective: the sender announces the version, each receiver sees it and joins the
  broadcast;
* ``shm`` — the local engine's shared memory: the sender copies into a shared block, receivers copy out;
* ``ray-store`` — the Ray engine's object store with a flat NumPy array (receivers read it zero-copy and copy it in);
* ``ray-store-torch`` — the same with a torch tensor, which Ray pickles through a copy (for contrast).

The Ray rows need the ``rlbench[ray]`` extra; without it they are skipped with a note. Records are micro-benchmark
timings (``time/call``, one sample per round), so the micro report renders the table and the scaling chart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlbench.metrics import TIME_CALL, Metric
from rlbench.options import option
from rlbench.registry import BenchmarkSpec, RunContext

GROUP = "weight-sync"
LOCAL = ("reference", "gloo", "shm")
RAY = ("ray-store", "ray-store-torch")


@dataclass
class WeightSyncConfig:
    """Which payloads and strategies to measure."""

    sizes_mb: tuple[int, ...] = option("payload sizes in MiB (float32 weights)", default=(1, 10, 100))
    receivers: int = option("receiver processes (generators)", default=2)
    rounds: int = option("timed rounds per strategy and size (after 2 warm-up rounds)", default=20)
    strategies: tuple[str, ...] = option(
        "strategies to measure: reference (raw gloo), gloo, shm, ray-store, ray-store-torch", default=LOCAL + RAY
    )
    seed: int = option("seed of the payload", default=0)

    def validate(self) -> None:
        from rlbench.errors import UsageError

        unknown = sorted(set(self.strategies) - set(LOCAL + RAY))
        if unknown:
            raise UsageError(f"unknown --strategies {', '.join(unknown)}; choose from {', '.join(LOCAL + RAY)}")
        if self.receivers < 1 or self.rounds < 1 or not self.sizes_mb or min(self.sizes_mb) <= 0:
            raise UsageError("--receivers and --rounds must be >= 1 and --sizes-mb positive")


# --- local strategies: receiver processes ---------------------------------------------------------------------------
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
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index + 1, world_size=world)
    try:
        for v in range(1, rounds + 1):
            if strategy == "gloo":  # join when the version is announced, as a generator does between slices
                while version.value < v:
                    time.sleep(20e-6)
            dist.broadcast(buf, src=0)
            _ack(acks, index, v)
    finally:
        dist.destroy_process_group()


def _measure_local(strategy: str, weights: np.ndarray, receivers: int, rounds: int) -> list[float]:
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

            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=receivers + 1)
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


# --- Ray strategies -------------------------------------------------------------------------------------------------
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


def _measure_ray(strategy: str, weights: np.ndarray, receivers: int, rounds: int) -> list[float]:
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


def run_weight_sync(config: WeightSyncConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: every strategy at every size, interleaved by size (strategies alternate order per size)."""
    import importlib.util

    notes = []
    strategies = list(config.strategies)
    if importlib.util.find_spec("ray") is None and any(s in RAY for s in strategies):
        notes.append("ray-store rows: ray is not installed (pip install 'rlbench[ray]')")
        strategies = [s for s in strategies if s not in RAY]
    rng = np.random.default_rng(config.seed)
    out: list[Metric] = []
    for k, mb in enumerate(config.sizes_mb):
        weights = rng.standard_normal(int(mb * 2**20 // 4), dtype=np.float32)
        order = strategies if k % 2 == 0 else strategies[::-1]
        rounds = max(3, config.rounds // 4) if mb >= 100 else config.rounds
        for strategy in order:
            measure = _measure_ray if strategy in RAY else _measure_local
            try:
                samples = measure(strategy, weights, config.receivers, rounds)
            except Exception as exc:
                notes.append(f"{strategy}@{mb}MiB failed: {type(exc).__name__}: {exc}")
                continue
            out.append(
                Metric(
                    TIME_CALL,
                    "s",
                    "lower",
                    samples,
                    meta={"elements": int(weights.nbytes), "bytes": int(weights.nbytes)},
                    params={"group": GROUP, "op": f"{config.receivers} receivers", "impl": strategy, "size": f"{mb} MiB"},
                )
            )
    for m in out:
        m.meta["notes"] = notes
    return out


BENCHMARKS = [
    BenchmarkSpec(
        name="weight-sync",
        summary="micro: weight sync from a learner to N generators, 1/10/100 MiB: raw gloo floor, gloo, shared memory, "
        "Ray object store (NumPy, torch)",
        config_factory=WeightSyncConfig,
        run=run_weight_sync,
        version=1,
        report="micro",
    ),
]

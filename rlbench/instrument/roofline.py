"""This machine's own limits, and where a piece of torch code stands against them.

* :func:`matmul_gflops`: the achievable matmul rate at given shapes and dtype (median of timed rounds);
* :func:`memory_gbps`: copy bandwidth of a large tensor (bytes read plus written per second);
* :func:`dispatch_us`: the floor cost of one torch op dispatch (a one-element add);
* :class:`OpRecorder`: a ``TorchDispatchMode`` that counts, per phase, the aten ops dispatched and the FLOPs and
  shapes of the matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``), so a phase's time can be set against
  ``ops x dispatch floor`` and ``FLOPs / achievable rate at its own shapes``.

Three lower bounds on a phase's time: its ops at the dispatch floor, its FLOPs at the achievable rate for their
shapes, and the bytes its ops read and write at the copy bandwidth (an upper estimate of traffic: it assumes nothing
stays in cache). The largest names the bound (dispatch-, compute- or memory-bound); none explains all of the time.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
MATMULS = {aten.mm: "mm", aten.addmm: "addmm", aten.bmm: "bmm", aten.baddbmm: "baddbmm"}  # every overload, out= too
_FIRST_FACTOR = {"mm": 0, "bmm": 0, "addmm": 1, "baddbmm": 1}  # where the product's factors start in the op's args
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}
CACHED_BYTES = 4 * 2**20
"""An op whose tensors (inputs and output) total at most this many bytes is priced at the cache bandwidth
(:func:`memory_gbps` of :data:`CACHE_MIB`): a small network's activations stay in the caches between ops, and pricing
them at the DRAM rate put phases' memory share above 100% of their time."""
CACHE_MIB = 1.0
"""Source size of the cache-bandwidth copy: a 2 MiB working set (source and destination)."""


def _timed(fn: Callable[[], Any], min_time: float, rounds: int) -> list[float]:
    """Seconds per call of ``fn``: ``rounds`` rounds, each as many calls as fill ``min_time`` (after a warm-up)."""
    fn()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < min_time / 4 or n < 3:
        fn()
        n += 1
    per = (time.perf_counter() - t0) / n
    inner = max(1, int(min_time / max(per, 1e-9)))
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return out


def matmul_gflops(
    m: int, k: int, n: int, dtype: torch.dtype = torch.float32, device: str = "cpu", batch: int = 0, rounds: int = 7
) -> float:
    """Achievable GFLOP/s of an ``(m, k) @ (k, n)`` product (``batch`` of them with ``bmm``): median over rounds."""
    g = torch.Generator(device=device).manual_seed(0)
    shape_a, shape_b = ((batch, m, k), (batch, k, n)) if batch else ((m, k), (k, n))
    a = torch.randn(shape_a, generator=g, device=device).to(dtype)
    b = torch.randn(shape_b, generator=g, device=device).to(dtype)
    out = torch.empty(((batch, m, n) if batch else (m, n)), device=device, dtype=dtype)
    op = (lambda: torch.bmm(a, b, out=out)) if batch else (lambda: torch.mm(a, b, out=out))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def call() -> None:
        op()
        sync()

    secs = statistics.median(_timed(call, 0.02, rounds))
    return 2.0 * m * k * n * max(batch, 1) / secs / 1e9


def memory_gbps(mib: float = 256, device: str = "cpu", rounds: int = 5) -> float:
    """Copy bandwidth: ``2 x bytes`` (read and write) per second of ``dst.copy_(src)`` on ``mib`` MiB (256: the
    DRAM rate; :data:`CACHE_MIB`: a working set that stays in the caches)."""
    src = torch.ones(int(mib * 2**20) // 4, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def call() -> None:
        dst.copy_(src)
        sync()

    secs = statistics.median(_timed(call, 0.2, rounds))
    return 2 * src.numel() * 4 / secs / 1e9


def dispatch_us(device: str = "cpu", rounds: int = 7) -> float:
    """The floor cost of one op: a one-element ``torch.add`` with ``out=`` (no allocation), in µs (median)."""
    x = torch.ones(1, device=device)
    out = torch.empty_like(x)
    return statistics.median(_timed(lambda: torch.add(x, x, out=out), 0.02, rounds)) * 1e6


@dataclass
class PhaseOps:
    """What one phase dispatched."""

    ops: int = 0
    flops: float = 0.0
    bytes: float = 0.0  # tensor bytes read and written by every op (inputs plus outputs): traffic if nothing is cached
    cached_bytes: float = 0.0  # the part of ``bytes`` from ops whose tensors together fit :data:`CACHED_BYTES`
    matmuls: dict[tuple[str, tuple[int, ...], str], int] = field(default_factory=dict)  # (kind, (b,m,k,n), dtype) -> n


class OpRecorder(TorchDispatchMode):
    """Counts ops, matmul FLOPs and matmul shapes per phase while active; :meth:`phase` names the current phase.

    Dispatch modes see ops below autograd, so a backward pass's products count in the phase that ran it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.phases: dict[str, PhaseOps] = defaultdict(PhaseOps)
        self.stack: list[str] = ["other"]

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.stack.append(name)
        try:
            yield
        finally:
            self.stack.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        rec = self.phases[self.stack[-1]]
        rec.ops += 1
        key = matmul_key(func, args)
        if key is not None:
            typed = (*key, dtype_name(args[_FIRST_FACTOR[key[0]]]))
            rec.matmuls[typed] = rec.matmuls.get(typed, 0) + 1
            rec.flops += matmul_flops(key[1])
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        moved = _nbytes(args) + _nbytes({k: v for k, v in kwargs.items() if k != "out"}) + _nbytes(out)  # out once
        rec.bytes += moved
        if moved <= CACHED_BYTES:
            rec.cached_bytes += moved
        return out


def matmul_key(func: Any, args: tuple[Any, ...]) -> tuple[str, tuple[int, int, int, int]] | None:
    """``(kind, (batch, m, k, n))`` of a matrix-product op (batch 0 for a plain product), ``None`` for any other op."""
    kind = MATMULS.get(getattr(func, "overloadpacket", None))
    if kind is None:
        return None
    first = _FIRST_FACTOR[kind]
    a, b = args[first], args[first + 1]
    if a.dim() == 3:
        return kind, (int(a.shape[0]), int(a.shape[1]), int(a.shape[2]), int(b.shape[2]))
    return kind, (0, int(a.shape[0]), int(a.shape[1]), int(b.shape[1]))


def dtype_name(t: torch.Tensor) -> str:
    """``"fp32"``, ``"bf16"``, ``"fp16"``, or torch's name for any other dtype."""
    return DTYPE_NAMES.get(t.dtype, str(t.dtype).removeprefix("torch."))


def matmul_flops(shape: tuple[int, int, int, int]) -> float:
    """Multiply-adds times two of a ``(batch, m, k, n)`` product."""
    b, m, k, n = shape
    return 2.0 * max(b, 1) * m * k * n


def machine_limits(
    matmuls: dict[str, dict[tuple[int, int, int, int], int]], device: str = "cpu", max_shapes: int = 12
) -> dict[str, Any]:
    """This machine's limits for the products a run made, measured now (the threads are the run's own).

    Args:
        matmuls: Per phase, ``{(batch, m, k, n): count}`` of one iteration.
        device: Where the products ran.
        max_shapes: Shapes measured at most (those with the most FLOPs); the others are priced at the rate of the
            closest measured shape by size.

    Returns:
        ``{"achievable_s": {phase: seconds}, "dispatch_us": ..., "memory_gbps": ..., "peak_gflops": ...,
        "shapes": measured}``: the seconds each phase's products take at the achievable rate of their own shapes.
    """
    totals: dict[tuple[int, int, int, int], float] = defaultdict(float)
    for per in matmuls.values():
        for shape, count in per.items():
            totals[shape] += count * matmul_flops(shape)
    measured = sorted(totals, key=lambda s: -totals[s])[:max_shapes]
    rates = {s: matmul_gflops(s[1], s[2], s[3], device=device, batch=s[0], rounds=5) for s in measured}

    def rate(shape: tuple[int, int, int, int]) -> float:
        if shape in rates:
            return rates[shape]
        near = min(rates, key=lambda s: abs(matmul_flops(s) - matmul_flops(shape)))
        return rates[near]

    achievable = {
        phase: sum(count * matmul_flops(s) / (rate(s) * 1e9) for s, count in per.items()) for phase, per in matmuls.items()
    }
    return {
        "achievable_s": achievable,
        "dispatch_us": dispatch_us(device),
        "memory_gbps": memory_gbps(64, device),
        "peak_gflops": max(rates.values(), default=float("nan")),
        "shapes": len(measured),
    }


def _nbytes(value: Any) -> float:
    """Bytes of the tensors in ``value`` (nested lists, tuples and dicts)."""
    if isinstance(value, torch.Tensor):
        return float(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0.0


def achievable_seconds(rec: PhaseOps, device: str, cache: dict[tuple[tuple[int, ...], str], float]) -> float:
    """Seconds the phase's matrix products take at this machine's achievable rate for each one's own shape and dtype
    (rates measured once per shape and dtype, kept in ``cache``)."""
    total = 0.0
    for (_, (b, m, k, n), dtype), count in rec.matmuls.items():
        if ((b, m, k, n), dtype) not in cache:
            cache[((b, m, k, n), dtype)] = matmul_gflops(m, k, n, DTYPES.get(dtype, torch.float32), device, batch=b)
        total += count * 2.0 * max(b, 1) * m * k * n / (cache[((b, m, k, n), dtype)] * 1e9)
    return total


def memory_seconds(rec: PhaseOps, dram_gbps: float, cache_gbps: float) -> float:
    """The phase's bytes at the copy bandwidth of their size: ops that fit :data:`CACHED_BYTES` at ``cache_gbps``,
    the rest at ``dram_gbps`` (a lower bound on the time only as far as nothing is faster than a copy)."""
    if not (dram_gbps > 0 and cache_gbps > 0):
        return float("nan")
    return (rec.bytes - rec.cached_bytes) / (dram_gbps * 1e9) + rec.cached_bytes / (cache_gbps * 1e9)

"""Noise-free counters: torch operators dispatched, host-device synchronizations and copies, per phase.

Wall time varies run to run; the number of ops a training iteration dispatches does not. One extra op
or ``.item()`` per step is the classic RL regression, and these counts catch it on any runner, exactly
(gate them at ``0%``). :class:`OpCounter` is a ``TorchDispatchMode``: every aten op reaching the
dispatcher on this thread (autograd's backward ops included) is counted under the current ``phase``.
It slows what it watches, so runs count on a separate, untimed iteration.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlbench.instrument.roofline import matmul_flops, matmul_key

_SYNC_OPS = {"_local_scalar_dense"}  # .item(), bool(tensor), .tolist() element reads: the host waits for the device
_COPY_OPS = {"_to_copy", "copy_"}


def _device(x: Any) -> torch.device | None:
    return x.device if isinstance(x, torch.Tensor) else None


class OpCounter(TorchDispatchMode):
    """Counts ops, syncs and cross-device copies per phase while active (``with OpCounter() as c: ...``).

    Attributes:
        phase: Label the next ops are counted under; set it at phase boundaries.
        ops: Ops per phase.
        syncs: Device-to-host synchronizations per phase (``aten::_local_scalar_dense``).
        copies: Copies between different devices per phase.
        flops: Matrix-product FLOPs per phase (``mm``, ``addmm``, ``bmm``, ``baddbmm``; backward's included).
        matmuls: Per phase, ``{(batch, m, k, n): count}`` of those products.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Keep ``__torch_dispatch__`` unwrapped: torch's wrapping imports ``torch._dynamo`` (~2 s) on first use."""
        return False

    def __init__(self) -> None:
        super().__init__()
        self.phase = "other"
        self.ops: Counter[str] = Counter()
        self.syncs: Counter[str] = Counter()
        self.copies: Counter[str] = Counter()
        self.flops: Counter[str] = Counter()
        self.matmuls: dict[str, Counter[tuple[int, int, int, int]]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        self.ops[self.phase] += 1
        key = matmul_key(func, args)
        if key is not None:
            self.flops[self.phase] += int(matmul_flops(key[1]))
            self.matmuls.setdefault(self.phase, Counter())[key[1]] += 1
        name = func.overloadpacket.__name__
        if name in _SYNC_OPS:
            self.syncs[self.phase] += 1
        elif name in _COPY_OPS and args:
            src = _device(args[1]) if name == "copy_" and len(args) > 1 else _device(args[0])
            dst = _device(args[0]) if name == "copy_" else kwargs.get("device", src)
            if src is not None and dst is not None and torch.device(dst).type != src.type:
                self.copies[self.phase] += 1
        return func(*args, **kwargs)

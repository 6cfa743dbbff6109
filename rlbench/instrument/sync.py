"""Device synchronization for phase boundaries, so GPU work is booked to the phase that queued it."""

from __future__ import annotations

from collections.abc import Callable

import torch


def device_sync(device: torch.device) -> Callable[[], None] | None:
    """Return the function that waits for all queued work on ``device``, or ``None`` on CPU.

    Args:
        device: The torch device the timed code runs on.

    Returns:
        ``torch.cuda.synchronize`` bound to the device for CUDA, ``torch.mps.synchronize`` for MPS,
        ``None`` for CPU (CPU ops run synchronously; nothing to wait for).
    """
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()

        def sync_cuda() -> None:
            torch.cuda.synchronize(index)

        return sync_cuda
    if device.type == "mps":
        return torch.mps.synchronize
    return None

"""Transports by name: :func:`make_transport` builds any of them for N clients."""

from __future__ import annotations

from typing import Any

from rlbench.components.inference.base import OutputSpec, Transport
from rlbench.components.inference.multiprocess import MultiprocessTransport
from rlbench.components.inference.threads import DirectTransport, LockTransport, SlotTransport

TRANSPORTS = ("direct", "lock", "slot", "multiprocess")


def make_transport(
    kind: str, num_actors: int, obs_shape: tuple[int, ...], outputs: OutputSpec | None = None, context: Any = None
) -> Transport:
    """Build a transport by name for ``num_actors`` clients.

    Args:
        kind: ``direct``, ``lock``, ``slot`` (preallocated buffer), ``slot-ref`` (no preallocation) or ``multiprocess``.
        num_actors: Number of clients (slots).
        obs_shape: Shape of one observation.
        outputs: Output spec, required by ``multiprocess``.
        context: Multiprocessing context or start method (``multiprocess`` only).

    Raises:
        ValueError: For an unknown kind or a missing output spec.
    """
    if kind == "direct":
        return DirectTransport()
    if kind == "lock":
        return LockTransport()
    if kind == "slot":
        return SlotTransport(num_actors, obs_shape)
    if kind == "slot-ref":
        return SlotTransport(num_actors)
    if kind == "multiprocess":
        if outputs is None:
            raise ValueError("the multiprocess transport needs the model's output spec")
        return MultiprocessTransport(num_actors, obs_shape, outputs, context=context)
    raise ValueError(f"unknown transport {kind!r}; expected one of {(*TRANSPORTS, 'slot-ref')}")

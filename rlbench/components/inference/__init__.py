"""Many actors, one batched policy: an inference server and its transports.

* :class:`InferenceServer` batches requests from many clients and runs the model once per batch.
* Transports (one interface, :class:`Transport`): :class:`SlotTransport` (lock-free fixed slots),
  :class:`LockTransport` (shared queue + futures), :class:`MultiprocessTransport` (actors in processes,
  shared memory + semaphores) and :class:`DirectTransport` (no server: each actor calls the model).
* :func:`make_transport` builds any of them by name.

The collectors that feed env workers through a server live with the other collectors
(:mod:`rlbench.components.collect.batched`); the load generator and stress run that measure transports live
with their suite (``rlbench.suites.transports``).

Submodules import lazily: ``from rlbench.components.inference import SlotTransport`` loads only what it needs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "InferenceServer": "server",
    "Transport": "base",
    "InferenceError": "base",
    "TransportClosedError": "base",
    "TooManyClientsError": "base",
    "SlotTransport": "threads",
    "LockTransport": "threads",
    "DirectTransport": "threads",
    "MultiprocessTransport": "multiprocess",
    "probe_outputs": "multiprocess",
    "make_transport": "factory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule holding ``name`` on first access."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Many actors, one batched policy: an inference server, its transports and the async batched collector.

* :class:`InferenceServer` batches requests from many clients and runs the model once per batch.
* Transports (one interface, :class:`Transport`): :class:`SlotTransport` (lock-free fixed slots),
  :class:`LockTransport` (shared queue + futures), :class:`MultiprocessTransport` (actors in processes,
  shared memory + semaphores) and :class:`DirectTransport` (no server: each actor calls the model).
* :class:`AsyncBatchedCollector`: env workers (threads or processes) fed by the server, for off-policy
  (``collect(num_steps)``) and on-policy (``rollout(T)``; :class:`AsyncOnPolicyCollector` for PPO) loops.

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
    "AsyncBatchedCollector": "collector",
    "AsyncOnPolicyCollector": "onpolicy",
    "make_transport": "loadgen",
    "run_load": "loadgen",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule holding ``name`` on first access."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

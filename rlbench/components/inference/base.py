"""The transport interface between many inference clients (actors) and one :class:`InferenceServer`.

A transport moves observations from actors to the server and each result row back to the actor
that asked. Every transport implements the same small interface:

* actor side: :meth:`Transport.client` returns a callable ``client(obs) -> row`` bound to one actor
  (an integer ``client_id``); calling it blocks until the server answers, and raises
  :class:`InferenceError` when the model failed on that batch or :class:`TransportClosedError` when
  the server shut down;
* server side: :meth:`Transport.wait` (sleep until work may be there), :meth:`Transport.drain`
  (take up to ``n`` requests as one stacked batch), :meth:`Transport.reply` (hand each client its
  rows), :meth:`Transport.fail` (hand each client of a batch an error) and :meth:`Transport.close`.

Rows are NumPy: a model's outputs are normalized to a tuple of arrays with a leading batch dimension
(:func:`as_numpy_outputs`); a client receives one array per output (a NumPy scalar for ``(B,)``
outputs), or a tuple of them when the model returns several. This module imports neither torch nor
threads: multiprocess workers import it cheaply.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ModelFn = Callable[[np.ndarray], Any]
OutputSpec = Sequence[tuple[tuple[int, ...], Any]]


class InferenceError(RuntimeError):
    """The model raised on the batch that held this request (the original exception is ``__cause__``)."""


class TransportClosedError(RuntimeError):
    """The server or transport shut down before (or while) this request was answered."""


class TooManyClientsError(RuntimeError):
    """A fixed-slot transport was asked for more clients than it has slots."""


def as_numpy_outputs(out: Any) -> tuple[np.ndarray, ...]:
    """Normalize a model's result to a tuple of NumPy arrays (torch tensors are viewed, not copied, on CPU).

    Args:
        out: An array, a tensor, or a tuple/list of them, each with a leading batch dimension.

    Returns:
        The outputs as a tuple of NumPy arrays.
    """
    items = out if isinstance(out, (tuple, list)) else (out,)
    result = []
    for o in items:
        if not isinstance(o, np.ndarray):
            o = o.detach().cpu().numpy() if hasattr(o, "detach") else np.asarray(o)
        result.append(o)
    return tuple(result)


class Transport(ABC):
    """Moves requests from clients to the server and rows back (see the module docstring).

    Attributes:
        threaded: Whether a server thread drains this transport (False for :class:`DirectTransport`,
            whose clients call the model themselves).
    """

    threaded: bool = True

    def bind(self, server: Any) -> None:  # noqa: B027  (optional hook)
        """Called once by the server that will drain this transport."""

    @abstractmethod
    def client(self) -> Callable[[np.ndarray], Any]:
        """A new client bound to one actor: ``client(obs) -> row`` (blocking).

        Raises:
            TooManyClientsError: When the transport has fixed slots and all are taken.
        """

    @abstractmethod
    def wait(self, timeout: float) -> bool:
        """Block until a request may be pending or ``timeout`` seconds passed; True when woken by work."""

    @abstractmethod
    def pending(self) -> int:
        """Number of requests waiting to be drained (a snapshot)."""

    @abstractmethod
    def drain(self, max_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Take up to ``max_items`` pending requests.

        Returns:
            ``(client_ids, batch, submit_ns)``: int64 ids, the stacked observations and each request's
            ``perf_counter_ns`` submit time; ``None`` when nothing was pending.
        """

    @abstractmethod
    def reply(self, ids: np.ndarray, outputs: tuple[np.ndarray, ...]) -> None:
        """Give client ``ids[j]`` row ``j`` of every output and wake it."""

    @abstractmethod
    def fail(self, ids: np.ndarray, exc: BaseException) -> None:
        """Wake clients ``ids`` with an :class:`InferenceError` caused by ``exc``."""

    @abstractmethod
    def close(self) -> None:
        """Fail every waiting and every later request with :class:`TransportClosedError` (idempotent)."""


def output_rows(outputs: tuple[np.ndarray, ...], j: int) -> Any:
    """Row ``j`` of each output (copies), as one item or a tuple when there are several outputs."""
    if len(outputs) == 1:
        o = outputs[0]
        return o[j] if o.ndim == 1 else o[j].copy()
    return tuple(o[j] if o.ndim == 1 else o[j].copy() for o in outputs)


def closed_error() -> TransportClosedError:
    """The error a request gets when the server shut down."""
    return TransportClosedError("inference server closed while the request was pending")


def model_error(exc: BaseException) -> InferenceError:
    """A fresh per-caller error for a model exception (each caller gets its own object, same cause)."""
    err = InferenceError(f"model raised {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err

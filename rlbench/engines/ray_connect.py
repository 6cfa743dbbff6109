"""Joining or starting Ray with a deadline: an unreachable ``--address`` is a one-line usage error within seconds.

``ray.init(address="host:port")`` retries a cluster that is not there every few seconds, for good, and installs a
SIGTERM handler that exits 15 without a word. :func:`init_ray` first opens a plain TCP connection to the address,
under a deadline (:data:`CONNECT_S`), so nothing listening, a wrong host or a firewall is said at once; then it
calls ``ray.init`` with rlbench's SIGINT and SIGTERM handlers kept in charge, so that a SIGTERM during the join
ends the command as SIGTERM does everywhere else (exit 143 with a message).
"""

from __future__ import annotations

import os
import signal
import socket
from typing import Any

from rlbench.core.children import signal_handlers_kept
from rlbench.core.errors import Terminated, UsageError

CONNECT_S = float(os.environ.get("RLBENCH_CONNECT_S", "5"))
"""Seconds a connection to a cluster may take before the address is reported unreachable."""


def cluster_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of an explicit address (``host:port`` or ``ray://host:port``); ``None`` for ``auto`` /
    ``local`` / empty, which Ray resolves itself.

    Raises:
        UsageError: An address that names no port, or a scheme Ray does not join.
    """
    if address in ("", "auto", "local"):
        return None
    rest = address
    if "://" in address:
        scheme, rest = address.split("://", 1)
        if scheme != "ray":
            raise UsageError(f"--address {address!r}: give host:port, ray://host:port or auto")
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--address {address!r} names no port: give host:port, ray://host:port or auto")
    return host.strip("[]"), int(port)


def check_reachable(address: str, seconds: float = CONNECT_S) -> None:
    """Open and close a TCP connection to ``address`` within ``seconds``.

    Raises:
        UsageError: Nothing answers there in time.
    """
    endpoint = cluster_endpoint(address)
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=seconds).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise UsageError(
            f"cannot reach the Ray cluster at {address} ({why} within {seconds:g} s): check --address "
            "(`ray status` on the head node shows it)"
        ) from None


def init_ray(ray: Any, address: str, **kwargs: Any) -> None:
    """``ray.init(address=address or "local", **kwargs)``, with a deadline on reaching ``address`` and rlbench's
    signal handling kept.

    Raises:
        UsageError: The cluster cannot be reached or joined, or a local Ray cannot start.
        Terminated: SIGTERM arrived while joining.
    """
    check_reachable(address)
    try:
        with signal_handlers_kept():  # Ray's native SIGTERM handler would exit 1 (or 15) with no word of ours
            ray.init(address=address or "local", **kwargs)
    except SystemExit as exc:  # Ray's Python SIGTERM handler: sys.exit(signum)
        if exc.code == signal.SIGTERM:
            Terminated.seen = True
            raise Terminated from None
        raise
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot start or join {where} ({first}); check --address (`ray status` shows it)") from None

"""Joining or starting Ray with a deadline: an unreachable ``--address`` is a one-line usage error within seconds.

``ray.init(address="host:port")`` retries a cluster that is not there every few seconds, for good, and installs a
SIGTERM handler that exits 15 without a word. :func:`init_ray` first opens a plain TCP connection to the address and
opens HTTP/2 on it, as gRPC does, under a deadline (:data:`CONNECT_S`): nothing listening, a wrong host or a
firewall, and an address that accepts connections but is no gRPC server (a Ray cluster's GCS and its Ray Client
server both are), are said at once, while Python's signal handlers still run. Only then does it call ``ray.init``
(whose own waits, in Ray's C++ client, run no Python signal handler until they return), with rlbench's SIGINT and
SIGTERM handlers kept in charge, so that a SIGTERM during the join ends the command as SIGTERM does everywhere else
(exit 143 with a message).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any

from rlbench.core.children import signal_handlers_kept
from rlbench.core.errors import Terminated, UsageError

CONNECT_S = float(os.environ.get("RLBENCH_CONNECT_S", "5"))
"""Seconds a connection to a cluster may take before the address is reported unreachable."""
GCS_RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"


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


# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5): what a gRPC client sends
# first. A gRPC server sends its own SETTINGS frame (type 4) as the first frame of the connection.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2_SETTINGS = 4


def check_reachable(address: str, seconds: float = CONNECT_S) -> None:
    """Connect to ``address`` and see a gRPC server answer there (HTTP/2's SETTINGS frame), within ``seconds``.

    Raises:
        UsageError: Nothing answers there in time, or what answers is no gRPC server (so not a Ray cluster).
    """
    endpoint = cluster_endpoint(address)
    if endpoint is None:
        return
    try:
        sock = socket.create_connection(endpoint, timeout=seconds)
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise UsageError(
            f"cannot reach the Ray cluster at {address} ({why} within {seconds:g} s): check --address "
            "(`ray status` on the head node shows it)"
        ) from None
    with sock:
        header = b""
        deadline = time.monotonic() + seconds
        try:
            sock.sendall(H2_PREFACE)
            while len(header) < 9 and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
        except OSError:
            pass
    if len(header) < 9 or header[3] != H2_SETTINGS:
        said = "it accepts connections but says nothing" if not header else "it answers, but not as gRPC"
        raise UsageError(
            f"cannot join the Ray cluster at {address}: {said} within {seconds:g} s, so it is no Ray cluster; "
            "check --address (`ray status` on the head node shows it)"
        )


def init_ray(ray: Any, address: str, **kwargs: Any) -> None:
    """``ray.init(address=address or "local", **kwargs)``, with a deadline on reaching ``address`` and rlbench's
    signal handling kept.

    Raises:
        UsageError: The cluster cannot be reached or joined, or a local Ray cannot start.
        Terminated: SIGTERM arrived while joining.
    """
    check_reachable(address)
    if not address or address == "local":
        # a Ray started here: after a kill -9 of rlbench its GCS and raylet end with it (Ray fate-shares them), but
        # its agents wait this long for the GCS before they end too (Ray's default: 60 s); the user's setting wins
        os.environ.setdefault(GCS_RECONNECT_ENV, "5")
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

"""Shutdown never hangs on a queue message torn by a writer killed mid-put."""

from __future__ import annotations

import multiprocessing as mp
import struct
import time

from rlbench.engines.local import _discard, bounded


def test_a_torn_message_does_not_block_the_drain() -> None:
    q = mp.get_context("spawn").Queue()
    try:
        q._writer._send(struct.pack("!i", 1000) + b"only part of it")  # a header promising 1000 bytes, then the writer died
        t0 = time.monotonic()
        bounded(lambda: _discard(q), 0.2)  # an unbounded read would wait for the rest for good
        bounded(lambda: _discard(q), 0.2)  # the abandoned reader holds the lock: the next drain returns at once
        assert time.monotonic() - t0 < 2.0
    finally:
        q.cancel_join_thread()
        q.close()

"""pytest hooks of the micro-benchmark files: a time limit on users' implementations.

``rlbench run GROUP --impl pkg.mod:fn --timeout S`` sets ``RLBENCH_USER_TIMEOUT``; every benchmark of a user
implementation (its id holds ``user:``) then runs under a ``SIGALRM`` alarm of ``S`` seconds, so a Python loop that
never returns fails that benchmark (and only it) instead of hanging the run. Outside rlbench the variable is unset
and nothing changes: the files stay plain pytest-benchmark files.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _user_time_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    limit = float(os.environ.get("RLBENCH_USER_TIMEOUT") or 0)
    armed = limit > 0 and "user:" in request.node.name and threading.current_thread() is threading.main_thread()
    if not armed:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"did not finish within {limit:g} s (--timeout)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

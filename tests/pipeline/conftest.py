"""The pipeline tests reuse the CLI and fault helpers (plain modules beside those tests, imported by name)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

# before any test module imports Ray: otherwise Ray rewrites 127.0.0.1 to this VM's own address, and a
# ray.cluster_utils cluster bound to 127.0.0.1 hangs on connect (../shared/research/distributed-engines.md)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

for helpers in ("cli", "faults"):
    path = str(Path(__file__).resolve().parents[1] / helpers)
    if path not in sys.path:
        sys.path.append(path)


def count_learner_updates() -> threading.Event:
    """Patch the learner to set the returned event once it has made 5 updates (undo: :func:`uncount_learner_updates`)."""
    from rlbench.components.pipeline.roles import Learner

    done = threading.Event()
    update = Learner.update

    def counted(self, slices):
        out = update(self, slices)
        if self.version >= 5:
            done.set()
        return out

    counted.original = update
    Learner.update = counted
    return done


@pytest.fixture
def learner_progressed():
    """An event set once the driver's learner has made 5 updates: a fault injected after it finds something measured.

    (A fixed delay after the actors start raced the first update on a loaded CI machine: the partial run then held
    nothing to keep.)
    """
    from rlbench.components.pipeline.roles import Learner

    done = count_learner_updates()
    yield done
    Learner.update = Learner.update.original

"""Fixtures of the pipeline tests."""

from __future__ import annotations

import os

import pytest

from tests.pipeline.pipeline_helpers import count_learner_updates

# before any test module imports Ray: otherwise Ray rewrites 127.0.0.1 to this VM's own address, and a
# ray.cluster_utils cluster bound to 127.0.0.1 hangs on connect (measured on this project's CI machines)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


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

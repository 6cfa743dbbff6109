"""Session-wide test setup."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_pytest_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stable-Baselines3 makes an empty ``tempdir/SB3-<time>`` per ``learn()`` of a user's script unless
    ``SB3_LOGDIR`` names a folder: the example scripts the tests run (and their CLI children) log under pytest's
    temporary directory instead."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))

"""Session-wide test setup."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# Every temporary file of this test session, rlbench's children included, goes under one private folder: the tests
# that check that rlbench leaves no `rlbench-*` folder behind then see only this session's folders, not those of
# another test run or rlbench command on the same machine. Short, so Unix socket paths under it stay short.
_PRIVATE_TMP = tempfile.mkdtemp(prefix="rbt-", dir=os.environ.get("TMPDIR") or "/tmp")
os.environ["TMPDIR"] = _PRIVATE_TMP
tempfile.tempdir = None  # gettempdir() reads TMPDIR again
atexit.register(shutil.rmtree, _PRIVATE_TMP, True)


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_pytest_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stable-Baselines3 makes an empty ``tempdir/SB3-<time>`` per ``learn()`` of a user's script unless
    ``SB3_LOGDIR`` names a folder: the example scripts the tests run (and their CLI children) log under pytest's
    temporary directory instead."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))

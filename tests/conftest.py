"""Session-wide test setup."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

# Every temporary file of this test session, rlbench's children included, goes under one private folder: the tests
# that check that rlbench leaves no `rlbench-*` folder behind then see only this session's folders, not those of
# another test run or rlbench command on the same machine. Short, so Unix socket paths under it stay short.
_PARENT_TMP = os.environ.get("TMPDIR") or "/tmp"  # under pytest-xdist, a worker's parent: the controller's private folder
_PRIVATE_TMP = tempfile.mkdtemp(prefix="rbt-", dir=_PARENT_TMP)
os.environ["TMPDIR"] = _PRIVATE_TMP
tempfile.tempdir = None  # gettempdir() reads TMPDIR again
atexit.register(shutil.rmtree, _PRIVATE_TMP, True)


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_pytest_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stable-Baselines3 makes an empty ``tempdir/SB3-<time>`` per ``learn()`` of a user's script unless
    ``SB3_LOGDIR`` names a folder: the example scripts the tests run (and their CLI children) log under pytest's
    temporary directory instead."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))


# Under pytest-xdist (`pytest -n logical`, the README's command) tests share the machine. A test marked `alone`
# measures time where another test's load would blur the figure (a timing bisect, a page-load budget, the load
# probe), and so does a test that builds one of MEASURING_FIXTURES: it runs with no other test running. Every test
# holds a shared lock on a file in the controller's private folder, an `alone` test the exclusive one; a turnstile
# lock keeps new shared holders out while an exclusive one waits, so the `alone` test is not starved by the other
# workers' stream of tests. Tests marked `one_at_a_time(NAME)` (the tests that start a Ray) also take NAME's
# exclusive lock first, so no two of them run at once.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")

SAME_WORKER = {
    "tests/history/test_history_git.py": "history",
    "tests/history/test_site_browser.py": "history",
    "tests/history/test_loaded.py": "history",
}
"""Test files whose tests all go to one worker, by group: those of the session's history repositories, so that each
is built once (about 30 s and 3 minutes, alone). What xdist's `--dist loadgroup` would do with `xdist_group` marks,
which pytest 9.2 ignores (xdist 3.8 renames `item._nodeid`, a field pytest 9.2 no longer reads)."""


@pytest.hookimpl(optionalhook=True)  # `pytest -p no:xdist` runs the suite in one process without this hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduling with every test its own scope, but SAME_WORKER's files one scope per group."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SAME_WORKER.get(nodeid.split("::", 1)[0], nodeid)

    return Scheduling(config, log)


MEASURING_FIXTURES = {"history_repo", "loaded_regression"}
"""Fixtures that measure time while they are built (the history repositories' `history run`s, a bisect beside a
neighbour of its own): a test that needs one runs `alone` until the fixture is built in its worker."""
_built: set[str] = set()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> Iterator[None]:
    result = yield
    _built.add(fixturedef.argname)
    return result


def _lock_file(name: str) -> str:
    return os.path.join(_PARENT_TMP, f"rbt-{name}.lock")


@contextmanager
def _held(names: list[str], exclusive: bool) -> Iterator[None]:
    with ExitStack() as stack:
        for name in sorted(names):  # always in the same order: no two tests wait on each other
            f = stack.enter_context(open(_lock_file(f"one-{name}"), "a"))
            fcntl.flock(f, fcntl.LOCK_EX)
        turn = stack.enter_context(open(_lock_file("turnstile"), "a"))
        machine = stack.enter_context(open(_lock_file("machine"), "a"))
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        yield  # closing the files releases the locks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The locks span the whole protocol: setup (session fixtures built for this test included), call and teardown."""
    if not _XDIST_WORKER:
        return (yield)
    names = [str(m.args[0]) for m in item.iter_markers("one_at_a_time")]
    building = any(f in MEASURING_FIXTURES and f not in _built for f in getattr(item, "fixturenames", ()))
    with _held(names, exclusive=building or item.get_closest_marker("alone") is not None):
        return (yield)

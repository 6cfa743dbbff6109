"""Errors that the CLI turns into a one-line message and an exit code."""

from __future__ import annotations


class RlbenchError(Exception):
    """Base class: a problem the user can fix; ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class UsageError(RlbenchError):
    """Bad command-line input: unknown benchmark, option, value or device."""


class DataError(RlbenchError):
    """Records that cannot be read: corrupt, empty, truncated, foreign or from a future schema."""


class StoreError(RlbenchError):
    """The results store cannot be written."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (CI runners and ``timeout`` send it): handled exactly like Ctrl-C, but exits 143.

    Subclassing :class:`KeyboardInterrupt` makes every Ctrl-C path apply: finished repeats stay on disk, temporary
    directories and git worktrees are removed, child processes are ended.
    """

    exit_code = 143
    #: set by the CLI's SIGTERM handler: some libraries (Ray's ``ray.wait``, ``ray.get``) turn whatever their signal
    #: check raised into a plain :class:`KeyboardInterrupt`, and the exit code must still say SIGTERM
    seen = False


def interrupt_exit_code(exc: BaseException) -> int:
    """What a command ended by ``exc`` (Ctrl-C or SIGTERM) exits with: 143 after SIGTERM, else 130."""
    return 143 if isinstance(exc, Terminated) or Terminated.seen else 130


class MeasuredCodeFailed(Exception):
    """The measured code (a benchmark's function, a profiled script) failed: it raised, exited instead of returning or
    ran past its time limit. Not an :class:`RlbenchError`: the run ends with exit 1, "the measured code failed", its
    finished repeats kept; the message says what the code did (``exited with sys.exit(3)``, ``did not finish within
    2 s (--timeout)``)."""

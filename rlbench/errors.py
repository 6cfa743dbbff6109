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

"""Fixtures for the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.cli_helpers import run_cli


@pytest.fixture
def cli(tmp_path: Path):
    """`cli(*args)` runs rlbench with the test's temporary directory as working directory."""

    def _run(*args: str, timeout: float = 120):
        return run_cli(list(args), tmp_path, timeout)

    return _run

"""Fixtures of the fault-injection tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An empty store directory."""
    d = tmp_path / "store"
    d.mkdir()
    return d

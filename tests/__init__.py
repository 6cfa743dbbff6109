"""rlbench's tests. Helper modules are imported as packages (``from tests.cli.cli_helpers import run_cli``); a child
process a test starts imports them with :func:`child_env`'s ``PYTHONPATH``."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: `tests` is importable from here


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH`` (so a child imports ``tests.*``)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""), **extra}

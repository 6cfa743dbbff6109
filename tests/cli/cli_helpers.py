"""Helpers to run the real `rlbench` command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `python -m rlbench ARGS` from `cwd` (the installed package, not the checkout)."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "rlbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert stderr is exactly one line starting with 'rlbench: error:' and return it."""
    err = proc.stderr.strip()
    assert err.count("\n") == 0, f"expected one line on stderr, got:\n{proc.stderr}"
    assert err.startswith("rlbench: error:"), err
    return err

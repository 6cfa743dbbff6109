"""Helpers to run the real `rlbench` command in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def run_cli(
    args: list[str], cwd: Path, timeout: float = 120, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `python [PYTHON] -m rlbench ARGS` from `cwd` (the installed package, not the checkout)."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, *python, "-m", "rlbench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def run_cli_timing_imports(args: list[str], cwd: Path, timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], bool]:
    """`python -X importtime -m rlbench ARGS` from `cwd`: the finished process, and whether that process (not its
    children) imported torch, at any depth."""
    proc = run_cli(args, cwd, timeout, python=("-X", "importtime"))
    return proc, bool(re.search(r"\|\s+torch$", proc.stderr, re.M))


def own_worktrees(repo: Path) -> list[str]:
    """The worktrees of ``repo`` made under this test process's temporary folder (where rlbench makes them).

    Another pytest-xdist worker's `rlbench ab` on the same checkout adds worktrees under its own folder meanwhile: a
    test that checks that its command left none behind looks only at its own.
    """
    out = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True)
    mine = os.path.realpath(tempfile.gettempdir()) + os.sep
    paths = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("worktree ")]
    return [p for p in paths if os.path.realpath(p).startswith(mine)]


def run_together(
    runs: list[tuple[list[str], Path, dict[str, str]]], timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Run every ``(cmd, cwd, env)`` at the same time, output captured; their results in order (none is left running)."""
    procs = [
        subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd, cwd, env in runs
    ]
    try:
        outputs = [p.communicate(timeout=timeout) for p in procs]
        return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outputs, strict=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def run_cli_together(
    commands: list[list[str]], cwd: Path | list[Path], timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Run each `python -m rlbench ARGS` of `commands` from `cwd` (one for all, or one each), all at the same time;
    their results in order."""
    env = {**os.environ, "COLUMNS": "200"}
    cwds = cwd if isinstance(cwd, list) else [cwd] * len(commands)
    runs = [([sys.executable, "-m", "rlbench", *args], where, env) for args, where in zip(commands, cwds, strict=True)]
    return run_together(runs, timeout)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert stderr is exactly one line starting with 'rlbench: error:' and return it."""
    err = proc.stderr.strip()
    assert err.count("\n") == 0, f"expected one line on stderr, got:\n{proc.stderr}"
    assert err.startswith("rlbench: error:"), err
    return err

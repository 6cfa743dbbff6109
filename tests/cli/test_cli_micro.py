"""Micro-benchmark groups through the real command, with a user's implementation."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import one_line_error, run_cli

USER_MODULE = """
import numpy as np
from rlbench.components.advantages import gae_numpy

def good(rewards, values, dones, last_value, gamma, lam):
    return gae_numpy(rewards, values, dones, last_value, gamma, lam)

def bad(rewards, values, dones, last_value, gamma, lam):
    out = gae_numpy(rewards, values, dones, last_value, gamma, lam)
    out[3, 1] += 0.5
    return out
"""


def test_gae_with_user_implementations(tmp_path: Path) -> None:
    (tmp_path / "myimpl.py").write_text(USER_MODULE)
    proc = run_cli(["run", "gae", "--impl", "myimpl:bad"], tmp_path)
    assert proc.returncode == 2
    err = one_line_error(proc)
    assert "differs from the reference by up to 0.5 at [t=3, i=1]" in err and "not timed" in err
    assert run_cli(["run", "gae", "--impl", "nosuchmodule:f"], tmp_path).returncode == 2
    proc = run_cli(["run", "gae", "--impl", "myimpl:good", "--select", "user or numpy", "--max-time", "0.02", "--json",
                    "--report", "gae.md"], tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cases = json.loads(proc.stdout)["cases"]
    impls = {c["impl"] for c in cases}
    assert impls == {"user:good", "numpy"}
    assert {c["size"] for c in cases} == {"128x8", "2048x64", "1024x1024"}
    report = (tmp_path / "gae.md").read_text()
    assert "`user:good`" in report and "★" in report and (tmp_path / "gae-gae-call.png").is_file()
    # re-rendered from the stored records alone
    again = run_cli(["report", str(tmp_path / json.loads(proc.stdout)["records"]), "-o", "-"], tmp_path)
    assert again.returncode == 0 and "`user:good`" in again.stdout

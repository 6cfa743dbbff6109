"""`rlbench run transports` end to end: records, the generated report and its chart, re-rendered from records."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.slow
def test_transports_quick_run_writes_report(cli, tmp_path: Path) -> None:
    proc = cli(
        "run",
        "transports",
        "--quick",
        "--duration",
        "0.15",
        "--warmup",
        "0.05",
        "--transports",
        "slot",
        "--transports",
        "direct",
        "--transports",
        "multiprocess",
        "--stress-requests",
        "3000",
        "--store",
        "rec",
        "--report",
        "out/transports.md",
        "--quiet",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "out" / "transports.md").read_text()
    for needle in (
        "# rlbench transports report",
        "## Against TorchRL",
        "### tiny, env step 0 µs",
        "## Where batching pays",
        "## Winner per case",
        "Verdict: **passed**",
        "Machine",
        "torch threads 1",
    ):
        assert needle in text, needle
    assert (tmp_path / "out" / "transports-tiny-env0.png").stat().st_size > 1000
    again = cli("report", "rec", "-o", "-")
    assert again.returncode == 0 and "## Winner per case" in again.stdout


def test_transports_rejects_unknown_transport(cli) -> None:
    proc = cli("run", "transports", "--transports", "carrier-pigeon", "--quick")
    assert proc.returncode == 2 and "unknown transport" in proc.stderr

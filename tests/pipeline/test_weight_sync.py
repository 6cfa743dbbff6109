"""``rlbench run weight-sync``: every strategy delivers the weights and is timed beside raw gloo in one run."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from rlbench.engines.weight_sync import measure_local
from rlbench.results.store import read_records
from tests.cli.cli_helpers import run_cli

pytestmark = pytest.mark.slow  # receiver processes, or the CLI in a subprocess


@pytest.mark.parametrize("strategy", ["reference", "gloo", "shm"])
def test_each_local_strategy_completes_every_round(strategy):
    weights = np.arange(256 * 1024, dtype=np.float32)  # 1 MiB
    times = measure_local(strategy, weights, receivers=2, rounds=4)
    assert len(times) == 4 and all(0 < t < 10 for t in times)


def test_weight_sync_run_records_every_strategy_beside_the_floor(tmp_path):
    args = ["run", "weight-sync", "--sizes-mb", "1", "--rounds", "3", "--store", str(tmp_path), "--quiet"]
    r = run_cli([*args, "--report", str(tmp_path / "ws.md")], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    impls = {rec.params["impl"] for rec in read_records(tmp_path) if rec.metric == "time/call"}
    expected = {"reference", "gloo", "shm"} | ({"ray-store", "ray-store-torch"} if importlib.util.find_spec("ray") else set())
    expected |= {"monarch-rdma"} if importlib.util.find_spec("monarch") else set()
    assert impls == expected
    text = (tmp_path / "ws.md").read_text()
    assert "## weight-sync: 2 receivers" in text and "`reference`" in text


def test_unknown_strategy_is_a_one_line_error(tmp_path):
    r = run_cli(["run", "weight-sync", "--strategies", "pigeon", "--store", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "unknown --strategies pigeon" in r.stderr

"""The chart worker: matplotlib imported beside the run, at the lowest CPU priority, and charts drawn on request."""

from __future__ import annotations

import os
import sys

import pytest

from rlbench.report.charts import Bar, Chart
from rlbench.report.plots import ChartWorker


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2, reason="a worker needs 2 cores")
def test_the_chart_worker_yields_the_cpu_to_the_run_and_draws_what_it_is_sent(tmp_path):
    worker = ChartWorker()
    try:
        assert worker.proc is not None
        # nice 19: the lowest priority, so importing matplotlib takes only cycles a measured run leaves idle
        assert os.getpriority(os.PRIO_PROCESS, worker.proc.pid) == 19
        chart = Chart("-phases.png", "Where the time goes", [Bar("env", 40.0), Bar("update", 60.0)], "% of wall time")
        out = tmp_path / "phases.png"
        assert worker.draw([(chart, out)])
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        worker.close()

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


def test_a_bar_chart_prepared_ahead_in_another_thread_draws_the_same_png(tmp_path):
    """`rlbench profile` loads Pillow's plugins and the chart's fonts in a thread while the script runs: the chart
    drawn after that is the one drawn without it, byte for byte."""
    import threading

    from rlbench.report import plots

    chart = Chart("-phases.png", "Where the time goes", [Bar("env", 40.0), Bar("update", 60.0)], "% of wall time")
    plots._font.cache_clear()
    cold = plots.draw_bar_chart(chart, tmp_path / "cold.png").read_bytes()
    plots._font.cache_clear()
    thread = threading.Thread(target=plots.prepare_bar_charts)
    thread.start()
    thread.join()
    assert plots._font.cache_info().currsize == len(plots.BAR_FONTS)
    warm = plots.draw_bar_chart(chart, tmp_path / "warm.png").read_bytes()
    assert warm == cold and warm[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots._font.cache_info().hits >= len(plots.BAR_FONTS)  # drawn with the fonts loaded ahead

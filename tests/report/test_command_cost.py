"""The profile report's cost line: hooks' share plus the command's own seconds, measured by the command itself."""

from __future__ import annotations

import time

from rlbench.cli.profile import _CommandCost
from rlbench.profiling.results import attribution_metrics
from rlbench.report.profiled import COMMAND_COST_MARK
from rlbench.report.training import render
from rlbench.results.metrics import PROFILE_COMMAND_S, Metric
from rlbench.results.records import metric_records
from tests.report.test_steady_figures import _attribution


def _records(extra: list[Metric] = ()) -> list:
    return metric_records(
        [*attribution_metrics(_attribution()), *extra],
        run_id="r",
        timestamp="2026-11-26T00:00:00+00:00",
        benchmark="sac.py",
        params={"command": "sac.py"},
        definition_hash="h",
        repeat=0,
        seed=None,
        device="cpu",
        fingerprint={},
        meta={"kind": "profile", "report": "profile", "command": "rlbench profile -- python sac.py"},
    )


def test_the_command_fills_in_its_own_measured_cost_when_the_report_is_done():
    records = _records()
    text, _ = render(records)
    assert COMMAND_COST_MARK in text
    t0 = time.perf_counter() - 3.0  # the command started 3 s ago; its child ran 2.5 s, 0.1 s of it rlbench's own
    cost = _CommandCost(t0, children_s=2.5, children_rlbench_s=0.1)
    filled = cost.fill(text, records)
    assert COMMAND_COST_MARK not in filled
    assert 0.55 < cost.own_s < 1.5  # 3 s - (2.5 s - 0.1 s), plus the few ms this test took
    assert "Profiling cost: hooks" in filled and "start-up and the command's own work" in filled


def test_a_re_rendered_report_reads_the_stored_cost():
    meta = {"command_s": 3.0, "script_s": 2.4, "children_s": 2.5}
    text, _ = render(_records([Metric(PROFILE_COMMAND_S, "s", "none", [0.6], meta=meta)]))
    assert COMMAND_COST_MARK not in text
    assert "start-up and the command's own work **600.0 ms**" in text

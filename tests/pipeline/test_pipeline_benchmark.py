"""``rlbench run grpo-pipeline`` end to end: records, the pipeline report with its charts, what-ifs, bad input."""

from __future__ import annotations

import json

from cli_helpers import run_cli

from rlbench.store import read_records


def test_grpo_pipeline_run_records_and_report(tmp_path):
    store = tmp_path / "store"
    args = ["run", "grpo-pipeline", "--updates", "40", "--generators", "1", "--what-if", "generators=2"]
    r = run_cli([*args, "--store", str(store), "--report", str(tmp_path / "p.md"), "--json"], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["pipeline/samples_per_s"] > 0 and summary["pipeline/updates_per_s"] > 0
    records = read_records(store)
    variants = {rec.params.get("variant", "baseline") for rec in records}
    assert variants == {"baseline", "generators=2"}
    metrics = {rec.metric for rec in records if rec.params.get("variant", "baseline") == "baseline"}
    for m in ("pipeline/weight_sync_s", "pipeline/policy_lag", "pipeline/queue_depth", "pipeline/capacity/learner"):
        assert m in metrics
    assert {"actor/learner/busy_s", "actor/generator-0/wait_s", "actor/scorer/idle_s"} <= metrics
    text = (tmp_path / "p.md").read_text()
    for section in ("Bounding stage", "## What-ifs", "## Weight sync", "## Policy lag", "## Where each actor's time goes"):
        assert section in text
    assert (tmp_path / "p-timeline.png").stat().st_size > 1000 and (tmp_path / "p-lag.png").is_file()


def test_bad_settings_are_one_line_errors(tmp_path):
    r = run_cli(["run", "grpo-pipeline", "--weight-sync", "store", "--store", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "--weight-sync store is not available on --engine local" in r.stderr
    r = run_cli(["run", "grpo-pipeline", "--group-size", "1", "--store", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "--group-size must be >= 2" in r.stderr

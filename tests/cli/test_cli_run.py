"""The real command, end to end, through a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.report.kinds import write_report
from rlbench.results.store import load, read_records
from tests.cli.cli_helpers import one_line_error

SMALL = ["--total-steps", "2048", "--eval-episodes", "2"]


@pytest.mark.slow
def test_list(cli) -> None:
    proc = cli("list")
    assert proc.returncode == 0, proc.stderr
    assert "ppo-cartpole" in proc.stdout
    listed = json.loads(cli("list", "--json").stdout)
    assert any(b["name"] == "ppo-cartpole" for b in listed)


@pytest.mark.slow
def test_run_json_records_and_report(cli, tmp_path: Path) -> None:
    proc = cli("run", "ppo-cartpole", *SMALL, "--repeats", "2", "--json", "--report", "out/report.md")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # exactly one JSON object: json.loads fails on anything extra
    for key in (
        "sps",
        "wall_s",
        "init_s",
        "train_s",
        "eval_return",
        "time/collect/env",
        "time/collect/policy",
        "time/advantage",
        "time/update",
        "time/update/backward",
        "records",
        "report",
    ):
        assert key in out, key
    assert out["sps"] > 0 and out["repeats"] == 2 and out["env_steps"] == 2048
    records = tmp_path / out["records"]
    report = tmp_path / out["report"]
    assert records.is_file() and report.is_file() and (tmp_path / "out" / "report-phases.png").is_file()
    assert str(records.parent.name) == ".rlbench"  # default store under the working directory
    df = load(records)
    assert set(df["repeat"]) == {0, 1} and set(df["seed"]) == {0, 1}
    assert (df["benchmark"] == "ppo-cartpole").all()
    # the report re-rendered from stored records alone equals the one written at run time
    assert write_report(records, None) == report.read_text().replace(
        "![Share of steady-state time per phase](report-phases.png)\n\n", ""
    )
    again = tmp_path / "again.md"
    write_report(records, again, chart=True)
    assert again.read_text().replace("again-phases.png", "report-phases.png") == report.read_text()


@pytest.mark.slow
def test_report_command_rerenders(cli, tmp_path: Path) -> None:
    assert cli("run", "ppo-cartpole", *SMALL, "--quiet", "--store", "st").returncode == 0
    proc = cli("report", "st", "-o", "-")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# rlbench bottleneck report: `ppo-cartpole`")
    assert len(read_records(tmp_path / "st")) > 20


@pytest.mark.slow
def test_quiet_prints_nothing_and_summary_prints_table(cli) -> None:
    quiet = cli("run", "ppo-cartpole", *SMALL, "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == ""
    loud = cli("run", "ppo-cartpole", *SMALL)
    assert loud.returncode == 0 and "Training SPS" in loud.stdout and "report:" in loud.stdout


@pytest.mark.slow
def test_unknown_benchmark_suggests(cli, tmp_path: Path) -> None:
    proc = cli("run", "ppo-cartpol")
    assert proc.returncode == 2
    assert "did you mean 'ppo-cartpole'" in one_line_error(proc)
    assert not (tmp_path / ".rlbench").exists()


@pytest.mark.slow
def test_unknown_option_and_bad_values(cli, tmp_path: Path) -> None:
    for args, needle in [
        (["--nope"], "unrecognized arguments: --nope"),
        (["--num-envs", "abc"], "expected an integer"),
        (["--num-envs", "0"], "--num-envs must be at least 1"),
        (["--total-steps", "10"], "less than one rollout"),
        (["--gamma", "2"], "--gamma must lie in [0, 1]"),
        (["--init", "xavier"], "invalid choice"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--device", "tpu"], "unknown device 'tpu'"),
    ]:
        proc = cli("run", "ppo-cartpole", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in one_line_error(proc), (args, proc.stderr)
    assert not (tmp_path / ".rlbench").exists()  # nothing half written


@pytest.mark.slow
def test_absent_device(cli, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        return
    proc = cli("run", "ppo-cartpole", "--device", "cuda")
    assert proc.returncode == 2
    assert "not available on this machine" in one_line_error(proc)
    assert not (tmp_path / ".rlbench").exists()


@pytest.mark.slow
def test_unwritable_store_and_unknown_env(cli, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = cli("run", "ppo-cartpole", "--store", "afile/store")
    assert proc.returncode == 2 and "--store" in one_line_error(proc)
    proc = cli("run", "ppo-cartpole", "--env", "CartPol-v1")
    assert proc.returncode == 2 and "CartPole-v1" in one_line_error(proc)


@pytest.mark.slow
def test_report_on_bad_records(cli, tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"schema": 1, "run_id"')
    proc = cli("report", "bad.jsonl")
    assert proc.returncode == 2 and "truncated" in one_line_error(proc)
    proc = cli("report", "missing.jsonl")
    assert proc.returncode == 2 and "no such" in one_line_error(proc)

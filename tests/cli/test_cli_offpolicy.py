"""`rlbench run sac-pendulum | ddpg-pendulum` end to end: records, report with the update breakdown and what-ifs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.report.kinds import write_report
from rlbench.results.store import load
from tests.cli.cli_helpers import one_line_error, run_cli_together

pytestmark = pytest.mark.slow  # each test runs SAC or DDPG in subprocesses (4-8 s)

TINY = [
    "--total-steps",
    "400",
    "--learning-starts",
    "200",
    "--batch-size",
    "32",
    "--hidden",
    "32,32",
    "--eval-episodes",
    "1",
    "--log-every",
    "100",
    "--threads",
    "1",
]


def test_sac_what_if_run_writes_baseline_and_variants(cli, tmp_path: Path) -> None:
    proc = cli(
        "run",
        "sac-pendulum",
        *TINY,
        "--repeats",
        "2",
        "--what-if",
        "polyak=loop",
        "--what-if",
        "critics=separate",
        "--json",
        "--report",
        "sac.md",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["env_steps"] == 400 and out["sps"] > 0 and out["time/update/critic"] > 0 and out["time/update/alpha"] > 0
    df = load(tmp_path / out["records"])
    variants = set(df.loc[df["metric"] == "sps", "param.variant"])
    assert variants == {"baseline", "polyak=loop", "critics=separate"}
    assert set(df.loc[df["metric"] == "sps", "seed"]) == {0, 1}
    text = (tmp_path / "sac.md").read_text()
    for needle in (
        "Gradient update, broken down",
        "`update/target`",
        "`update/polyak`",
        "What-ifs, measured",
        "`polyak=loop`",
        "`critics=separate`",
        "one gradient update",
    ):
        assert needle in text, needle
    assert (tmp_path / "sac-phases.png").is_file()
    chart_link = "![Share of steady-state time per phase](sac-phases.png)\n\n"
    assert write_report(tmp_path / out["records"], None) == text.replace(chart_link, "")


def test_ddpg_runs_with_td_lambda_and_prioritized_replay(tmp_path: Path) -> None:
    extras = (["--td-lambda", "0.9", "--slice-len", "4"], ["--prioritized", "--noise", "ou"])
    runs = [["run", "ddpg-pendulum", *TINY, *extra, "--json"] for extra in extras]
    for extra, proc in zip(extras, run_cli_together(runs, tmp_path, timeout=300), strict=True):  # both at once
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["env_steps"] == 400 and out["time/update/actor"] > 0
        if "--prioritized" in extra:
            assert out["time/update/priorities"] > 0


def test_bad_what_ifs_and_settings_are_refused_before_running(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the first through the real command (its exit code, one line on stderr); the others through the same main() in
    # this process, from the same working directory: a subprocess each only paid torch's import again
    proc = cli("run", "sac-pendulum", "--what-if", "polyak")
    assert proc.returncode == 2, proc.stderr
    assert "expects FIELD=VALUE" in one_line_error(proc), proc.stderr
    monkeypatch.chdir(tmp_path)
    for args, needle in [
        (["--what-if", "speed=2"], "unknown field 'speed'"),
        (["--what-if", "threads=two"], "not a valid value for threads"),
        (["--what-if", "polyak=foreach"], "is the baseline setting already"),
        (["--what-if", "critics=stacked"], "--critics must be ensemble or separate"),
        (["--td-lambda", "0.5", "--prioritized"], "choose one"),
        (["--env", "CartPole-v1"], "continuous"),
        (["--gradients", "manual", "--critics", "separate"], "needs --critics ensemble"),
    ]:
        code = main(["run", "sac-pendulum", *args])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", (args, out, err)
        assert needle in one_line_error(subprocess.CompletedProcess(args, code, out, err)), (args, err)
    assert not list((tmp_path / ".rlbench").glob("*.jsonl")) if (tmp_path / ".rlbench").exists() else True

"""``rlbench run peers`` end to end with real libraries, then ``compare --by impl`` and ``report`` on its records.

The libraries are real (CI installs stable-baselines3, rlox and torchrl with the test extra); the runs are short,
so these tests check the plumbing and the counting, not who learns: ``tests/suites/test_peers_learning.py`` and the
committed peers reports carry that.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.cli_helpers import one_line_error

pytestmark = pytest.mark.slow  # every test runs `rlbench run peers` in a subprocess (the real ones train four libraries)


def test_peers_run_compare_by_impl_and_report(cli, tmp_path: Path) -> None:
    proc = cli(
        "run", "peers", "--impls", "rlbench", "--impls", "sb3", "--total-steps", "2048", "--repeats", "2",
        "--eval-episodes", "2", "--json", "--quiet", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    impls = {r["impl"]: r for r in out["impls"]}
    assert set(impls) == {"rlbench", "sb3"} and impls["sb3"]["ratio"] > 0
    assert impls["sb3"]["library"].startswith("stable-baselines3 ") and impls["sb3"]["env_steps"] == 2048
    assert impls["sb3"]["shares"], "the profiled pass of seed 0 gives SB3's phase shares"
    text = (tmp_path / out["report"]).read_text()
    assert "sb3 → rlbench" in text and "rlbench → sb3" in text  # seed 1 ran in the reverse order

    cmp = cli("compare", out["records"], "--by", "impl", "--metric", "sps", "--json")
    assert cmp.returncode == 0, cmp.stderr
    got = json.loads(cmp.stdout)
    assert got["baseline"] == "rlbench" and [c["metric"] for c in got["groups"]["sb3"]] == ["sps"]

    bad = cli("compare", out["records"], "--by", "impl", "--against", "cleanrl")
    assert bad.returncode == 2 and "--against 'cleanrl' is not a value of 'impl'" in one_line_error(bad)
    two = cli("compare", out["records"], out["records"], "--by", "impl")
    assert two.returncode == 2 and "ONE run" in one_line_error(two)
    none = cli("compare", out["records"], "--by", "device")
    assert none.returncode == 2 and "at least two values of 'device'" in one_line_error(none)
    again = cli("report", out["records"], "-o", "-")
    assert again.returncode == 0 and again.stdout == text


def test_unknown_peer_is_a_one_line_usage_error(cli) -> None:
    proc = cli("run", "peers", "--impls", "cleanrl")
    assert proc.returncode == 2 and "unknown implementation 'cleanrl'" in one_line_error(proc)
    ppo = cli("run", "peers", "--learning-starts", "100")  # --algo ppo, the default, has no learning starts
    assert ppo.returncode == 2 and "--learning-starts applies to --algo sac only" in one_line_error(ppo)
    negative = cli("run", "peers", "--algo", "sac", "--learning-starts=-5")
    assert negative.returncode == 2 and "--learning-starts must be 0 or more" in one_line_error(negative)


@pytest.mark.parametrize(("algo", "steps", "more"), [("ppo", "2048", []), ("sac", "300", ["--learning-starts", "256"])])
def test_every_peer_library_runs_for_real(cli, algo: str, steps: str, more: list[str]) -> None:
    """rlbench, SB3, rlox and TorchRL each train (briefly), count the steps they took and get a phase breakdown.

    SAC starts updating after ``--learning-starts`` random steps in every library (one batch of 256 in its buffer),
    so its run is short and still has 44 updates in each library's phase breakdown."""
    proc = cli(
        "run", "peers", "--algo", algo, "--total-steps", steps, *more, "--eval-episodes", "1", "--json", "--quiet",
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # nothing a library logged reached stdout
    impls = {r["impl"]: r for r in out["impls"]}
    assert set(impls) == {"rlbench", "sb3", "rlox", "torchrl"}, out["flags"]
    for impl, row in impls.items():
        assert row["sps"] > 0 and row["env_steps"] > 0 and row["shares"], impl
        assert abs(row["env_steps"] - int(steps)) <= 1024, (impl, row["env_steps"])  # whole rollouts at most
    assert impls["rlox"]["library"].startswith("rlox ") and impls["torchrl"]["library"].startswith("torchrl ")
    assert "resource_tracker" not in proc.stderr  # no leaked semaphores (TorchRL's default buffer counters)
    for impl, row in impls.items():  # every library updated after its learning starts: an update layer was timed
        assert row["shares"].get("update", 0.0) > 0, (impl, row["shares"])


def test_profile_seeds_take_zero_and_none_and_refuse_negatives(cli) -> None:
    """Seed 0 (the default) and ``none`` parse; a negative seed is a one-line usage error, exit 2."""
    for value in ("0", "none", "0,3"):
        proc = cli("run", "peers", "--impls", "cleanrl", "--profile-seeds", value)
        assert proc.returncode == 2 and "unknown implementation 'cleanrl'" in one_line_error(proc), value
    bad = cli("run", "peers", "--profile-seeds=-1")
    assert bad.returncode == 2 and "integers of at least 0, or none" in one_line_error(bad)

"""The command-cost harness's report: verdicts computed from the pairs it was given, the worst script named."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from rlbench.suites.scripts import accuracy, checkpoint, command_cost


def _pairs(plain: list[float], command: list[float]) -> dict[str, list[dict[str, float]]]:
    return {"plain": [{"wall": w, "cpu": w} for w in plain], "command": [{"wall": w, "cpu": w} for w in command]}


def _results() -> dict:
    env = {
        "machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 8, "id": "abc"},
        "software": {"python": "3.11"},
        "packages": {"torch": "2.13.0"},
        "install": "`rlbench`",
    }
    return {
        "load0": {
            "_trivial": _pairs([1.0, 1.1, 1.2], [1.2, 1.3, 1.35]),  # +0.2 s, +0.2 s, +0.15 s
            "cleanrl": _pairs([20.0, 20.0, 20.0], [20.4, 20.5, 20.2]),  # +2.0%, +2.5%, +1.0%
            "cleanrl_dqn": _pairs([20.0, 20.0, 20.0], [21.0, 21.2, 20.9]),  # +5.0%, +6.0%, +4.5%
        },
        "load1": {
            "_trivial": _pairs([1.0, 1.0, 1.0], [1.4, 1.35, 1.5]),
            "cleanrl": _pairs([20.0, 20.0, 20.0], [20.2, 20.4, 20.3]),
            "cleanrl_dqn": _pairs([20.0, 20.0, 20.0], [20.5, 20.4, 20.6]),
        },
        "_meta": {"seconds": 120.0, "environment": env, "compiled": True, "commit": "deadbee"},
    }


def test_the_report_judges_every_script_and_the_fixed_cost_against_the_targets() -> None:
    text = command_cost.render(_results())
    dqn_quiet = next(line for line in text.splitlines() if line.startswith("| cleanrl_dqn") and "+5.0%" in line)
    assert "| **no** |" in dqn_quiet  # median of +5.0, +6.0, +4.5
    ppo_quiet = next(line for line in text.splitlines() if line.startswith("| cleanrl (") and "+2.0%" in line)
    assert "| yes |" in ppo_quiet
    assert "added **+0.20 s**" in text and "within the 0.3 s target" in text  # quiet trivial: median +0.2 s
    assert "added **+0.40 s**" in text and "**over** the 0.3 s target" in text  # loaded trivial
    assert "the worst script is **cleanrl_dqn, +5.0%**; 1 of 2 scripts are over 3%" in text
    assert "With load 1: the worst script is **cleanrl_dqn, +2.5%**; all are within 3%" in text
    assert "Test CPU" in text and "`deadbee`" in text


def test_the_report_says_which_verdicts_the_machines_noise_leaves_open() -> None:
    results = _results()
    results["load0"]["cleanrl"] = _pairs([20.0, 22.0, 20.0], [20.4, 23.0, 21.2])  # +2.0%, +4.5%, +6.0%: both sides
    results["load0"]["cleanrl"]["command"][0]["cpu"] = 20.8  # CPU: +4.0%, +4.5%, +6.0%
    results["load1"]["cleanrl_dqn"] = _pairs([20.0, 20.0, 20.0], [20.5, 20.4, 20.5])  # +2.5%, +2.0%, +2.5%
    text = command_cost.render(results)
    row = next(line for line in text.splitlines() if line.startswith("| cleanrl ("))
    assert row.endswith("| **no** (median; pairs on both sides) | +4.5% (+4.0…+6.0%) |")
    quiet = next(line for line in text.splitlines() if line.startswith("- On the quiet machine"))
    assert "spread by 5.0%" in quiet  # cleanrl's plain 22/20 - 1 = 10%, cleanrl_dqn's 0%: median 5%
    assert "the pairs of 1 of 2 scripts fall on both sides of 3%" in quiet
    # three pairs all on one side: each lies above the median with probability 1/2, so 1 - 2/8 = 75%
    assert "A script whose 3 pairs all fall on one side of 3% has its median pair on that side at 75% confidence" in quiet
    loaded = next(line for line in text.splitlines() if line.startswith("- With load 1"))
    assert "every script's pairs agree on its verdict" in loaded


def test_the_confidence_of_a_one_sided_verdict_grows_with_the_pairs() -> None:
    assert command_cost._confidence(3) == 0.75
    assert round(command_cost._confidence(6), 4) == 0.9688
    assert command_cost._verdict([0.01, 0.02, 0.029]) == "yes"
    assert command_cost._verdict([0.031, 0.05, 0.04]) == "**no**"
    assert command_cost._verdict([0.01, 0.02, 0.05]) == "yes (median; pairs on both sides)"


def test_the_report_says_how_the_profiled_runs_sampled_iterations() -> None:
    results = _results()
    assert "sampling" not in command_cost.render(results)  # saved before the harness recorded it: nothing claimed
    results["_meta"]["sample_every"] = 8
    assert "default sampling: from the 512th iteration on one in 8 is attributed" in command_cost.render(results)
    results["_meta"]["sample_every"] = 1
    assert "attributing every iteration" in command_cost.render(results)


def test_every_accuracy_script_has_a_twenty_second_budget() -> None:
    assert set(command_cost.BUDGETS) == set(accuracy.SCRIPTS)


def test_the_harnesses_keep_sb3s_log_folders_in_one_scratch_folder(monkeypatch, tmp_path) -> None:
    # SB3 makes tempdir/SB3-<time> at every learn() unless SB3_LOGDIR names a folder: the harnesses run its scripts
    # dozens of times, and left as many empty folders in /tmp
    import os

    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "mine"))
    with accuracy.sb3_logs_in_scratch():
        scratch = Path(os.environ["SB3_LOGDIR"])
        assert scratch.is_dir() and scratch != tmp_path / "mine"
        (scratch / "SB3-2026-11-27").mkdir()
    assert not scratch.exists() and os.environ["SB3_LOGDIR"] == str(tmp_path / "mine")
    monkeypatch.delenv("SB3_LOGDIR")
    with accuracy.sb3_logs_in_scratch():
        pass
    assert "SB3_LOGDIR" not in os.environ


def test_side_by_side_runs_start_together_and_each_keeps_its_own_times(tmp_path) -> None:
    # a sleeper (wall, no CPU) and a spinner (CPU): run at once, the pair takes about the longer one, not the sum,
    # and each side's CPU seconds are its own
    sleeper = [sys.executable, "-c", "import time; time.sleep(1.0)"]
    spinner = [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"]
    t0 = time.perf_counter()
    times = command_cost.run_together({"plain": sleeper, "command": spinner}, tmp_path)
    elapsed = time.perf_counter() - t0
    assert set(times) == {"plain", "command"}
    assert times["plain"]["wall"] >= 1.0 and times["command"]["wall"] >= 0.6
    assert elapsed < times["plain"]["wall"] + times["command"]["wall"]  # at once, not one after the other
    assert times["plain"]["cpu"] < 0.5 <= times["command"]["cpu"]  # (each its own: the spinner's 0.6 s not in both)
    assert (tmp_path / "plain.log").is_file() and (tmp_path / "command.log").is_file()


def test_a_failing_side_by_side_run_raises_and_leaves_no_process(tmp_path) -> None:
    marker = tmp_path / "ended"
    waits = [sys.executable, "-c", f"import pathlib, time; time.sleep(0.5); pathlib.Path({str(marker)!r}).touch()"]
    fails = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(subprocess.CalledProcessError) as exc:
        command_cost.run_together({"plain": waits, "command": fails}, tmp_path)
    assert exc.value.returncode == 3 and exc.value.cmd == fails
    assert marker.exists()  # the other side ran to its end


def test_the_side_by_side_state_has_its_own_section_and_verdicts() -> None:
    results = _results()
    results["together"] = {
        "_trivial": _pairs([1.5, 1.5, 1.5], [1.6, 1.6, 1.7]),
        "cleanrl": _pairs([20.0, 20.0, 20.0], [20.2, 20.3, 20.1]),  # +1.0%, +1.5%, +0.5%
        "cleanrl_dqn": _pairs([20.0, 20.0, 20.0], [20.8, 20.9, 20.4]),  # +4.0%, +4.5%, +2.0%: both sides
    }
    text = command_cost.render(results)
    assert "## Side by side: each pair's two runs at once" in text and "`os.wait4`" in text
    section = text.split("## Side by side")[1].split("## What this means")[0]
    assert "| **no** (median; pairs on both sides) |" in section and "| yes |" in section
    assert "added **+0.10 s**" in section
    side = next(line for line in text.splitlines() if line.startswith("- Side by side:"))
    assert "the worst script is **cleanrl_dqn, +4.0%**; 1 of 2 scripts are over 3%" in side


def test_the_harness_measures_the_side_by_side_state_after_the_loads(monkeypatch, tmp_path) -> None:
    seen: list[tuple[str, list[str]]] = []

    def together(cmds, rounds, tmp):
        seen.append((Path(cmds["plain"][1]).stem, cmds["command"][3:5]))
        return {side: [{"wall": 1.0, "cpu": 1.0}] * rounds for side in cmds}

    monkeypatch.setattr(command_cost, "_together", together)
    ident = {"commit": "a" * 40, "code": {}, "dirty": False, "machine": "m1"}
    monkeypatch.setattr(checkpoint, "identity", lambda settings: {**ident, "settings": settings})
    monkeypatch.setattr(
        command_cost, "environment", lambda: {"machine": {"id": "m1"}, "software": {}, "packages": {}, "install": "x"}
    )
    report = tmp_path / "cost.md"
    args = ["--scripts", "cleanrl", "--rounds", "2", "--trivial-rounds", "1", "--loads", "--side-by-side"]
    assert command_cost.main([*args, "--report", str(report)]) == 0
    assert seen == [("imports_only", ["profile", "--quiet"]), ("cleanrl_ppo", ["profile", "--quiet"])]
    text = report.read_text()
    assert "## Side by side" in text and "## Quiet machine" not in text
    with pytest.raises(SystemExit) as exc:
        command_cost.main(["--loads", "--report", str(report)])
    assert exc.value.code == 2

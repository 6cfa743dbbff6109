"""The measuring harnesses keep every finished measurement on disk: an interrupted run goes on where it stopped, and
a partial run of other code, another machine or other options is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlbench.suites.scripts import accuracy, checkpoint, command_cost

IDENT = {"commit": "a" * 40, "code": {"rlbench": "1", "suites": "2", "pyproject.toml": "3"}, "dirty": False, "machine": "m1"}


def _fake_runs(monkeypatch: pytest.MonkeyPatch, interrupt_at: int | None) -> list[str]:
    """The command-cost harness with every timed process replaced: each run records its script and returns 1 s
    (plain) or 1.02 s (command); the ``interrupt_at``-th run raises KeyboardInterrupt."""
    calls: list[str] = []

    def run(side: str):
        def timed(script: Path, args: list[str], *rest: object) -> dict[str, float]:
            calls.append(f"{side}:{Path(script).stem}")
            if interrupt_at is not None and len(calls) == interrupt_at:
                raise KeyboardInterrupt
            wall = 1.0 if side == "plain" else 1.02
            return {"wall": wall, "cpu": wall}

        return timed

    monkeypatch.setattr(command_cost, "run_plain", run("plain"))
    monkeypatch.setattr(command_cost, "run_command", run("command"))
    monkeypatch.setattr(checkpoint, "identity", lambda settings: {**IDENT, "settings": settings})
    monkeypatch.setattr(
        command_cost, "environment", lambda: {"machine": {"id": "m1"}, "software": {}, "packages": {}, "install": "x"}
    )
    return calls


ARGS = ["--scripts", "cleanrl,cleanrl_dqn", "--rounds", "2", "--trivial-rounds", "1", "--loads", "0"]


def test_an_interrupted_run_keeps_what_it_measured_and_the_next_goes_on_from_there(monkeypatch, tmp_path, capsys) -> None:
    report = tmp_path / "cost.md"
    calls = _fake_runs(monkeypatch, interrupt_at=7)  # trivial: 2 runs; cleanrl: 4; the 7th is cleanrl_dqn's first
    code = command_cost.main([*ARGS, "--report", str(report)])
    assert code == 130
    err = capsys.readouterr().err
    assert f"2 measurements kept in {tmp_path / 'cost.partial.json'}" in err and "again to go on" in err
    saved = json.loads((tmp_path / "cost.partial.json").read_text())
    assert set(saved["results"]["load0"]) == {"_trivial", "cleanrl"}  # cleanrl_dqn was cut: not kept half-measured
    assert not report.exists()

    calls = _fake_runs(monkeypatch, interrupt_at=None)
    assert command_cost.main([*ARGS, "--report", str(report)]) == 0
    assert "going on from" in capsys.readouterr().err
    assert calls == ["plain:cleanrl_dqn", "command:cleanrl_dqn", "command:cleanrl_dqn", "plain:cleanrl_dqn"]
    text = report.read_text()
    assert "over 2 invocations on this machine" in text and "`aaaaaaa`" in text
    assert "| cleanrl (" in text and "| cleanrl_dqn (" in text
    assert not (tmp_path / "cost.partial.json").exists()  # the report is written: the partial file has served
    assert json.loads(report.with_suffix(".json").read_text())["_meta"]["invocations"] == 2


def test_a_partial_run_of_other_options_or_code_is_refused_and_restart_discards_it(monkeypatch, tmp_path, capsys) -> None:
    report = tmp_path / "cost.md"
    _fake_runs(monkeypatch, interrupt_at=3)
    assert command_cost.main([*ARGS, "--report", str(report)]) == 130
    capsys.readouterr()
    # other options
    _fake_runs(monkeypatch, interrupt_at=None)
    assert command_cost.main([*ARGS[:-1], "1", "--report", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other options" in err[0] and "--restart" in err[0]
    # other code
    monkeypatch.setattr(
        checkpoint, "identity", lambda s: {**IDENT, "code": {**IDENT["code"], "rlbench": "changed"}, "settings": s}
    )
    assert command_cost.main([*ARGS, "--report", str(report)]) == 2
    assert "rlbench changed since" in capsys.readouterr().err
    # a torn or foreign file
    (tmp_path / "cost.partial.json").write_text("{not json")
    _fake_runs(monkeypatch, interrupt_at=None)
    assert command_cost.main([*ARGS, "--report", str(report)]) == 2
    assert "is not a harness checkpoint" in capsys.readouterr().err
    # --restart measures everything again
    calls = _fake_runs(monkeypatch, interrupt_at=None)
    assert command_cost.main([*ARGS, "--report", str(report), "--restart"]) == 0
    assert len(calls) == 2 + 4 + 4 and "in that one invocation" in report.read_text()


@pytest.mark.parametrize(
    ("saved", "now", "why"),
    [
        ({**IDENT, "settings": {}}, {**IDENT, "settings": {}}, None),
        ({**IDENT, "commit": "b" * 40, "settings": {}}, {**IDENT, "settings": {}}, None),  # docs committed between
        ({**IDENT, "settings": {}}, {**IDENT, "dirty": True, "settings": {}}, "uncommitted changes"),
        ({**IDENT, "dirty": True, "settings": {}}, {**IDENT, "settings": {}}, "uncommitted changes"),
        ({**IDENT, "settings": {}}, {**IDENT, "machine": "m2", "settings": {}}, "machine m1, this is m2"),
        ({**IDENT, "settings": {"rounds": 2}}, {**IDENT, "settings": {"rounds": 3}}, "other options"),
        (
            {**IDENT, "software": {"torch": "2.12.0"}, "settings": {}},
            {**IDENT, "software": {"torch": "2.13.0"}, "settings": {}},
            "other software (torch 2.12.0 -> 2.13.0)",
        ),
        ({**IDENT, "settings": {}}, {**IDENT, "code": None, "settings": {}}, "no git checkout"),
    ],
)
def test_only_the_same_code_machine_and_options_go_on(saved, now, why) -> None:
    got = checkpoint._mismatch(saved, now)
    assert (got is None) if why is None else (why in got)


def test_the_code_state_names_the_measured_trees_of_this_checkout() -> None:
    state = checkpoint.code_state()
    if state["code"] is None:
        pytest.skip("not a git checkout (an installed copy)")
    assert set(state["code"]) == set(checkpoint.CODE_PATHS)
    assert all(len(v) == 40 for v in state["code"].values()) and len(state["commit"]) == 40


def test_the_accuracy_harness_goes_on_from_its_checkpoint(monkeypatch, tmp_path) -> None:
    done: list[str] = []

    def fake(kind: str):
        def measured(*args: object, **kwargs: object) -> dict[str, str]:
            done.append(kind)
            if len(done) == stop_at:
                raise KeyboardInterrupt
            return {"kind": kind}

        return measured

    for fn in ("run_accuracy", "user_wait", "whole_run", "hooks_overhead", "fixed_cost"):
        monkeypatch.setattr(accuracy, fn, fake(fn))
    monkeypatch.setattr(accuracy.shutil, "which", lambda name: None)  # no valgrind: no instruction counts
    names, path = ["cleanrl", "sb3"], tmp_path / "acc.partial.json"
    stop_at = 4  # two rounds of accuracy for two scripts, then the first whole-command measurement: cut
    with pytest.raises(KeyboardInterrupt):
        accuracy.measure(names, 2, 1, 0, checkpoint.Checkpoint(path, {**IDENT, "settings": {}}))
    assert done == ["run_accuracy"] * 4
    stop_at = None
    done.clear()
    cp = checkpoint.Checkpoint(path, {**IDENT, "settings": {}})
    assert cp.kept == 3
    results = accuracy.measure(names, 2, 1, 0, cp)
    assert done == ["run_accuracy", "user_wait", "user_wait", "whole_run", "whole_run", "hooks_overhead", "hooks_overhead",
                    "fixed_cost"]  # fmt: skip
    assert [len(results[n]["accuracy"]) for n in names] == [2, 2]
    assert all({"command", "whole", "hooks"} <= set(results[n]) for n in names) and "_fixed" in results


def test_the_instruction_counts_run_with_one_thread_and_one_hash_seed(monkeypatch) -> None:
    # a random hash seed made two counts of one DQN build differ by tens of millions of instructions
    seen: dict[str, object] = {}

    class Done:
        returncode = 0
        stderr = "==1== I   refs:      11,455,915,116\n"

    def run(cmd, **kwargs):
        seen.update(cmd=cmd, env=kwargs["env"])
        return Done()

    monkeypatch.setattr(accuracy.subprocess, "run", run)
    count, _ = accuracy._child(Path("script.py"), [], hooked=False, valgrind=True)
    assert count == 11_455_915_116 and seen["cmd"][0] == "valgrind"
    env = seen["env"]
    assert env["PYTHONHASHSEED"] == "0" and env["OMP_NUM_THREADS"] == "1" and env["MKL_NUM_THREADS"] == "1"

"""The example user scripts in rlbench.suites.scripts run as plain programs, and their hand-instrumented copies train the same
way and write phase timings that add up."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import rlbench.suites.scripts

SCRIPTS_DIR = Path(rlbench.suites.scripts.__file__).parent
HAND_DIR = SCRIPTS_DIR / "hand"
FINAL_LINE = re.compile(r"^final: episodes=(\d+) mean_return_last10=(nan|-?\d+(?:\.\d+)?) global_step=(\d+)$")
LEAF_PHASES = (
    "env",
    "inference",
    "acting",
    "forward",
    "backward",
    "optimizer",
    "advantage",
    "transfer",
    "replay",
    "target",
    "target_update",
)
TINY = "1024"  # two rollouts/batches of 512 steps in the PPO scripts
OFF_POLICY_TINY = "650"  # 150 steps past learning_starts (500): every phase runs, a hard target update (every 100) too
OFF_POLICY = {"env", "acting", "replay", "target", "forward", "backward", "optimizer", "target_update"}

# script name -> (budget flag, library it needs, phases its hand copy books, {parent phase: the phases nested in it})
SCRIPTS = {
    "cleanrl_ppo": (
        "--total-timesteps",
        None,
        {"env", "inference", "forward", "backward", "optimizer", "advantage", "transfer"},
        {},
    ),
    "sb3_ppo": (
        "--total-timesteps",
        "stable_baselines3",
        {"env", "inference", "forward", "backward", "optimizer", "advantage", "collect", "train"},
        {"collect": ("env", "inference", "advantage"), "train": ("forward", "backward", "optimizer")},
    ),
    "torchrl_ppo": (
        "--total-frames",
        "torchrl",
        {"env", "inference", "forward", "backward", "optimizer", "advantage", "replay", "collect"},
        {"collect": ("env", "inference")},
    ),
    "cleanrl_dqn": ("--total-timesteps", None, OFF_POLICY, {}),
    "cleanrl_sac": ("--total-timesteps", None, OFF_POLICY, {}),
    "cleanrl_td3": ("--total-timesteps", None, OFF_POLICY, {}),
    "cleanrl_ppo_continuous": (
        "--total-timesteps",
        None,
        {"env", "acting", "advantage", "forward", "backward", "optimizer"},
        {},
    ),
    "sb3_dqn": (
        "--total-timesteps",
        "stable_baselines3",
        OFF_POLICY | {"collect", "train"},
        {"collect": ("env", "acting", "target_update"), "train": ("target", "forward", "backward", "optimizer")},
    ),
    "sb3_sac": (
        "--total-timesteps",
        "stable_baselines3",
        OFF_POLICY | {"collect", "train"},
        {"collect": ("env", "acting"), "train": ("target", "forward", "backward", "optimizer", "target_update")},
    ),
    "torchrl_dqn": (
        "--total-frames",
        "torchrl",
        {"env", "acting", "replay", "forward", "backward", "optimizer", "target_update", "collect"},
        {"collect": ("env", "acting")},
    ),
}
NEW_SCRIPTS = ["cleanrl_dqn", "cleanrl_sac", "cleanrl_td3", "cleanrl_ppo_continuous", "sb3_dqn", "sb3_sac", "torchrl_dqn"]


HARNESSES = {
    "__init__",
    "accuracy",
    "overhead",
    "fanout",
    "step_calibration",
    "loaded_calibration",
    "round_noise",
    "site_screenshot",
    "fault_examples",
    "command_cost",
    "hook_time",
    "checkpoint",
    "accuracy_roles",
    "follow_cost",
    "trace_png",
    "timers",
    "tracker_cost",
    "tracker_screenshot",
}  # not example scripts (checkpoint: the harnesses' saved numbers; hand/timers: the hand copies' timers)


def _script_files() -> list[Path]:
    return sorted(p for p in [*SCRIPTS_DIR.glob("*.py"), *HAND_DIR.glob("*.py")] if p.stem not in HARNESSES)


def _add_argument_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
    ]
    return [ast.dump(call) for call in calls]


def _budget(name: str) -> str:
    """The steps a script trains in the tests: the off-policy scripts (those with a target network) fewer."""
    return OFF_POLICY_TINY if "target_update" in SCRIPTS[name][2] else TINY


def _start(path: Path, flag: str, logs: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path, Path]:
    """Start ``python PATH FLAG BUDGET --seed 1`` (:func:`_budget`), its output going to files in ``logs`` (a script
    and its hand copy run side by side: each is mostly its imports, one process per core)."""
    out, err = logs / f"{path.parent.name}-{path.stem}.out", logs / f"{path.parent.name}-{path.stem}.err"
    with out.open("w") as o, err.open("w") as e:
        cmd = [sys.executable, str(path), flag, _budget(path.stem), "--seed", "1"]
        proc = subprocess.Popen(cmd, stdout=o, stderr=e, env=env)
    return proc, out, err


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _finish(path: Path, started: tuple[subprocess.Popen, Path, Path]) -> str:
    proc, out, err = started
    try:
        code = proc.wait(timeout=180)
    finally:
        _kill(proc)
    stdout, stderr = out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")
    assert code == 0, f"{path.name} failed:\n{stdout[-2000:]}\n{stderr[-4000:]}"
    lines = stdout.strip().splitlines()
    assert lines, f"{path.name} printed nothing; stderr:\n{stderr[-2000:]}"
    assert FINAL_LINE.match(lines[-1]), f"{path.name}: unexpected last line {lines[-1]!r}"
    return lines[-1]


# many-process scripts -> their arguments in the tests, and the roles (with the parts each times) their hand copy writes
ROLE_SCRIPTS = {
    "actor_learner_threads": (
        ["--total-timesteps", "700", "--learning-starts", "100"],
        {"actor": {"env", "acting", "wait"}, "main": {"wait", "replay", "target", "forward", "backward", "optimizer"}},
    ),
    "actor_learner_procs": (
        ["--total-timesteps", "400", "--learning-starts", "100"],
        {"actor": {"env", "acting", "wait"}, "main": {"wait", "replay", "target", "forward", "backward", "optimizer"}},
    ),
    "ddp_update": (
        ["--iterations", "2", "--num-steps", "16"],
        {f"rank-{r}": {"env", "acting", "forward", "backward", "optimizer", "collective"} for r in (0, 1)},
    ),
    "ray_actor_learner": (["--iterations", "2", "--steps", "32"], {"Actor": {"env", "acting"}, "main": {"wait"}}),
}


def test_every_script_has_a_hand_copy_with_the_same_flags() -> None:
    assert {p.stem for p in SCRIPTS_DIR.glob("*.py")} - HARNESSES == set(SCRIPTS) | set(ROLE_SCRIPTS)
    for name in [*SCRIPTS, *ROLE_SCRIPTS]:
        original, hand = SCRIPTS_DIR / f"{name}.py", HAND_DIR / f"{name}.py"
        assert hand.is_file(), f"no hand-instrumented copy of {name}"
        assert _add_argument_calls(original) == _add_argument_calls(hand), f"{name}: the hand copy's flags differ"


@pytest.mark.parametrize("path", _script_files(), ids=lambda p: str(p.relative_to(SCRIPTS_DIR)))
def test_scripts_do_not_import_rlbench(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert not any(n == "rlbench" or n.startswith("rlbench.") for n in names), f"{path.name} imports {names}"


def _check_script_and_hand_copy(name: str, tmp_path: Path) -> None:
    flag, library, phases, nested = SCRIPTS[name]
    if library is not None and importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} not installed")

    out = tmp_path / f"{name}.json"
    script, hand = SCRIPTS_DIR / f"{name}.py", HAND_DIR / f"{name}.py"
    started = _start(script, flag, tmp_path)
    try:
        hand_started = _start(hand, flag, tmp_path, env={**os.environ, "RLBENCH_HAND_OUT": str(out)})
    except BaseException:
        _kill(started[0])
        raise
    try:
        final = _finish(script, started)
    except BaseException:
        _kill(hand_started[0])
        raise
    hand_final = _finish(hand, hand_started)
    assert hand_final == final, "the hand copy trained differently from the script with the same seed"

    record = json.loads(out.read_text(encoding="utf-8"))
    assert record["script"] == name
    assert record["steps"] == int(FINAL_LINE.match(final).group(3)) >= int(_budget(name))
    loop_s, booked = record["loop_s"], record["phases"]
    assert loop_s > 0
    assert phases <= set(booked), f"missing phases: {sorted(phases - set(booked))}"
    assert all(seconds >= 0 for seconds in booked.values()), booked
    assert all(booked[p] > 0 for p in phases), f"a phase never ran: {booked}"
    assert sum(booked.get(p, 0.0) for p in LEAF_PHASES) <= loop_s
    for parent, children in nested.items():
        assert sum(booked[c] for c in children) <= booked[parent] + 1e-9, (parent, booked)
        assert booked[parent] <= loop_s


@pytest.mark.slow
def test_cleanrl_script_and_hand_copy(tmp_path: Path) -> None:
    _check_script_and_hand_copy("cleanrl_ppo", tmp_path)


@pytest.mark.slow  # imports and trains stable-baselines3 twice (seconds)
def test_sb3_script_and_hand_copy(tmp_path: Path) -> None:
    _check_script_and_hand_copy("sb3_ppo", tmp_path)


@pytest.mark.slow  # imports and trains torchrl twice (seconds)
def test_torchrl_script_and_hand_copy(tmp_path: Path) -> None:
    _check_script_and_hand_copy("torchrl_ppo", tmp_path)


@pytest.mark.slow  # trains each script twice (seconds; the SB3 and TorchRL ones import their library twice)
@pytest.mark.parametrize("name", NEW_SCRIPTS)
def test_off_policy_and_continuous_script_and_hand_copy(name: str, tmp_path: Path) -> None:
    _check_script_and_hand_copy(name, tmp_path)


@pytest.mark.slow  # each starts processes (spawned actors, two ranks, a Ray cluster) twice
@pytest.mark.parametrize("name", list(ROLE_SCRIPTS))
def test_many_process_script_and_hand_copy_write_every_roles_parts(name: str, tmp_path: Path) -> None:
    if name == "ray_actor_learner" and importlib.util.find_spec("ray") is None:
        pytest.skip("ray not installed")
    args, roles = ROLE_SCRIPTS[name]
    launch = (
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"] if name == "ddp_update" else [sys.executable]
    )
    env = {**os.environ, "RLBENCH_HAND_OUT": str(tmp_path / "hand")}
    for path in (SCRIPTS_DIR / f"{name}.py", HAND_DIR / f"{name}.py"):
        done = subprocess.run([*launch, str(path), *args], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert done.returncode == 0, f"{path}: {done.stderr[-3000:]}"
        assert "final:" in done.stdout, done.stdout[-500:]
    written: dict[str, list[dict]] = {}
    for f in tmp_path.glob("hand.*.json"):
        data = json.loads(f.read_text(encoding="utf-8"))
        written.setdefault(data["role"], []).append(data)
    assert set(written) == set(roles), sorted(written)
    for role, parts in roles.items():
        for data in written[role]:
            assert data["loop_s"] > 0 and parts <= {k for k, v in data["phases"].items() if v > 0}, (role, data)
            assert sum(data["phases"].values()) <= data["loop_s"] * 1.001, (role, data)


def test_accuracy_roles_harness_covers_every_many_process_script() -> None:
    from rlbench.suites.scripts import accuracy_roles

    files = {next(c for c in cfg["command"] if c.endswith(".py")) for cfg in accuracy_roles.SHAPES.values()}
    assert {f"{name}.py" for name in ROLE_SCRIPTS} <= files


def test_accuracy_harness_covers_every_script() -> None:
    from rlbench.suites.scripts import accuracy

    files = {cfg["file"] for cfg in accuracy.SCRIPTS.values()}
    assert files == {f"{name}.py" for name in SCRIPTS}
    for name, cfg in accuracy.SCRIPTS.items():
        assert set(cfg["top"]) <= set(cfg["map"]), name
        assert name in accuracy.INSTRUCTION_BUDGETS and name in accuracy.OVERHEAD_ARGS, name
        assert accuracy.INSTRUCTION_BUDGETS[name][0] == cfg["args"][0] == accuracy.OVERHEAD_ARGS[name][0], name


def test_accuracy_report_says_what_the_profile_sampled() -> None:
    from rlbench.suites.scripts import accuracy

    def rounds(*sampled):
        return [{"sampled": s} for s in sampled]

    line = accuracy._sampled_line(
        rounds({"attributed": 400, "steady": 3000, "every": 8}, {"attributed": 390, "steady": 3000, "every": 8})
    )
    assert "in 2 of 2 rounds" in line and "one in 8" in line and "400 of 3,000" in line and "13.0–13.3%" in line
    assert "512th" in line
    unsampled = accuracy._sampled_line(rounds(None, None))
    assert unsampled.startswith("Every iteration attributed in every round: sampling starts at the 512th")
    assert "before `rlbench profile` sampled" in accuracy._sampled_line([{}])  # a report saved before sampling
    assert "one in 8 is attributed" in accuracy._sampling_parts({"dqn": {"accuracy": rounds(None)}, "_meta": {}})
    assert accuracy._sampling_parts({"dqn": {"accuracy": [{}]}}) == ""


@pytest.mark.slow
def test_overhead_harness_interleaves_hooked_and_plain_iterations() -> None:
    from rlbench.suites.scripts.overhead import measure

    times = measure("full", 6144)  # 12 iterations: 3 warm-up, then on, off, off, on
    assert len(times["on"]) == 4 and len(times["off"]) == 4
    assert all(t > 0 for t in times["on"] + times["off"])
    # an off-policy loop, in blocks of 250 env steps after step 1,000: on, off, off (the last block has no end mark)
    times = measure("full", 2000, "cleanrl_dqn", clock="wall")  # wall time: torch's other threads and waits count
    assert len(times["on"]) == 1 and len(times["off"]) == 2
    assert all(t > 0 for t in times["on"] + times["off"])


@pytest.mark.slow
@pytest.mark.parametrize("script", ["sb3_dqn", "sb3_sac"])
def test_overhead_harness_toggles_the_hooks_inside_sb3_learn(script: str) -> None:
    from rlbench.suites.scripts.overhead import measure

    # SB3's own loop: a callback toggles at env steps 1,000 (on), 1,250 or 1,100 (off), ...
    phases: dict[str, float] = {}
    times = measure("full", 1300 if script == "sb3_dqn" else 1150, script, phases=phases)
    assert len(times["on"]) == 1 and len(times["off"]) == 0
    # the on-block was profiled as under `rlbench profile`: SB3's labels (installed mid-learn) and the hooks
    for phase in ("collect/env/step", "collect/replay/add", "train/replay/sample", "train/backward", "train/optimizer"):
        assert phases.get(phase, 0.0) > 0, (phase, phases)
    assert phases.get("train/target", 0.0) > 0  # DQN's TD target, SAC's target Q under no_grad


def test_overhead_harness_ratios_per_abba_quad() -> None:
    from rlbench.suites.scripts.overhead import quad_ratios

    # blocks in order on, off, off, on: a machine twice as slow during the second quad moves both of its sides
    times = {"on": [1.1, 1.1, 2.2, 2.2], "off": [1.0, 1.0, 2.0, 2.0, 1.0]}  # (a last off-block without its quad)
    assert [round(r, 6) for r in quad_ratios(times)] == [1.1, 1.1]


CLEANRL = ["cleanrl_ppo", "cleanrl_dqn", "cleanrl_sac", "cleanrl_td3", "cleanrl_ppo_continuous"]


@pytest.mark.slow  # trains each CleanRL-style script once, briefly
@pytest.mark.parametrize("name", CLEANRL)
def test_cleanrl_scripts_open_their_own_summary_writer_where_cleanrl_does(name: str, tmp_path: Path) -> None:
    """Behind --tensorboard-dir (the plain script imports no tensorboard): charts/SPS and each episode's return at
    global_step, read back with TensorBoard's own reader."""
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    flag = SCRIPTS[name][0]
    cmd = [sys.executable, str(SCRIPTS_DIR / f"{name}.py"), flag, _budget(name), "--seed", "1"]
    done = subprocess.run([*cmd, "--tensorboard-dir", str(tmp_path / "tb")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"charts/SPS", "charts/episodic_return"} <= tags, tags
    steps = [e.step for e in acc.Scalars("charts/SPS")]
    assert steps == sorted(steps) and 0 < steps[-1] <= int(_budget(name))

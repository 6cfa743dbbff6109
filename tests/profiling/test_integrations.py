"""The real libraries under `rlbench profile`: SB3's and TorchRL's loops labelled, CleanRL-style code unmodified."""

from __future__ import annotations

from pathlib import Path

import pytest
import rlbench.suites.scripts as scripts

from rlbench.results.store import read_records
from tests.cli.cli_helpers import run_cli

SCRIPTS = Path(scripts.__file__).parent


def _phases(store: Path) -> dict[str, float]:
    return {r.metric[len("time/") :]: r.samples[0] for r in read_records(store) if r.metric.startswith("time/")}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        (
            "cleanrl_ppo.py",
            ["--total-timesteps", "2048"],
            {"env/step", "inference", "transfer", "train/forward", "train/backward", "train/optimizer"},
        ),
        (
            "sb3_ppo.py",
            ["--total-timesteps", "1536"],
            {
                "collect",
                "collect/env/step",
                "collect/inference",
                "collect/advantage",
                "train",
                "train/forward",
                "train/backward",
                "train/optimizer",
            },
        ),
        (
            "torchrl_ppo.py",
            ["--total-frames", "2048"],
            {
                "collect",
                "collect/env/step",
                "collect/inference",
                "advantage",
                "replay/extend",
                "replay/sample",
                "train/loss",
                "train/backward",
                "train/optimizer",
            },
        ),
    ],
)
def test_library_scripts_are_profiled_unmodified(tmp_path: Path, script: str, args: list[str], expected: set[str]) -> None:
    proc = run_cli(
        ["profile", "--quiet", "--store", "st", "--", "python", str(SCRIPTS / script), *args], cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    phases = _phases(tmp_path / "st")
    assert expected <= set(phases), sorted(phases)
    assert all(phases[p] > 0 for p in expected), {p: phases[p] for p in expected}


@pytest.mark.slow
def test_sb3_callback_profiles_learn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from rlbench.profiling.sb3 import RlbenchCallback
    from rlbench.report.kinds import write_report

    monkeypatch.chdir(tmp_path)
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    cb = RlbenchCallback("sb3-ppo", store=tmp_path / "st", params={"n_envs": 2})
    model.learn(512, callback=cb)
    assert cb.records_path is not None and cb.records_path.is_file()
    records = read_records(cb.records_path)
    by = {r.metric: r for r in records}
    assert {"time/collect/env/step", "time/collect/inference", "time/train/backward", "time/train/optimizer"} <= set(by)
    assert by["env_steps"].meta["all_steps"] == 512
    assert all(r.benchmark == "sb3-ppo" and r.params["n_envs"] == 2 and r.seed == 0 for r in records)
    text = write_report(cb.records_path, tmp_path / "r.md")
    assert "`collect/env/step`" in text
    import torch

    assert torch.nn.Module.__call__.__name__ == "_wrapped_call_impl"  # the hooks are gone after learn()


def test_a_label_imported_by_name_is_put_back_and_a_second_session_labels_it_again() -> None:
    # SB3's algorithm modules import polyak_update by name: imported while profiling, they hold the label of
    # stable_baselines3.common.utils. Every copy gets its original back when the session ends, and the next session
    # in the process labels it for itself (it used to find the first session's label there, and book nothing).
    import subprocess
    import sys

    code = """
import sys
from rlbench.profiling.session import Session, Settings

assert "stable_baselines3" not in sys.modules
with Session(Settings(count_iteration=None, memory=False)) as first:
    import stable_baselines3.common.utils as utils
    import stable_baselines3.sac.sac as sac
    original = utils.polyak_update.__rlbench_wrapped__
    assert sac.polyak_update is utils.polyak_update  # the label, imported by name
assert sac.polyak_update is original and utils.polyak_update is original
with Session(Settings(count_iteration=None, memory=False)) as second:
    assert sac.polyak_update is not original and sac.polyak_update.__rlbench_wrapped__ is original
    sac.polyak_update([], [], 0.5)
assert sac.polyak_update is original
assert second.outcome.attribution.enters.get("train/target_update") == 1, second.outcome.attribution.enters
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


@pytest.mark.parametrize("libraries", [True, False])
def test_gymnasium_is_hooked_when_the_script_imports_it_and_never_imported_for_one_that_does_not(libraries: bool) -> None:
    # its import (20-30 ms after torch's) was rlbench's before the script started: paid by scripts without gymnasium,
    # and booked as the command's own work for those with it
    import subprocess
    import sys

    code = f"""
import sys
import torch
from rlbench.profiling.session import Session, Settings

assert "gymnasium" not in sys.modules
with Session(Settings(count_iteration=None, memory=False, libraries={libraries})):
    torch.nn.Linear(2, 2)(torch.zeros(1, 2))
assert "gymnasium" not in sys.modules
with Session(Settings(count_iteration=None, memory=False, libraries={libraries})) as s:
    import gymnasium as gym

    class Env(gym.Env):  # defined after the import: hooked as it is defined
        def step(self, action):
            return 0, 0.0, False, False, {{}}

    env = gym.make("CartPole-v1")  # gymnasium's own, imported by make
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
        Env().step(0)
assert "__rlbench_wrapped__" not in vars(type(env.unwrapped))["step"].__dict__
assert s.outcome.attribution.enters.get("env/step") == 6, s.outcome.attribution.enters
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]

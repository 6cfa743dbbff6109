"""Micro-benchmark groups through the real command, with a user's implementation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.core.devices import cuda_may_be_present
from tests.cli.cli_helpers import one_line_error, run_cli, run_cli_timing_imports, run_cli_together

pytestmark = pytest.mark.slow  # each test runs a micro-benchmark group in a subprocess (4-12 s)

USER_MODULE = """
import numpy as np
from rlbench.components.returns.gae import gae_numpy

def good(rewards, values, dones, last_value, gamma, lam):
    return gae_numpy(rewards, values, dones, last_value, gamma, lam)

def bad(rewards, values, dones, last_value, gamma, lam):
    out = gae_numpy(rewards, values, dones, last_value, gamma, lam)
    out[3, 1] += 0.5
    return out
"""


def test_gae_with_user_implementations(tmp_path: Path) -> None:
    (tmp_path / "myimpl.py").write_text(USER_MODULE)
    good = ["--impl", "myimpl:good", "--select", "user or numpy", "--max-time", "0.02", "--json", "--report", "gae.md"]
    # three independent runs at once (nothing here is judged on its timings): two refused, one measured
    bad, missing, proc = run_cli_together(
        [["run", "gae", "--impl", "myimpl:bad"], ["run", "gae", "--impl", "nosuchmodule:f"], ["run", "gae", *good]],
        tmp_path,
        timeout=300,
    )
    assert bad.returncode == 2
    err = one_line_error(bad)
    assert "differs from the reference by up to 0.5 at [t=3, i=1]" in err and "not timed" in err
    assert missing.returncode == 2
    assert proc.returncode == 0, proc.stderr
    cases = json.loads(proc.stdout)["cases"]
    impls = {c["impl"] for c in cases}
    assert impls == {"user:good", "numpy"}
    assert {c["size"] for c in cases} == {"128x8", "2048x64", "1024x1024"}
    report = (tmp_path / "gae.md").read_text()
    assert "`user:good`" in report and "★" in report and (tmp_path / "gae-gae-call.png").is_file()
    # re-rendered from the stored records alone
    again = run_cli(["report", str(tmp_path / json.loads(proc.stdout)["records"]), "-o", "-"], tmp_path)
    assert again.returncode == 0 and "`user:good`" in again.stdout


BUFFER_MODULE = """
import numpy as np
from rlbench.components.replay import UniformReplayBuffer

class Good(UniformReplayBuffer):
    pass

class Mixed(UniformReplayBuffer):  # rewards of other rows: fields do not belong together
    def sample(self, batch_size):
        out = dict(super().sample(batch_size))
        out["reward"] = np.roll(np.asarray(out["reward"]), 1)
        return out

class Skewed(UniformReplayBuffer):  # the newer of two uniform draws: stored rows, but not uniform
    def sample(self, batch_size):
        a, b = super().sample(batch_size), super().sample(batch_size)
        newer = np.asarray(b["obs"])[:, 0] > np.asarray(a["obs"])[:, 0]
        return {k: np.where(newer.reshape(-1, *[1] * (np.ndim(a[k]) - 1)), b[k], a[k]) for k in a}
"""

ENV_MODULE = """
import gymnasium as gym

def good(env_id, num_envs):
    if env_id != "CartPole-v1":
        raise NotImplementedError(env_id)
    return gym.make_vec(env_id, num_envs, vectorization_mode="sync")

class Shifted(gym.vector.VectorWrapper):
    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        return obs, reward + 0.5, terminated, truncated, info

def bad(env_id, num_envs):
    return Shifted(gym.make_vec(env_id, num_envs, vectorization_mode="sync"))
"""


def test_buffers_with_user_implementations(tmp_path: Path) -> None:
    (tmp_path / "mybuf.py").write_text(BUFFER_MODULE)
    good = ["--impl", "mybuf:Good", "--select", "user and b256", "--max-time", "0.01", "--json"]
    # three independent runs at once (nothing here is judged on its timings): two refused, one measured
    mixed, skewed, proc = run_cli_together(
        [["run", "buffers", "--impl", "mybuf:Mixed"], ["run", "buffers", "--impl", "mybuf:Skewed"], ["run", "buffers", *good]],
        tmp_path,
        timeout=300,
    )
    err = one_line_error(mixed)
    assert "is not a stored transition" in err and "'reward'" in err and "not timed" in err
    err = one_line_error(skewed)
    assert "sampling is not uniform" in err and "chi-square" in err and "not timed" in err
    assert proc.returncode == 0, proc.stderr
    cases = json.loads(proc.stdout)["cases"]
    assert {c["impl"] for c in cases} == {"user:Good"} and {c["size"] for c in cases} == {"cap1e5-b256", "cap1e6-b256"}


def test_envs_with_user_implementations(tmp_path: Path) -> None:
    (tmp_path / "myenv.py").write_text(ENV_MODULE)
    good = ["--impl", "myenv:good", "--select", "user", "--max-time", "0.01", "--json"]
    # two independent runs at once (nothing here is judged on its timings): one refused, one measured
    bad, proc = run_cli_together([["run", "envs", "--impl", "myenv:bad"], ["run", "envs", *good]], tmp_path, timeout=300)
    err = one_line_error(bad)
    assert "on CartPole-v1: step 0 reward differs from gymnasium's" in err and "not timed" in err
    assert proc.returncode == 0, proc.stderr
    cases = json.loads(proc.stdout)["cases"]
    assert {(c["impl"], c["size"]) for c in cases} == {("user:good", f"N={n}") for n in (8, 64, 512)}


def test_a_micro_run_imports_torch_only_in_the_child_that_runs_the_benchmarks(tmp_path: Path) -> None:
    """The benchmarks run in a pytest child; rlbench's own process takes no device for them, so it does not import
    torch (2-3 s of CPU, and as long before the first benchmark), except on a machine that may have an NVIDIA GPU, whose
    name its records must carry (`rlbench.core.devices.cuda_may_be_present`)."""
    args = ["run", "gae", "--select", "numpy and T128xN8", "--max-time", "0.01", "--store", "st", "--quiet", "--json"]
    proc, imported = run_cli_timing_imports(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["cases"], proc.stdout  # the child imported torch and timed the case
    assert imported == cuda_may_be_present(), proc.stderr[-2000:]

"""The measuring build of the compiled hooks (``-DRLBENCH_HOOK_TIMING``) and ``rlbench.suites.scripts.hook_time``."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest
import rlbench.suites.scripts.hook_time as hook_time

import rlbench.profiling as profiling_pkg
from rlbench.profiling import autohooks

SCRIPT = """
import gymnasium as gym
import numpy as np
import torch


class Env(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, False, False, {}


net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
env = Env()
obs, _ = env.reset(seed=0)
for _ in range(40):
    with torch.no_grad():
        action = net(torch.as_tensor(obs)).argmax().item()
    obs, *_ = env.step(action)
"""


@pytest.fixture(scope="module")
def timing_build(tmp_path_factory: pytest.TempPathFactory):
    """The extension compiled with -DRLBENCH_HOOK_TIMING (and -O3, as the ordinary build), loaded beside the real one."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    out = tmp_path_factory.mktemp("timing")
    source = Path(profiling_pkg.__file__).parent / "_fastevent.c"
    ext = Extension("rlbench.profiling._fastevent", [str(source)], define_macros=[("RLBENCH_HOOK_TIMING", "1")])
    cmd = build_ext(Distribution({"name": "timing", "ext_modules": [ext]}))
    cmd.build_lib, cmd.build_temp = str(out / "lib"), str(out / "tmp")
    cmd.force = True  # compiled here, not copied from the package's own build
    cmd.ensure_finalized()
    cmd.run()
    (path,) = (out / "lib").rglob("_fastevent*.so")
    loader = importlib.machinery.ExtensionFileLoader("rlbench.profiling._fastevent", str(path))
    spec = importlib.util.spec_from_file_location("rlbench.profiling._fastevent", path, loader=loader)
    real = sys.modules.get(spec.name)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    finally:  # loading registered it under the real one's name: the package's own build stays the one imported
        if real is not None:
            sys.modules[spec.name] = real
    return module


def test_the_ordinary_build_has_no_timing(tmp_path: Path, capsys):
    assert autohooks._fastevent is not None and not hasattr(autohooks._fastevent, "HOOK_TIMING")
    assert hook_time.timing_module() is None
    script = tmp_path / "loop.py"
    script.write_text("pass\n", encoding="utf-8")
    assert hook_time.main([str(script)]) == 2  # one line that says how to build the measuring one
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "CPPFLAGS=-DRLBENCH_HOOK_TIMING" in err, err


@pytest.mark.slow
def test_hook_time_counts_every_hooked_call_of_a_known_loop(timing_build, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(autohooks, "_fastevent", timing_build)
    monkeypatch.delenv(autohooks.PURE_PYTHON_ENV, raising=False)
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT, encoding="utf-8")
    monkeypatch.setattr("sys.argv", ["x"])
    result = hook_time.measure(script, [])
    rows = {r["hook"]: r for r in result["rows"]}
    assert result["steps"] == 40, rows
    # per agent step: one env step at top level; the network's call (the Sequential, at top level) and its three
    # layers nested in it; one .item(), nested in no hook. (no_grad blocks: one a step, and the layers' initialisation)
    env = rows["env/step: Env.step"]
    assert env["calls_per_step"] == 1.0 and env["top_per_step"] == 1.0, rows
    assert rows["inference: no_grad.__enter__"]["calls_per_step"] >= 1.0
    module = rows["inference: Module._wrapped_call_impl"]
    assert module["calls_per_step"] == 4.0 and module["top_per_step"] == 1.0
    assert rows["transfer: item"]["calls_per_step"] == 1.0
    assert all(r["own_us_per_step"] > 0 for r in rows.values() if r["calls_per_step"] >= 1)
    # the first iterations' calls go to the Python wrapper (a module seen for the first time, memory marks); the
    # rest stay in C: they are counted, not lost
    assert 0 < module["python_per_step"] <= 0.25 and env["python_per_step"] <= 0.25, rows
    assert result["own_us_per_step"] == pytest.approx(sum(r["own_us_per_step"] for r in result["rows"]))
    assert result["calls_per_step"] == pytest.approx(sum(r["calls_per_step"] for r in result["rows"]))

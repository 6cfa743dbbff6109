"""Other libraries on the same machine: a clear message when they are missing, real runs when present."""

from __future__ import annotations

import importlib.util

import pytest
from rlbench.suites.external import SB3SACConfig, run_sb3_sac

from rlbench.core.errors import UsageError
from rlbench.run.registry import RunContext


def test_missing_stable_baselines3_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "stable_baselines3" else real(name, *a))
    with pytest.raises(UsageError, match="pip install stable-baselines3"):
        SB3SACConfig().validate()


@pytest.mark.slow  # trains SB3's SAC (seconds)
@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason="stable-baselines3 not installed")
def test_sb3_sac_runs_and_reports_sps() -> None:
    import torch

    config = SB3SACConfig(total_steps=300, learning_starts=200, batch_size=32, hidden=(16,), eval_episodes=1)
    metrics = {m.name: m for m in run_sb3_sac(config, RunContext(torch.device("cpu")))}
    assert metrics["sps"].samples[0] > 0 and metrics["sps"].meta["library"].startswith("stable-baselines3")
    assert len(metrics["eval_return"].samples) == 1

"""rlbench's own PPO and SAC as a peer: the built-in benchmarks' training, reported like the other libraries.

The run is exactly ``ppo-cartpole`` / ``sac-pendulum`` with the peers' setting (its phase timers stay on: their
measured overhead is part of rlbench's figure), so its phases come from rlbench's own timers, not from a profiled
pass.
"""

from __future__ import annotations

import bisect
from dataclasses import fields
from typing import Any

from rlbench.suites.peers.common import PeerRun, PeerSetting, start


def version() -> str | None:
    """rlbench's version (always installed)."""
    from importlib.metadata import version as dist_version

    return dist_version("rlbench")


def _config(cls: type, setting: PeerSetting) -> Any:
    names = {f.name for f in fields(cls)}
    values = {k: v for k, v in setting.hp.items() if k in names}
    values.update(
        env=setting.env,
        total_steps=setting.total_steps,
        seed=setting.seed,
        threads=setting.threads,
        eval_episodes=setting.eval_episodes,
        device="cpu",
    )
    return cls(**values)


def _peer_run(result: Any) -> PeerRun:
    ends = [it.env_steps for it in result.iterations]
    elapsed = [it.elapsed_s for it in result.iterations]
    # an episode's time is the end of the logged iteration it finished in (the loop checks returns there)
    seconds = [
        elapsed[min(bisect.bisect_left(ends, s), len(elapsed) - 1)] if elapsed else float("nan")
        for s in result.episode_end_steps
    ]
    return PeerRun(
        library=f"rlbench {version()}",
        env_steps=int(result.env_steps),
        init_s=result.init_s,
        train_s=result.train_s,
        eval_s=result.eval_s,
        eval_returns=[float(r) for r in result.eval_returns],
        episode_returns=[float(r) for r in result.episode_returns],
        episode_end_steps=[int(s) for s in result.episode_end_steps],
        episode_end_s=seconds,
        phase_s={k: v for k, v in result.phase_s.items() if k in result.phase_layers or k == "warmup"},
        phase_layers={**result.phase_layers, "warmup": "other"},
    )


def run_ppo(setting: PeerSetting) -> PeerRun:
    """``ppo-cartpole`` with ``setting``."""
    import torch

    from rlbench.algos.ppo.config import PPOConfig
    from rlbench.algos.ppo.train import train_ppo

    start(setting)
    return _peer_run(train_ppo(_config(PPOConfig, setting), torch.device("cpu")))


def run_sac(setting: PeerSetting) -> PeerRun:
    """``sac-pendulum`` with ``setting``."""
    import torch

    from rlbench.algos.offpolicy.config import SACConfig
    from rlbench.algos.offpolicy.train import train_offpolicy

    start(setting)
    result = train_offpolicy(_config(SACConfig, setting), torch.device("cpu"))
    run = _peer_run(result)
    if result.precision == "bf16":
        run.notes.append(
            "rlbench's update ran its 256-wide matrix products in bf16 with fp32 accumulation (`--precision auto` on a "
            "CPU with AVX512-BF16 or AMX); weights, losses and Adam stay fp32. The other implementations run fp32"
        )
    return run

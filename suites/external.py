"""Other libraries' implementations on the same machine, for side-by-side figures: ``sb3-sac-pendulum``.

The rlox report and the issues quote Stable-Baselines3's SAC SPS measured elsewhere; this runs SB3's SAC with
the setting of ``sac-pendulum`` (Pendulum-v1, batch 256, 256x256 MLPs, one update per step, automatic entropy,
same learning rate and thread count) so that the comparison is a ratio measured here, run after run.
Stable-Baselines3 is not a dependency of rlbench: ``pip install stable-baselines3`` to run it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rlbench.errors import UsageError
from rlbench.metrics import ENV_STEPS, EVAL_RETURN, EVAL_S, INIT_S, SPS, TRAIN_S, WALL_S, Metric
from rlbench.options import option
from rlbench.registry import BenchmarkSpec, RunContext


@dataclass
class SB3SACConfig:
    """Stable-Baselines3 SAC with sac-pendulum's setting."""

    env: str = option("gymnasium env id with continuous actions", default="Pendulum-v1")
    total_steps: int = option("agent steps to train for", default=5_000)
    learning_starts: int = option("random steps before the first update", default=1_000)
    batch_size: int = option("transitions per gradient update", default=256)
    hidden: tuple[int, ...] = option("hidden layer sizes of actor and critics", default=(256, 256))
    lr: float = option("Adam learning rate (actor, critics, entropy)", default=1e-3)
    threads: int = option("torch intra-op threads (2, as sac-pendulum and torch's own default here)", default=2)
    seed: int = option("random seed", default=0)
    device: str = option("torch device: auto, cpu, cuda[:N] or mps", default="auto")
    eval_episodes: int = option("deterministic evaluation episodes after training", default=10)

    def validate(self) -> None:
        """Check values.

        Raises:
            UsageError: On a non-positive size or a missing stable-baselines3.
        """
        for name in ("total_steps", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        import importlib.util

        if importlib.util.find_spec("stable_baselines3") is None:
            raise UsageError("sb3-sac-pendulum needs Stable-Baselines3: pip install stable-baselines3")


class _SB3Policy:
    def __init__(self, model: Any) -> None:
        self.model = model

    def act_deterministic(self, obs: Any) -> Any:
        return self.model.predict(obs, deterministic=True)[0]


def run_sb3_sac(config: SB3SACConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: build SB3's SAC, time ``learn``, evaluate deterministically like rlbench's runs."""
    import stable_baselines3
    import torch
    from stable_baselines3 import SAC

    from rlbench.algos.scaffold import evaluate_policy

    torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    kwargs = {
        "learning_rate": config.lr,
        "buffer_size": 1_000_000,
        "learning_starts": config.learning_starts,
        "batch_size": config.batch_size,
        "tau": 0.005,
        "gamma": 0.99,
        "train_freq": 1,
        "gradient_steps": 1,
        "ent_coef": "auto",
        "policy_kwargs": {"net_arch": list(config.hidden)},
    }
    model = SAC("MlpPolicy", config.env, seed=config.seed, device=str(ctx.device), verbose=0, **kwargs)
    t1 = time.perf_counter()
    model.learn(total_timesteps=config.total_steps)
    t2 = time.perf_counter()
    returns = evaluate_policy(_SB3Policy(model), config.env, config.eval_episodes, config.seed + 10_000)
    t3 = time.perf_counter()
    lib = {"library": f"stable-baselines3 {stable_baselines3.__version__}"}
    return [
        Metric(SPS, "steps/s", "higher", [config.total_steps / (t2 - t1)], meta={**lib, "synchronized": False}),
        Metric(INIT_S, "s", "lower", [t1 - t0]),
        Metric(TRAIN_S, "s", "lower", [t2 - t1]),
        Metric(EVAL_S, "s", "lower", [t3 - t2]),
        Metric(WALL_S, "s", "lower", [t3 - t0]),
        Metric(ENV_STEPS, "steps", "none", [float(config.total_steps)]),
        Metric(EVAL_RETURN, "return", "higher", [float(v) for v in returns]),
    ]


BENCHMARKS = [
    BenchmarkSpec(
        name="sb3-sac-pendulum",
        summary="Stable-Baselines3's SAC with sac-pendulum's setting, for same-machine ratios (needs stable-baselines3)",
        config_factory=SB3SACConfig,
        run=run_sb3_sac,
        version=1,
        report="external",
    )
]

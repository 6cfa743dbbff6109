"""Other libraries' implementations on the same machine, for side-by-side figures: ``sb3-sac-pendulum``.

The rlox report and the issues quote Stable-Baselines3's SAC SPS measured elsewhere; this runs SB3's SAC with
the setting of ``sac-pendulum`` (Pendulum-v1, batch 256, 256x256 MLPs, one update per step, automatic entropy,
same learning rate and thread count) so that the comparison is a ratio measured here, run after run.
Stable-Baselines3 is not a dependency of rlbench: ``pip install stable-baselines3`` to run it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option
from rlbench.results.metrics import ENV_STEPS, EVAL_RETURN, EVAL_S, INIT_S, SPS, TRAIN_S, WALL_S, Metric
from rlbench.run.registry import BenchmarkSpec, RunContext


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
        check_choices(self)  # any field that declares its values (none today)
        for name in ("total_steps", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        import importlib.util

        if importlib.util.find_spec("stable_baselines3") is None:
            raise UsageError("sb3-sac-pendulum needs Stable-Baselines3: pip install stable-baselines3")


def run_sb3_sac(config: SB3SACConfig, ctx: RunContext) -> list[Metric]:
    """One repeat: SB3's SAC through the peers' runner (:mod:`rlbench.suites.peers.sb3_peer`), timed apart."""
    from rlbench.suites.peers.common import PeerSetting
    from rlbench.suites.peers.sb3_peer import run_sac

    hp = {
        "learning_starts": config.learning_starts,
        "batch_size": config.batch_size,
        "hidden": config.hidden,
        "critic_lr": config.lr,
        "actor_lr": config.lr,
        "alpha_lr": config.lr,
    }
    setting = PeerSetting(
        "sac", config.env, config.total_steps, config.seed, config.threads, config.eval_episodes, hp, str(ctx.device)
    )
    run = run_sac(setting)
    lib = {"library": run.library}
    return [
        Metric(SPS, "steps/s", "higher", [run.env_steps / run.train_s], meta={**lib, "synchronized": False}),
        Metric(INIT_S, "s", "lower", [run.init_s]),
        Metric(TRAIN_S, "s", "lower", [run.train_s]),
        Metric(EVAL_S, "s", "lower", [run.eval_s]),
        Metric(WALL_S, "s", "lower", [run.init_s + run.train_s + run.eval_s]),
        Metric(ENV_STEPS, "steps", "none", [float(run.env_steps)]),
        Metric(EVAL_RETURN, "return", "higher", run.eval_returns),
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

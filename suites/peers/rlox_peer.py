"""rlox's own PPO and SAC, driven through ``rlox.Trainer`` with the built-in setting's hyperparameters.

PPO (``Trainer("ppo", ...)``, i.e. ``rlox.algorithms.PPO``): rlox's ``DiscretePolicy`` (separate actor and critic,
two tanh layers, orthogonal init with gains sqrt(2) / 0.01 / 1), Adam with eps 1e-5, its ``RolloutCollector`` and
Rust GAE, ``PPOLoss``. Departures from the setting, each also written to ``PeerRun.notes`` when it applies:

- for CartPole-v1 rlox steps its own Rust CartPole (``rlox.VecEnv``, stepped on a Rayon thread pool that
  ``torch.set_num_threads`` does not govern), not gymnasium's;
- it trains whole rollouts only, ``total_steps // (num_envs * rollout_steps)`` of them, so 50,000 becomes 49,152;
- rlox's defaults ``anneal_lr=True`` and ``clip_vloss=True`` are switched off to match the setting;
- the minibatch size is ``num_envs * rollout_steps // minibatches`` (rlox's ``batch_size``);
- its policy has two hidden layers of one width, tanh, orthogonal init and Adam eps 1e-5 built in (other
  ``hidden`` / ``activation`` / ``init`` / ``adam_eps`` values are noted, not honoured);
- training episodes are read from the collector after each rollout, so their end step is the rollout's last step.

SAC (``Trainer("sac", ...)``, i.e. ``rlox.algorithms.SAC``): its ``SquashedGaussianPolicy``, twin ``QNetwork``
critics (two ReLU layers of one width, PyTorch default init), Polyak targets, automatic entropy tuning, Rust
``ReplayBuffer``, uniform random actions for ``learning_starts`` steps and one update per step after that. rlox takes
one ``learning_rate`` for all optimizers: the actor's, critics' and temperature's rates and the initial temperature
are set afterwards on the trainer's public optimizers and ``log_alpha``. The gymnasium env rlox builds is wrapped in
``RecordEpisodeStatistics`` (and seeded: rlox resets it unseeded) so a callback can log finished episodes.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from rlbench.suites.peers.common import EpisodeLog, PeerRun, PeerSetting, evaluate, installed_version, start, training

_RUST_CARTPOLE = {"CartPole-v1", "CartPole"}  #: env ids rlox's PPO steps on its Rust ``VecEnv``


def version() -> str | None:
    """The installed rlox version, or ``None``."""
    return installed_version("rlox")


def _library() -> str:
    return f"rlox {version()}"


def _seed_all(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)


def _width(hidden: Any, notes: list[str], default: int) -> int:
    """The one hidden width rlox's networks take, noting when ``hidden`` is not two layers of one width."""
    sizes = tuple(int(h) for h in hidden) if isinstance(hidden, (tuple, list)) else (int(hidden),) * 2
    width = sizes[0] if sizes else default
    if sizes != (width, width):
        notes.append(f"rlox networks have two hidden layers of one width: ran ({width}, {width}), not {sizes}")
    return width


def run_ppo(setting: PeerSetting) -> PeerRun:
    """Train rlox's PPO with the setting and evaluate its greedy policy.

    Args:
        setting: The shared run setting; ``setting.hp`` holds rlbench's ``PPOConfig`` fields.

    Returns:
        The measured run.
    """

    from rlox import Trainer
    from rlox.callbacks import Callback
    from rlox.policies import DiscretePolicy

    hp = setting.hp
    notes = start(setting)
    num_envs = int(hp.get("num_envs", 8))
    rollout_steps = int(hp.get("rollout_steps", 128))
    minibatches = int(hp.get("minibatches", 2))
    rollout = num_envs * rollout_steps
    width = _width(hp.get("hidden", (64, 64)), notes, 64)
    if hp.get("activation", "tanh") != "tanh":
        notes.append(f"rlox's DiscretePolicy is tanh-only: ran tanh, not {hp.get('activation')}")
    if hp.get("init", "orthogonal") != "orthogonal":
        notes.append(f"rlox's DiscretePolicy always uses orthogonal init, not {hp.get('init')}")
    if float(hp.get("adam_eps", 1e-5)) != 1e-5:
        notes.append(f"rlox's PPO fixes Adam eps at 1e-5, not {hp.get('adam_eps')}")
    if hp.get("recompute_advantages", False):
        notes.append("rlox computes advantages once per rollout (recompute_advantages not honoured)")
    if setting.env in _RUST_CARTPOLE:
        notes.append("rlox steps its own Rust CartPole (rlox.VecEnv, Rayon threads), not gymnasium's")

    config: dict[str, Any] = {
        "n_envs": num_envs,
        "n_steps": rollout_steps,
        "n_epochs": int(hp.get("epochs", 4)),
        "batch_size": rollout // minibatches,
        "learning_rate": float(hp.get("lr", 2.5e-4)),
        "gamma": float(hp.get("gamma", 0.99)),
        "gae_lambda": float(hp.get("gae_lambda", 0.95)),
        "clip_eps": float(hp.get("clip_coef", 0.2)),
        "vf_coef": float(hp.get("vf_coef", 0.5)),
        "ent_coef": float(hp.get("ent_coef", 0.0)),
        "max_grad_norm": float(hp.get("max_grad_norm", 0.5)),
        "normalize_advantages": bool(hp.get("normalize_advantages", True)),
        "clip_vloss": False,
        "anneal_lr": False,
    }
    log = EpisodeLog()

    class _Episodes(Callback):
        """Counts collected rollouts and logs the episodes the collector finished in each."""

        def __init__(self) -> None:
            self.collector: Any = None
            self.rollouts = 0
            self.seen = 0

        def on_rollout_end(self, **kwargs: Any) -> None:
            self.rollouts += 1
            finished = self.collector.episode_rewards
            for ret in finished[self.seen :]:
                log.add(ret, self.rollouts * rollout)
            self.seen = len(finished)

    episodes = _Episodes()
    t0 = time.perf_counter()
    _seed_all(setting.seed)
    if width != 64:
        from rlox.utils import detect_env_spaces

        obs_dim, action_space, _ = detect_env_spaces(setting.env)
        config["policy"] = DiscretePolicy(obs_dim=obs_dim, n_actions=int(action_space.n), hidden=width)
    trainer = Trainer("ppo", env=setting.env, config=config, callbacks=[episodes], seed=setting.seed)
    episodes.collector = trainer.algo.collector
    init_s = time.perf_counter() - t0

    log.start()
    t0 = time.perf_counter()
    with training():
        trainer.train(total_timesteps=setting.total_steps)
    train_s = time.perf_counter() - t0

    env_steps = episodes.rollouts * rollout
    if env_steps != setting.total_steps:
        notes.append(
            f"rlox trains whole rollouts of {num_envs}x{rollout_steps}: {env_steps:,} agent steps, not {setting.total_steps:,}"
        )
    notes.append("training episodes are read per rollout: their end step is the end of the rollout they ended in")

    def act(obs: np.ndarray) -> np.ndarray:
        return trainer.predict(obs, deterministic=True).numpy().astype(np.int64)

    eval_returns, eval_s = evaluate(act, setting)
    run = PeerRun(_library(), env_steps, init_s, train_s, eval_s, eval_returns, notes=notes)
    return log.fill(run)


def run_sac(setting: PeerSetting) -> PeerRun:
    """Train rlox's SAC with the setting and evaluate its deterministic (squashed mean) policy.

    Args:
        setting: The shared run setting; ``setting.hp`` holds rlbench's ``SACConfig`` fields.

    Returns:
        The measured run.
    """
    import gymnasium as gym
    import torch
    from rlox import Trainer
    from rlox.callbacks import Callback

    hp = setting.hp
    notes = start(setting)
    num_envs = int(hp.get("num_envs", 1))
    width = _width(hp.get("hidden", (256, 256)), notes, 256)
    actor_lr = float(hp.get("actor_lr", 1e-3))
    critic_lr = float(hp.get("critic_lr", 1e-3))
    alpha_lr = float(hp.get("alpha_lr", 3e-4))
    init_alpha = float(hp.get("init_alpha", 1.0))
    autotune = bool(hp.get("autotune", True))
    updates_per_step = float(hp.get("updates_per_step", 1.0))
    train_freq, gradient_steps = 1, 1
    if updates_per_step >= 1:
        gradient_steps = round(updates_per_step)
    else:
        train_freq = round(1 / updates_per_step)
    if gradient_steps / train_freq != updates_per_step:
        notes.append(f"rlox updates {gradient_steps} time(s) every {train_freq} step(s), not {updates_per_step} per step")
    if num_envs > 1:
        notes.append("rlox's multi-env SAC (OffPolicyCollector) explores with Gaussian, not uniform, random actions")

    config: dict[str, Any] = {
        "buffer_size": int(hp.get("buffer_size", 1_000_000)),
        "learning_rate": critic_lr,
        "batch_size": int(hp.get("batch_size", 256)),
        "tau": float(hp.get("tau", 0.005)),
        "gamma": float(hp.get("gamma", 0.99)),
        "learning_starts": int(hp.get("learning_starts", 1_000)),
        "hidden": width,
        "train_freq": train_freq,
        "gradient_steps": gradient_steps,
        "auto_entropy": autotune,
        "target_entropy": None,  # rlox: -act_dim
        "n_envs": num_envs,
    }
    if not autotune:
        config["ent_coef"] = init_alpha
    log = EpisodeLog()

    class _Episodes(Callback):
        """Keeps rlox's step count and logs episodes as the wrapped env finishes them."""

        def __init__(self) -> None:
            self.steps = 0
            self.seen = 0

        def on_step(self, **kwargs: Any) -> bool:
            self.steps = int(kwargs["step"])
            env = kwargs["algo"].env
            if env.episode_count > self.seen:
                log.add(env.return_queue[-1], self.steps)
                self.seen = env.episode_count
            return True

    episodes = _Episodes()
    t0 = time.perf_counter()
    _seed_all(setting.seed)
    trainer = Trainer("sac", env=setting.env, config=config, callbacks=[episodes], seed=setting.seed)
    algo = trainer.algo
    algo.env = gym.wrappers.RecordEpisodeStatistics(algo.env)
    algo.env.reset(seed=setting.seed)
    algo.env.action_space.seed(setting.seed)
    for group in algo.actor_optimizer.param_groups:
        group["lr"] = actor_lr
    if autotune:
        for group in algo.alpha_optimizer.param_groups:
            group["lr"] = alpha_lr
        with torch.no_grad():
            algo.log_alpha.fill_(math.log(init_alpha))
        algo.alpha = init_alpha
    init_s = time.perf_counter() - t0
    if actor_lr != critic_lr or (autotune and alpha_lr != critic_lr) or (autotune and init_alpha != 1.0):
        notes.append("rlox takes one learning_rate: actor/alpha lr and initial alpha set on its optimizers and log_alpha")
    if num_envs > 1:
        notes.append("with num_envs > 1 rlox's collector keeps its own envs: training episodes are not logged")

    log.start()
    t0 = time.perf_counter()
    with training():
        trainer.train(total_timesteps=setting.total_steps)
    train_s = time.perf_counter() - t0

    env_steps = episodes.steps * num_envs
    if env_steps != setting.total_steps:
        notes.append(f"rlox took {env_steps:,} agent steps, not {setting.total_steps:,}")

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            mean = algo.actor.deterministic(torch.as_tensor(obs, dtype=torch.float32))
        return (mean * algo.act_high).numpy()

    eval_returns, eval_s = evaluate(act, setting)
    run = PeerRun(_library(), env_steps, init_s, train_s, eval_s, eval_returns, notes=notes)
    return log.fill(run)

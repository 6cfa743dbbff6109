"""Stable-Baselines3's PPO and SAC as peers: SB3's own ``learn()`` loop with the built-in benchmarks' setting.

PPO: ``make_vec_env`` (``DummyVecEnv`` of gymnasium's CartPole, ``Monitor``-wrapped), ``n_steps`` = rollout steps,
``batch_size`` = rollout / minibatches, tanh 64x64 with SB3's orthogonal init (the default), separate actor and
critic networks as in rlbench's and CleanRL's setting. SAC: one env, ``train_freq=1``, ``gradient_steps=1``,
``ent_coef="auto"`` (target entropy ``-act_dim``), one learning rate for actor, critics and temperature.
Finished training episodes come from the ``Monitor`` info SB3 passes its callbacks.
"""

from __future__ import annotations

import time
from typing import Any

from rlbench.suites.peers.common import EpisodeLog, PeerRun, PeerSetting, evaluate, installed_version, start, training


def version() -> str | None:
    """The installed stable-baselines3 version, or ``None``."""
    return installed_version("stable-baselines3")


def _episode_callback(log: EpisodeLog) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class _Episodes(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                ep = info.get("episode")
                if ep is not None:
                    log.add(float(ep["r"]), self.num_timesteps)
            return True

    return _Episodes()


def _train(model: Any, setting: PeerSetting, t_built: float, t0: float, notes: list[str]) -> PeerRun:
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(None, []))  # SB3's default makes an empty tempdir/SB3-<time> per learn(); log nowhere
    log = EpisodeLog()
    log.start()
    t1 = time.perf_counter()
    with training():
        model.learn(total_timesteps=setting.total_steps, callback=_episode_callback(log))
    train_s = time.perf_counter() - t1

    def act(obs: Any) -> Any:
        return model.predict(obs, deterministic=True)[0]

    returns, eval_s = evaluate(act, setting)
    run = PeerRun(
        library=f"stable-baselines3 {version()}",
        env_steps=int(model.num_timesteps),
        init_s=t_built - t0,
        train_s=train_s,
        eval_s=eval_s,
        eval_returns=returns,
        notes=notes,
    )
    return log.fill(run)


def run_ppo(setting: PeerSetting) -> PeerRun:
    """SB3's PPO with ``ppo-cartpole``'s setting."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    hp = setting.hp
    start(setting, cpu_only=False)
    t0 = time.perf_counter()
    num_envs, rollout = hp.get("num_envs", 8), hp.get("rollout_steps", 128)
    env = make_vec_env(setting.env, n_envs=num_envs, seed=setting.seed)
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[hp.get("activation", "tanh")]
    hidden = list(hp.get("hidden", (64, 64)))
    model = PPO(
        "MlpPolicy",
        env,
        learning_rate=hp.get("lr", 2.5e-4),
        n_steps=rollout,
        batch_size=num_envs * rollout // hp.get("minibatches", 2),
        n_epochs=hp.get("epochs", 4),
        gamma=hp.get("gamma", 0.99),
        gae_lambda=hp.get("gae_lambda", 0.95),
        clip_range=hp.get("clip_coef", 0.2),
        ent_coef=hp.get("ent_coef", 0.0),
        vf_coef=hp.get("vf_coef", 0.5),
        max_grad_norm=hp.get("max_grad_norm", 0.5),
        normalize_advantage=hp.get("normalize_advantages", True),
        policy_kwargs={
            "net_arch": {"pi": hidden, "vf": hidden},
            "activation_fn": activation,
            "optimizer_kwargs": {"eps": hp.get("adam_eps", 1e-5)},
        },
        seed=setting.seed,
        device=setting.device,
        verbose=0,
    )
    notes = ["SB3 steps gymnasium's CartPole through DummyVecEnv (rlbench steps its batched NumPy CartPole)"]
    return _train(model, setting, time.perf_counter(), t0, notes)


def run_sac(setting: PeerSetting) -> PeerRun:
    """SB3's SAC with ``sac-pendulum``'s setting."""
    from stable_baselines3 import SAC

    hp = setting.hp
    start(setting, cpu_only=False)
    t0 = time.perf_counter()
    lr = hp.get("critic_lr", 1e-3)
    model = SAC(
        "MlpPolicy",
        setting.env,
        learning_rate=lr,
        buffer_size=hp.get("buffer_size", 1_000_000),
        learning_starts=hp.get("learning_starts", 1_000),
        batch_size=hp.get("batch_size", 256),
        tau=hp.get("tau", 0.005),
        gamma=hp.get("gamma", 0.99),
        train_freq=1,
        gradient_steps=max(1, round(hp.get("updates_per_step", 1.0))),
        ent_coef="auto",
        policy_kwargs={"net_arch": list(hp.get("hidden", (256, 256)))},
        seed=setting.seed,
        device=setting.device,
        verbose=0,
    )
    notes = []
    if hp.get("actor_lr", lr) != lr or hp.get("alpha_lr", lr) != lr:
        notes.append(f"SB3 uses one learning rate ({lr}) for actor, critics and temperature")
    return _train(model, setting, time.perf_counter(), t0, notes)

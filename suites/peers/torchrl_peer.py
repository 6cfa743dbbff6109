"""TorchRL's PPO and SAC, written the way TorchRL's tutorials and sota-implementations put its components together.

PPO: ``SerialEnv`` of ``num_envs`` gymnasium ``GymEnv`` s with a ``RewardSum`` transform, a ``Collector`` (TorchRL
0.14's single-process collector, the former ``SyncDataCollector``) of ``num_envs * rollout_steps`` frames per batch,
``GAE`` once per batch (every epoch with ``recompute_advantages``, as TorchRL's sota PPO does), a
``ReplayBuffer(LazyTensorStorage)`` with ``SamplerWithoutReplacement`` handing out ``minibatches`` minibatches per
epoch, and ``ClipPPOLoss`` (no value clipping, per-minibatch advantage normalization) with Adam and gradient-norm
clipping. Actor (``ProbabilisticActor``, torch ``Categorical`` over integer actions) and critic (``ValueOperator``)
are separate ``MLP`` s with orthogonal init (gains sqrt(2), 0.01 on the policy head, 1 on the value head). The critic
loss is ``l2`` with ``critic_coeff = vf_coef / 2``: TorchRL's ``l2`` has no 1/2 factor, the setting's value loss
does. Departures, each also written to ``PeerRun.notes`` when it applies:

- the collector rounds ``total_steps`` up to whole batches: 50,000 becomes 50,176 agent steps;
- envs are stepped in process (``SerialEnv``): ``ParallelEnv`` would add worker processes the other peers do not have;
- training episodes are read from each batch's ``("next", "done")`` / ``("next", "episode_reward")`` in the training
  loop (that is how TorchRL users log them; its cost is inside ``train_s``).

SAC: ``GymEnv`` with ``RewardSum``, a ``Collector`` of ``num_envs`` frames per batch (one env step per iteration) with
``init_random_frames = learning_starts`` (uniform random actions from the action spec), ``ReplayBuffer(LazyTensorStorage)``
with random sampling, ``SACLoss`` (twin Q, ``l2``, TD(0) targets, learned alpha from ``init_alpha`` towards
``-act_dim``), ``SoftUpdate`` and one Adam per part (actor, critics, alpha) grouped as in TorchRL's sota SAC. The actor
is TorchRL's standard SAC head: an ``MLP`` to ``NormalParamExtractor`` (biased softplus scale, lower bound 0.1) and a
``TanhNormal`` over the action box. Updates are owed ``updates_per_step`` per agent step once ``learning_starts``
steps are stored, made after each collector iteration: one env step per batch keeps the setting's interleaving of
steps and updates, where TorchRL's sota SAC collects 1,000 frames between bursts of updates. Networks keep PyTorch's
default init.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rlbench.suites.peers.common import EpisodeLog, PeerRun, PeerSetting, evaluate, installed_version, start, training


def version() -> str | None:
    """The installed TorchRL version, or ``None``."""
    return installed_version("torchrl")


def _library() -> str:
    return f"torchrl {version()}"


def _quiet() -> None:
    """TorchRL logs INFO lines to stdout (storage initialized, ...), which would break ``--json``: warnings only."""
    import logging

    logging.getLogger("torchrl").setLevel(logging.WARNING)


def _make_env(env_id: str, num_envs: int, seed: int, **gym_kwargs: Any) -> Any:
    _quiet()
    """One ``GymEnv`` (``num_envs == 1``) or a ``SerialEnv`` of them, with a ``RewardSum`` transform, seeded."""
    from torchrl.envs import GymEnv, RewardSum, SerialEnv, TransformedEnv

    make = lambda: GymEnv(env_id, **gym_kwargs)
    env = TransformedEnv(make() if num_envs == 1 else SerialEnv(num_envs, make), RewardSum())
    env.set_seed(seed)
    return env


def _log_episodes(log: EpisodeLog, data: Any, frames_before: int) -> None:
    """Log the episodes that ended in one collector batch, in time order, at the agent step they ended.

    Args:
        log: Where to record them.
        data: The collector's batch, shaped ``[T]`` (one env) or ``[num_envs, T]``.
        frames_before: Agent steps taken before this batch.
    """
    done = data["next", "done"]
    if not done.any():
        return
    done = done.reshape(data.batch_size)
    returns = data["next", "episode_reward"].reshape(data.batch_size)
    if done.dim() == 1:
        done, returns = done.unsqueeze(0), returns.unsqueeze(0)
    envs = done.shape[0]
    env_idx, t_idx = done.nonzero(as_tuple=True)
    order = (t_idx * envs + env_idx).argsort()
    for i in order.tolist():
        log.add(float(returns[env_idx[i], t_idx[i]]), frames_before + (int(t_idx[i]) + 1) * envs)


def _mlp(in_features: int, out_features: int, hidden: Any, activation: str) -> Any:
    from torch import nn
    from torchrl.modules import MLP

    act = nn.Tanh if activation == "tanh" else nn.ReLU
    return MLP(in_features=in_features, out_features=out_features, num_cells=[int(h) for h in hidden], activation_class=act)


def _orthogonal(net: Any, head_gain: float) -> None:
    """Orthogonal init of every Linear layer (gain sqrt(2), zero bias), ``head_gain`` on the last one."""
    import torch
    from torch import nn

    layers = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(layers):
        nn.init.orthogonal_(layer.weight, gain=head_gain if i == len(layers) - 1 else float(np.sqrt(2)))
        with torch.no_grad():
            layer.bias.zero_()


def run_ppo(setting: PeerSetting) -> PeerRun:
    """Train PPO built from TorchRL's components with the setting and evaluate its greedy policy.

    Args:
        setting: The shared run setting; ``setting.hp`` holds rlbench's ``PPOConfig`` fields.

    Returns:
        The measured run.
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torch.distributions import Categorical
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    hp = setting.hp
    notes = start(setting)
    num_envs = int(hp.get("num_envs", 8))
    rollout_steps = int(hp.get("rollout_steps", 128))
    epochs = int(hp.get("epochs", 4))
    minibatches = int(hp.get("minibatches", 2))
    frames_per_batch = num_envs * rollout_steps
    hidden = hp.get("hidden", (64, 64))
    activation = str(hp.get("activation", "tanh"))
    max_grad_norm = float(hp.get("max_grad_norm", 0.5))
    recompute = bool(hp.get("recompute_advantages", False))
    log = EpisodeLog()

    t0 = time.perf_counter()
    torch.manual_seed(setting.seed)
    env = _make_env(setting.env, num_envs, setting.seed, categorical_action_encoding=True)
    obs_dim = int(env.observation_spec["observation"].shape[-1])
    n_actions = int(env.action_spec_unbatched.space.n)
    policy_net = _mlp(obs_dim, n_actions, hidden, activation)
    value_net = _mlp(obs_dim, 1, hidden, activation)
    if hp.get("init", "orthogonal") == "orthogonal":
        _orthogonal(policy_net, 0.01)
        _orthogonal(value_net, 1.0)
    actor = ProbabilisticActor(
        TensorDictModule(policy_net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        out_keys=["action"],
        spec=env.action_spec_unbatched,
        distribution_class=Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(value_net, in_keys=["observation"])
    advantage = GAE(
        gamma=float(hp.get("gamma", 0.99)),
        lmbda=float(hp.get("gae_lambda", 0.95)),
        value_network=critic,
        average_gae=False,
    )
    ent_coef = float(hp.get("ent_coef", 0.0))
    loss_module = ClipPPOLoss(
        actor_network=actor,
        critic_network=critic,
        clip_epsilon=float(hp.get("clip_coef", 0.2)),
        entropy_bonus=ent_coef > 0,
        entropy_coeff=ent_coef,
        critic_coeff=0.5 * float(hp.get("vf_coef", 0.5)),
        loss_critic_type="l2",
        normalize_advantage=bool(hp.get("normalize_advantages", True)),
    )
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=float(hp.get("lr", 2.5e-4)), eps=float(hp.get("adam_eps", 1e-5)))
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch, compilable=True),
        writer=RoundRobinWriter(compilable=True),  # plain counters: the default mp.Value ones leak semaphores
        sampler=SamplerWithoutReplacement(),
        batch_size=frames_per_batch // minibatches,
    )
    collector = Collector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=setting.total_steps, auto_register_policy_transforms=False
    )
    init_s = time.perf_counter() - t0

    frames = 0
    log.start()
    t0 = time.perf_counter()
    with training():
        for data in collector:
            _log_episodes(log, data, frames)
            frames += data.numel()
            for epoch in range(epochs):
                if epoch == 0 or recompute:
                    with torch.no_grad():
                        advantage(data)
                    buffer.extend(data.reshape(-1))
                for _ in range(minibatches):
                    losses = loss_module(buffer.sample())
                    loss = sum(value for key, value in losses.items() if key.startswith("loss_"))
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(loss_module.parameters(), max_grad_norm)
                    optimizer.step()
            collector.update_policy_weights_()
    train_s = time.perf_counter() - t0
    collector.shutdown()  # closes the env too

    if frames != setting.total_steps:
        notes.append(
            f"TorchRL's collector takes whole batches of {frames_per_batch}: {frames:,} agent steps, "
            f"not {setting.total_steps:,}"
        )
    if num_envs > 1:
        notes.append("envs stepped in process by SerialEnv (not ParallelEnv worker processes)")

    def act(obs: np.ndarray) -> np.ndarray:
        td = TensorDict(observation=torch.as_tensor(obs, dtype=torch.float32), batch_size=[len(obs)])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            return actor(td)["action"].numpy()

    eval_returns, eval_s = evaluate(act, setting)
    run = PeerRun(_library(), frames, init_s, train_s, eval_s, eval_returns, notes=notes)
    return log.fill(run)


def run_sac(setting: PeerSetting) -> PeerRun:
    """Train SAC built from TorchRL's components with the setting and evaluate its deterministic policy.

    Args:
        setting: The shared run setting; ``setting.hp`` holds rlbench's ``SACConfig`` fields.

    Returns:
        The measured run.
    """
    import torch
    from tensordict import TensorDict
    from tensordict.nn import InteractionType, NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate, group_optimizers

    hp = setting.hp
    notes = start(setting)
    num_envs = int(hp.get("num_envs", 1))
    hidden = hp.get("hidden", (256, 256))
    learning_starts = int(hp.get("learning_starts", 1_000))
    updates_per_step = float(hp.get("updates_per_step", 1.0))
    autotune = bool(hp.get("autotune", True))
    log = EpisodeLog()

    t0 = time.perf_counter()
    torch.manual_seed(setting.seed)
    env = _make_env(setting.env, num_envs, setting.seed)
    action_spec = env.action_spec_unbatched
    obs_dim = int(env.observation_spec["observation"].shape[-1])
    act_dim = int(action_spec.shape[-1])
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(_mlp(obs_dim, 2 * act_dim, hidden, "relu"), NormalParamExtractor(scale_lb=0.1)),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        spec=action_spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": action_spec.space.low, "high": action_spec.space.high},
        default_interaction_type=InteractionType.RANDOM,
        return_log_prob=False,
    )
    qvalue = ValueOperator(_mlp(obs_dim + act_dim, 1, hidden, "relu"), in_keys=["action", "observation"])
    loss_module = SACLoss(
        actor_network=actor,
        qvalue_network=qvalue,
        num_qvalue_nets=2,
        loss_function="l2",
        alpha_init=float(hp.get("init_alpha", 1.0)),
        fixed_alpha=not autotune,
        target_entropy="auto",
        action_spec=action_spec,
        delay_actor=False,
        delay_qvalue=True,
    )
    loss_module.make_value_estimator(gamma=float(hp.get("gamma", 0.99)))
    target_update = SoftUpdate(loss_module, tau=float(hp.get("tau", 0.005)))
    optimizers = [
        torch.optim.Adam(loss_module.actor_network_params.flatten_keys().values(), lr=float(hp.get("actor_lr", 1e-3))),
        torch.optim.Adam(loss_module.qvalue_network_params.flatten_keys().values(), lr=float(hp.get("critic_lr", 1e-3))),
    ]
    if autotune:
        optimizers.append(torch.optim.Adam([loss_module.log_alpha], lr=float(hp.get("alpha_lr", 3e-4))))
    optimizer = group_optimizers(*optimizers)
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(int(hp.get("buffer_size", 1_000_000)), compilable=True),
        batch_size=int(hp.get("batch_size", 256)),
        writer=RoundRobinWriter(compilable=True),  # plain counters: the default mp.Value ones leak semaphores
    )
    collector = Collector(
        env,
        actor,
        frames_per_batch=num_envs,
        total_frames=setting.total_steps,
        init_random_frames=learning_starts,
        auto_register_policy_transforms=False,
    )
    init_s = time.perf_counter() - t0

    frames, owed = 0, 0.0
    log.start()
    t0 = time.perf_counter()
    with training():
        for data in collector:
            _log_episodes(log, data, frames)
            learning = frames >= learning_starts
            frames += data.numel()
            buffer.extend(data.reshape(-1))
            if not learning:
                continue
            owed += updates_per_step * data.numel()
            while owed >= 1.0:
                owed -= 1.0
                losses = loss_module(buffer.sample())
                loss = sum(value for key, value in losses.items() if key.startswith("loss_"))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                target_update.step()
            collector.update_policy_weights_()
    train_s = time.perf_counter() - t0
    collector.shutdown()  # closes the env too

    if frames != setting.total_steps:
        notes.append(
            f"TorchRL's collector takes whole batches of {num_envs}: {frames:,} agent steps, not {setting.total_steps:,}"
        )
    if num_envs > 1:
        notes.append("envs stepped in process by SerialEnv (not ParallelEnv worker processes)")

    def act(obs: np.ndarray) -> np.ndarray:
        td = TensorDict(observation=torch.as_tensor(obs, dtype=torch.float32), batch_size=[len(obs)])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            return actor(td)["action"].numpy()

    eval_returns, eval_s = evaluate(act, setting)
    run = PeerRun(_library(), frames, init_s, train_s, eval_s, eval_returns, notes=notes)
    return log.fill(run)

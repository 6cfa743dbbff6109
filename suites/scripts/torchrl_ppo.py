"""PPO on CartPole-v1 with TorchRL: a collector, a GAE module, ClipPPOLoss and a replay buffer for the minibatches.

Run: python torchrl_ppo.py --seed 1 --total-frames 20000
"""

import argparse

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.envs import Compose, InitTracker, RewardSum, StepCounter, TransformedEnv
from torchrl.envs.libs.gym import GymEnv
from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

try:  # torchrl >= 0.12 calls the single-process collector Collector
    from torchrl.collectors import Collector
except ImportError:  # older torchrl
    from torchrl.collectors import SyncDataCollector as Collector

FRAMES_PER_BATCH = 512
MINIBATCH_SIZE = 128
NUM_EPOCHS = 4
LEARNING_RATE = 3e-4
MAX_GRAD_NORM = 0.5


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--total-frames", type=int, default=20000, help="total environment frames to collect")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    return parser.parse_args()


def mlp(in_features, out_features):
    return nn.Sequential(nn.Linear(in_features, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out_features))


def main():
    args = parse_args()
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)

    env = TransformedEnv(GymEnv("CartPole-v1"), Compose(InitTracker(), StepCounter(), RewardSum()))
    env.set_seed(args.seed)
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]  # one-hot actions

    actor = ProbabilisticActor(
        TensorDictModule(mlp(n_obs, n_act), in_keys=["observation"], out_keys=["logits"]),
        spec=env.action_spec,
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        return_log_prob=True,
    )
    value = ValueOperator(mlp(n_obs, 1), in_keys=["observation"])

    collector = Collector(env, actor, frames_per_batch=FRAMES_PER_BATCH, total_frames=args.total_frames, device="cpu")
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=value, average_gae=True)
    loss_module = ClipPPOLoss(
        actor_network=actor,
        critic_network=value,
        clip_epsilon=0.2,
        entropy_bonus=True,
        entropy_coeff=0.01,
        critic_coeff=0.5,
        loss_critic_type="smooth_l1",
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(FRAMES_PER_BATCH), sampler=SamplerWithoutReplacement())
    optim = torch.optim.Adam(loss_module.parameters(), lr=LEARNING_RATE)

    frames = 0
    episode_returns = []
    for i, data in enumerate(collector):
        frames += data.numel()
        for _epoch in range(NUM_EPOCHS):
            advantage(data)
            rb.extend(data.reshape(-1))
            for _ in range(FRAMES_PER_BATCH // MINIBATCH_SIZE):
                sub = rb.sample(MINIBATCH_SIZE)
                loss_vals = loss_module(sub)
                loss = loss_vals["loss_objective"] + loss_vals["loss_critic"] + loss_vals["loss_entropy"]
                optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(loss_module.parameters(), MAX_GRAD_NORM)
                optim.step()
        collector.update_policy_weights_()

        done = data["next", "done"].squeeze(-1)
        episode_returns.extend(data["next", "episode_reward"][done].squeeze(-1).tolist())
        if (i + 1) % 10 == 0:
            recent = episode_returns[-10:]
            mean_recent = sum(recent) / len(recent) if recent else float("nan")
            print(f"batch={i + 1} frames={frames} mean_return_last10={mean_recent:.1f}", flush=True)

    collector.shutdown()
    last10 = episode_returns[-10:]
    mean_last10 = sum(last10) / len(last10) if last10 else float("nan")
    print(f"final: episodes={len(episode_returns)} mean_return_last10={mean_last10:.2f} global_step={frames}", flush=True)


if __name__ == "__main__":
    main()

"""DQN on CartPole-v1 with TorchRL, the way its getting-started tutorial writes it: a QValueActor with epsilon-greedy
exploration, a collector, a replay buffer, DQNLoss with a soft-updated target network.

Run: python torchrl_dqn.py --seed 1 --total-frames 2000
"""

import argparse

import torch
from tensordict.nn import TensorDictSequential
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import RewardSum, StepCounter, TransformedEnv
from torchrl.envs.libs.gym import GymEnv
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate

try:  # torchrl >= 0.12 calls the single-process collector Collector
    from torchrl.collectors import Collector
except ImportError:  # older torchrl
    from torchrl.collectors import SyncDataCollector as Collector

FRAMES_PER_BATCH = 10
INIT_RANDOM_FRAMES = 500
BUFFER_SIZE = 10000
BATCH_SIZE = 64
OPTIM_STEPS = 10  # one gradient step per collected frame
LEARNING_RATE = 2.5e-4


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--total-frames", type=int, default=2000, help="total environment frames to collect")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)

    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    env.append_transform(RewardSum())
    env.set_seed(args.seed)

    value_mlp = MLP(out_features=env.action_spec.shape[-1], num_cells=[64, 64])
    policy = QValueActor(value_mlp, in_keys=["observation"], spec=env.action_spec)
    exploration = EGreedyModule(env.action_spec, annealing_num_steps=args.total_frames // 2, eps_init=1.0, eps_end=0.05)
    policy_explore = TensorDictSequential(policy, exploration)
    policy_explore(env.reset())  # materialize the lazy MLP before the loss copies it for its target network

    collector = Collector(
        env,
        policy_explore,
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=args.total_frames,
        init_random_frames=INIT_RANDOM_FRAMES,
        device="cpu",
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(BUFFER_SIZE))
    loss_module = DQNLoss(value_network=policy, action_space=env.action_spec, delay_value=True)
    optim = torch.optim.Adam(loss_module.parameters(), lr=LEARNING_RATE)
    updater = SoftUpdate(loss_module, eps=0.99)

    frames = 0
    episode_returns = []
    for i, data in enumerate(collector):
        frames += data.numel()
        rb.extend(data)
        if len(rb) > INIT_RANDOM_FRAMES:
            for _ in range(OPTIM_STEPS):
                sample = rb.sample(BATCH_SIZE)
                loss_vals = loss_module(sample)
                optim.zero_grad()
                loss_vals["loss"].backward()
                optim.step()
                updater.step()
            exploration.step(data.numel())

        done = data["next", "done"].squeeze(-1)
        episode_returns.extend(data["next", "episode_reward"][done].squeeze(-1).tolist())
        if (i + 1) % 100 == 0:
            recent = episode_returns[-10:]
            mean_recent = sum(recent) / len(recent) if recent else float("nan")
            print(f"batch={i + 1} frames={frames} mean_return_last10={mean_recent:.1f}", flush=True)

    collector.shutdown()
    last10 = episode_returns[-10:]
    mean_last10 = sum(last10) / len(last10) if last10 else float("nan")
    print(f"final: episodes={len(episode_returns)} mean_return_last10={mean_last10:.2f} global_step={frames}", flush=True)


if __name__ == "__main__":
    main()

"""DQN on CartPole-v1 in one file, written the way CleanRL's dqn.py is (argparse for tyro; TensorBoard: --tensorboard-dir).

Run: python cleanrl_dqn.py --seed 1 --total-timesteps 4000
"""

import argparse
import random
import time
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--cuda", action="store_true", help="use CUDA when it is available")
    parser.add_argument("--env-id", type=str, default="CartPole-v1", help="the id of the environment")
    parser.add_argument(
        "--tensorboard-dir",
        type=str,
        default=None,
        help="write TensorBoard logs to this folder as CleanRL does (its runs/{run_name}; default: none)",
    )
    parser.add_argument("--total-timesteps", type=int, default=4000, help="total timesteps of the experiment")
    parser.add_argument("--learning-rate", type=float, default=2.5e-4, help="the learning rate of the optimizer")
    parser.add_argument("--buffer-size", type=int, default=10000, help="the replay memory buffer size")
    parser.add_argument("--gamma", type=float, default=0.99, help="the discount factor gamma")
    parser.add_argument("--tau", type=float, default=1.0, help="the target network update rate")
    parser.add_argument("--target-network-frequency", type=int, default=100, help="the timesteps between target updates")
    parser.add_argument("--batch-size", type=int, default=64, help="the batch size of samples from the replay memory")
    parser.add_argument("--start-e", type=float, default=1.0, help="the starting epsilon for exploration")
    parser.add_argument("--end-e", type=float, default=0.05, help="the ending epsilon for exploration")
    parser.add_argument(
        "--exploration-fraction", type=float, default=0.5, help="the fraction of the run it takes epsilon to reach end-e"
    )
    parser.add_argument("--learning-starts", type=int, default=500, help="timestep to start learning")
    parser.add_argument("--train-frequency", type=int, default=1, help="the frequency of training")
    return parser.parse_args()


def make_env(env_id):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return env

    return thunk


def make_envs(env_id, num_envs):
    """A SyncVectorEnv that resets a finished sub-env within the step that ended it, as gymnasium 0.29 did."""
    kwargs = {}
    if hasattr(gym.vector, "AutoresetMode"):  # gymnasium >= 1.1 defaults to resetting on the next step instead
        kwargs["autoreset_mode"] = gym.vector.AutoresetMode.SAME_STEP
    return gym.vector.SyncVectorEnv([make_env(env_id) for _ in range(num_envs)], **kwargs)


def final_observations(infos):
    """The last observations of the episodes that ended on this step (None where a sub-env did not finish)."""
    return infos.get("final_obs", infos.get("final_observation"))


def finished_returns(infos):
    """Returns of the episodes that ended on this step, in gymnasium's 1.x or 0.29 vector info layout."""
    final = infos.get("final_info")
    if isinstance(final, dict):  # gymnasium >= 1.1, same-step autoreset: the finished episodes' infos, batched
        infos = final
    if "episode" in infos:
        return [float(r) for r in infos["episode"]["r"][infos["_episode"]]]
    return [float(info["episode"]["r"]) for info in final or [] if info and "episode" in info]  # gymnasium 0.29


class ReplayBufferSamples(NamedTuple):
    observations: torch.Tensor
    actions: torch.Tensor
    next_observations: torch.Tensor
    dones: torch.Tensor
    rewards: torch.Tensor


class ReplayBuffer:
    """Transitions in preallocated numpy arrays, a ring of buffer_size steps per env, sampled uniformly as tensors
    (the layout of Stable-Baselines3's ReplayBuffer, which CleanRL imports)."""

    def __init__(self, buffer_size, observation_space, action_space, device, n_envs=1):
        self.buffer_size = buffer_size
        self.n_envs = n_envs
        self.device = device
        self.action_dim = int(np.prod(action_space.shape)) if action_space.shape else 1
        self.observations = np.zeros((buffer_size, n_envs, *observation_space.shape), dtype=observation_space.dtype)
        self.next_observations = np.zeros((buffer_size, n_envs, *observation_space.shape), dtype=observation_space.dtype)
        self.actions = np.zeros((buffer_size, n_envs, self.action_dim), dtype=action_space.dtype)
        self.rewards = np.zeros((buffer_size, n_envs), dtype=np.float32)
        self.dones = np.zeros((buffer_size, n_envs), dtype=np.float32)
        self.pos = 0
        self.full = False

    def add(self, obs, next_obs, action, reward, done, infos):
        self.observations[self.pos] = np.array(obs)
        self.next_observations[self.pos] = np.array(next_obs)
        self.actions[self.pos] = np.array(action).reshape((self.n_envs, self.action_dim))
        self.rewards[self.pos] = np.array(reward)
        self.dones[self.pos] = np.array(done)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def sample(self, batch_size):
        upper = self.buffer_size if self.full else self.pos
        batch_inds = np.random.randint(0, upper, size=batch_size)
        env_inds = np.random.randint(0, self.n_envs, size=batch_size)
        data = (
            self.observations[batch_inds, env_inds],
            self.actions[batch_inds, env_inds],
            self.next_observations[batch_inds, env_inds],
            self.dones[batch_inds, env_inds].reshape(-1, 1),
            self.rewards[batch_inds, env_inds].reshape(-1, 1),
        )
        return ReplayBufferSamples(*(torch.tensor(array, device=self.device) for array in data))


class QNetwork(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_dim = int(np.array(envs.single_observation_space.shape).prod())
        self.network = nn.Sequential(
            nn.Linear(obs_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, envs.single_action_space.n),
        )

    def forward(self, x):
        return self.network(x)


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


if __name__ == "__main__":
    args = parse_args()
    torch.set_num_threads(args.torch_threads)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    writer = None
    if args.tensorboard_dir:  # CleanRL opens runs/{run_name}; here only when asked, so the plain script imports no tensorboard
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(args.tensorboard_dir)
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = make_envs(args.env_id, 1)
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), "only discrete action space is supported"
    envs.single_action_space.seed(args.seed)

    q_network = QNetwork(envs).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())

    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device)

    episode_returns = []
    start_time = time.time()
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        # epsilon-greedy, and uniformly random actions until learning starts
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if global_step < args.learning_starts or random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            q_values = q_network(torch.Tensor(obs).to(device))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        for episodic_return in finished_returns(infos):
            episode_returns.append(episodic_return)
            if writer is not None:
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)

        # a truncated episode's next observation is its last one, not the first of the episode that replaced it
        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = final_observations(infos)[idx]
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)
        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    target_max, _ = target_network(data.next_observations).max(dim=1)
                    td_target = data.rewards.flatten() + args.gamma * target_max * (1 - data.dones.flatten())
                old_val = q_network(data.observations).gather(1, data.actions.long()).squeeze()
                loss = F.mse_loss(td_target, old_val)

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if writer is not None and global_step % 100 == 0:
                    writer.add_scalar("losses/td_loss", loss.item(), global_step)
                    writer.add_scalar("losses/q_values", old_val.mean().item(), global_step)
                    writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)

            if global_step % args.target_network_frequency == 0:
                for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1.0 - args.tau) * target_param.data)

        if (global_step + 1) % 1000 == 0:
            recent = episode_returns[-10:]
            print(
                f"global_step={global_step + 1} SPS={int((global_step + 1) / (time.time() - start_time))} "
                f"epsilon={epsilon:.3f} mean_return_last10={np.mean(recent) if recent else float('nan'):.1f}",
                flush=True,
            )

    envs.close()
    if writer is not None:
        writer.close()
    last10 = episode_returns[-10:]
    mean_last10 = float(np.mean(last10)) if last10 else float("nan")
    print(
        f"final: episodes={len(episode_returns)} mean_return_last10={mean_last10:.2f} global_step={args.total_timesteps}",
        flush=True,
    )

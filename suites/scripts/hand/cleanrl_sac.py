"""Hand-instrumented copy of ../cleanrl_sac.py: the same training, with time.perf_counter() accumulators per phase.

Phases: env (envs.reset/envs.step), acting (actor.get_action on the observation tensor and the action's
.detach().cpu().numpy(); the torch.Tensor(obs) conversion before it is not acting, and neither are the random actions
of the prefill), replay (rb.add and rb.sample), target (the `with torch.no_grad():` blocks inside the update: the TD
target, and the log-probabilities the temperature loss uses), forward (the grad-enabled Q and actor forwards and the
losses: Q, actor and temperature), backward (each loss.backward()), optimizer (each zero_grad and step),
target_update (the polyak loops over both target Q networks' parameters). Reading the temperature back after its
step (alpha = log_alpha.exp().item()) is in none of them. loop_s runs from just before envs.reset(seed=...) to the
end of the last step. With RLBENCH_HAND_OUT set, the totals are written there as JSON.

Run: python cleanrl_sac.py --seed 1 --total-timesteps 2500
"""

import argparse
import json
import os
import random
import time
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

LOG_STD_MAX = 2
LOG_STD_MIN = -5


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--cuda", action="store_true", help="use CUDA when it is available")
    parser.add_argument("--env-id", type=str, default="Pendulum-v1", help="the id of the environment")
    parser.add_argument(
        "--tensorboard-dir",
        type=str,
        default=None,
        help="write TensorBoard logs to this folder as CleanRL does (its runs/{run_name}; default: none)",
    )
    parser.add_argument("--total-timesteps", type=int, default=2500, help="total timesteps of the experiment")
    parser.add_argument("--buffer-size", type=int, default=10000, help="the replay memory buffer size")
    parser.add_argument("--gamma", type=float, default=0.99, help="the discount factor gamma")
    parser.add_argument("--tau", type=float, default=0.005, help="the target network update rate")
    parser.add_argument("--batch-size", type=int, default=64, help="the batch size of samples from the replay memory")
    parser.add_argument("--learning-starts", type=int, default=500, help="timestep to start learning")
    parser.add_argument("--policy-lr", type=float, default=3e-4, help="the learning rate of the policy network optimizer")
    parser.add_argument("--q-lr", type=float, default=1e-3, help="the learning rate of the Q network optimizer")
    parser.add_argument("--policy-frequency", type=int, default=2, help="the frequency of training the policy (delayed)")
    parser.add_argument(
        "--target-network-frequency", type=int, default=1, help="the frequency of updates for the target networks"
    )
    parser.add_argument("--alpha", type=float, default=0.2, help="entropy regularization coefficient")
    parser.add_argument(
        "--autotune", action=argparse.BooleanOptionalAction, default=True, help="automatic tuning of the entropy coefficient"
    )
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


class SoftQNetwork(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        self.fc1 = nn.Linear(obs_dim + act_dim, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Actor(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        act_dim = int(np.prod(envs.single_action_space.shape))
        self.fc1 = nn.Linear(obs_dim, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc_mean = nn.Linear(64, act_dim)
        self.fc_logstd = nn.Linear(64, act_dim)
        high, low = envs.single_action_space.high, envs.single_action_space.low
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # rescaled into [min, max]
        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        x_t = normal.rsample()  # reparameterized: mean + std * N(0, 1)
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        # the tanh squashing's change of variables
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


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
    assert isinstance(envs.single_action_space, gym.spaces.Box), "only continuous action space is supported"
    envs.single_action_space.seed(args.seed)

    actor = Actor(envs).to(device)
    qf1 = SoftQNetwork(envs).to(device)
    qf2 = SoftQNetwork(envs).to(device)
    qf1_target = SoftQNetwork(envs).to(device)
    qf2_target = SoftQNetwork(envs).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    # automatic entropy tuning
    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(envs.single_action_space.shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().item()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device)

    phase_s = dict.fromkeys(("env", "acting", "replay", "target", "forward", "backward", "optimizer", "target_update"), 0.0)
    episode_returns = []
    start_time = time.time()
    loop_t0 = time.perf_counter()
    t0 = time.perf_counter()
    obs, _ = envs.reset(seed=args.seed)
    phase_s["env"] += time.perf_counter() - t0
    for global_step in range(args.total_timesteps):
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            obs_tensor = torch.Tensor(obs).to(device)
            t0 = time.perf_counter()
            actions, _, _ = actor.get_action(obs_tensor)
            actions = actions.detach().cpu().numpy()
            phase_s["acting"] += time.perf_counter() - t0

        t0 = time.perf_counter()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        phase_s["env"] += time.perf_counter() - t0
        for episodic_return in finished_returns(infos):
            episode_returns.append(episodic_return)
            if writer is not None:
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        if writer is not None and global_step % 100 == 0:
            writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)

        # a truncated episode's next observation is its last one, not the first of the episode that replaced it
        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = final_observations(infos)[idx]
        t0 = time.perf_counter()
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)
        phase_s["replay"] += time.perf_counter() - t0
        obs = next_obs

        if global_step > args.learning_starts:
            t0 = time.perf_counter()
            data = rb.sample(args.batch_size)
            phase_s["replay"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            with torch.no_grad():
                next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * min_qf_next_target.view(-1)
            phase_s["target"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss
            phase_s["forward"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            q_optimizer.zero_grad()
            phase_s["optimizer"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            qf_loss.backward()
            phase_s["backward"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            q_optimizer.step()
            phase_s["optimizer"] += time.perf_counter() - t0

            if global_step % args.policy_frequency == 0:  # TD3-style delayed update, compensated by as many steps
                for _ in range(args.policy_frequency):
                    t0 = time.perf_counter()
                    pi, log_pi, _ = actor.get_action(data.observations)
                    qf1_pi = qf1(data.observations, pi)
                    qf2_pi = qf2(data.observations, pi)
                    min_qf_pi = torch.min(qf1_pi, qf2_pi)
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                    phase_s["forward"] += time.perf_counter() - t0

                    t0 = time.perf_counter()
                    actor_optimizer.zero_grad()
                    phase_s["optimizer"] += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    actor_loss.backward()
                    phase_s["backward"] += time.perf_counter() - t0
                    t0 = time.perf_counter()
                    actor_optimizer.step()
                    phase_s["optimizer"] += time.perf_counter() - t0

                    if args.autotune:
                        t0 = time.perf_counter()
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        phase_s["target"] += time.perf_counter() - t0
                        t0 = time.perf_counter()
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                        phase_s["forward"] += time.perf_counter() - t0

                        t0 = time.perf_counter()
                        a_optimizer.zero_grad()
                        phase_s["optimizer"] += time.perf_counter() - t0
                        t0 = time.perf_counter()
                        alpha_loss.backward()
                        phase_s["backward"] += time.perf_counter() - t0
                        t0 = time.perf_counter()
                        a_optimizer.step()
                        phase_s["optimizer"] += time.perf_counter() - t0
                        alpha = log_alpha.exp().item()

            if global_step % args.target_network_frequency == 0:
                t0 = time.perf_counter()
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                phase_s["target_update"] += time.perf_counter() - t0

        if (global_step + 1) % 1000 == 0:
            recent = episode_returns[-10:]
            print(
                f"global_step={global_step + 1} SPS={int((global_step + 1) / (time.time() - start_time))} "
                f"alpha={alpha:.3f} mean_return_last10={np.mean(recent) if recent else float('nan'):.1f}",
                flush=True,
            )

    loop_s = time.perf_counter() - loop_t0

    envs.close()
    if writer is not None:
        writer.close()
    last10 = episode_returns[-10:]
    mean_last10 = float(np.mean(last10)) if last10 else float("nan")
    print(
        f"final: episodes={len(episode_returns)} mean_return_last10={mean_last10:.2f} global_step={args.total_timesteps}",
        flush=True,
    )

    out_path = os.environ.get("RLBENCH_HAND_OUT")
    if out_path:
        with open(out_path, "w") as f:
            record = {"loop_s": loop_s, "steps": args.total_timesteps, "phases": phase_s, "script": "cleanrl_sac"}
            json.dump(record, f, indent=2)

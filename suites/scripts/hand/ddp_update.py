"""Hand-instrumented copy of ../ddp_update.py: the same training, with perf_counter timers per rank and part.

Each rank times env (its vector env's steps and reset), acting (the no_grad policy call on the env's batch and the
sampled action), forward (the minibatch forward and the loss, up to zero_grad), backward (DDP's all-reduce of the
gradients inside it), optimizer (zero_grad, step) and collective (the explicit all_reduce of the rollout's reward). The
rank's loop runs from its first reset to its last update. With RLBENCH_HAND_OUT set, each rank writes its totals
(hand/timers.py).

Run: torchrun --nproc-per-node 2 ddp_update.py --iterations 20
"""

import argparse

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from timers import Timers, clock


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=20, help="rollouts and updates per rank")
    p.add_argument("--num-envs", type=int, default=4, help="envs per rank")
    p.add_argument("--num-steps", type=int, default=64, help="steps per env per rollout")
    p.add_argument("--epochs", type=int, default=4, help="update epochs per rollout")
    p.add_argument("--seed", type=int, default=1, help="seed (each rank adds its rank)")
    return p.parse_args()


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
        self.critic = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, x):
        return self.actor(x), self.critic(x).squeeze(-1)


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(args.seed + rank)
    torch.set_num_threads(1)
    agent = Agent()
    model = nn.parallel.DistributedDataParallel(agent)
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(args.num_envs)])
    timers = Timers(f"rank-{rank}")
    t = clock()
    obs, _ = envs.reset(seed=args.seed + 100 * rank)
    timers.add("env", t)
    for _ in range(args.iterations):
        batch_obs, batch_act, batch_logp, rewards, dones = [], [], [], [], []
        for _ in range(args.num_steps):
            t = clock()
            with torch.no_grad():
                logits, value = agent(torch.as_tensor(obs, dtype=torch.float32))
                dist_ = torch.distributions.Categorical(logits=logits)
                action = dist_.sample()
            batch_obs.append(obs)
            batch_act.append(action)
            batch_logp.append(dist_.log_prob(action))
            act = action.numpy()
            t = timers.add("acting", t)
            obs, reward, term, trunc, _ = envs.step(act)
            timers.add("env", t)
            rewards.append(reward)
            dones.append(np.logical_or(term, trunc))
        returns = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)  # discounted, cut at episode ends
        running = np.zeros(args.num_envs, dtype=np.float32)
        for t_ in reversed(range(args.num_steps)):
            running = rewards[t_] + 0.99 * running * (1.0 - dones[t_])
            returns[t_] = running
        b_obs = torch.as_tensor(np.array(batch_obs), dtype=torch.float32).reshape(-1, 4)
        b_act = torch.stack(batch_act).reshape(-1)
        b_logp = torch.stack(batch_logp).reshape(-1)
        b_ret = torch.as_tensor(returns, dtype=torch.float32).reshape(-1)
        for _ in range(args.epochs):
            t = clock()
            logits, value = model(b_obs)
            logp = torch.distributions.Categorical(logits=logits).log_prob(b_act)
            ratio = (logp - b_logp).exp()
            adv = b_ret - value.detach()
            loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean() + 0.5 * ((value - b_ret) ** 2).mean()
            t = timers.add("forward", t)
            opt.zero_grad()
            t = timers.add("optimizer", t)
            loss.backward()
            t = timers.add("backward", t)
            opt.step()
            timers.add("optimizer", t)
        mean_return = torch.tensor([float(np.mean(rewards)) * args.num_steps])
        t = clock()
        dist.all_reduce(mean_return)
        timers.add("collective", t)
    timers.write()
    if rank == 0:
        print(f"final: mean rollout reward {mean_return.item() / dist.get_world_size():.2f}")
    envs.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

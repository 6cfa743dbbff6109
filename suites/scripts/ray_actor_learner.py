"""An actor-learner on Ray: two actor actors step CartPole-v1 with the learner's latest policy and return rollouts;
the learner (the driver) trains a policy-gradient update on each batch and sends its weights back through the object
store (a single-machine IMPALA, the shape of rlbench's own grpo-pipeline on its Ray engine).

Run: python ray_actor_learner.py --iterations 30
"""

import argparse

import gymnasium as gym
import numpy as np
import ray
import torch
import torch.nn as nn


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=30, help="rollouts per actor (and updates)")
    p.add_argument("--steps", type=int, default=256, help="env steps per rollout")
    p.add_argument("--actors", type=int, default=2, help="actor actors")
    p.add_argument("--seed", type=int, default=1, help="seed")
    return p.parse_args()


def policy():
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))


@ray.remote
class Actor:
    def __init__(self, seed):
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        self.net = policy()
        self.env = gym.make("CartPole-v1")
        self.obs, _ = self.env.reset(seed=seed)

    def rollout(self, weights, steps):
        self.net.load_state_dict(weights)
        obs, act, ret = [], [], []
        for _ in range(steps):
            with torch.no_grad():
                logits = self.net(torch.as_tensor(self.obs, dtype=torch.float32))
                a = int(torch.distributions.Categorical(logits=logits).sample())
            obs.append(self.obs)
            act.append(a)
            self.obs, r, term, trunc, _ = self.env.step(a)
            ret.append(r)
            if term or trunc:
                self.obs, _ = self.env.reset()
        return np.array(obs, dtype=np.float32), np.array(act), np.array(ret, dtype=np.float32)


def main():
    args = parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    net = policy()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    actors = [Actor.remote(args.seed + i) for i in range(args.actors)]
    for _ in range(args.iterations):
        weights = ray.put({k: v.clone() for k, v in net.state_dict().items()})
        batches = ray.get([a.rollout.remote(weights, args.steps) for a in actors])
        obs = torch.as_tensor(np.concatenate([b[0] for b in batches]))
        act = torch.as_tensor(np.concatenate([b[1] for b in batches]))
        ret = torch.as_tensor(np.concatenate([b[2] for b in batches]))
        logp = torch.distributions.Categorical(logits=net(obs)).log_prob(act)
        loss = -(logp * (ret - ret.mean())).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"final: iterations={args.iterations} loss={loss.item():.4f}")
    ray.shutdown()


if __name__ == "__main__":
    main()

"""Hand-instrumented copy of ../ray_actor_learner.py: the same training, with perf_counter timers per role and part.

Each actor (role Actor, Ray's name for its worker: the class) times env (step, reset), acting (the no_grad policy call
and the sampled action) and weights (loading the learner's); its loop runs from its first reset to the end of its
last rollout, and it hands its totals to the driver (a Ray call) to be written. The learner (the driver, main) times
wait (ray.get of the rollouts), weights (the state_dict copied and put in the object store), forward (the batch's
tensors, the forward and the loss), backward and optimizer; its loop runs from its first weights to its last step.
With RLBENCH_HAND_OUT set, every role's totals are written (hand/timers.py).

Run: python ray_actor_learner.py --iterations 30
"""

import argparse

import gymnasium as gym
import numpy as np
import ray
import torch
import torch.nn as nn
from timers import Timers, clock


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
        self.timers = Timers("Actor")
        t = clock()
        self.obs, _ = self.env.reset(seed=seed)
        self.timers.add("env", t)
        self.end = t

    def rollout(self, weights, steps):
        t = clock()
        self.net.load_state_dict(weights)
        self.timers.add("weights", t)
        obs, act, ret = [], [], []
        for _ in range(steps):
            t = clock()
            with torch.no_grad():
                logits = self.net(torch.as_tensor(self.obs, dtype=torch.float32))
                a = int(torch.distributions.Categorical(logits=logits).sample())
            t = self.timers.add("acting", t)
            obs.append(self.obs)
            act.append(a)
            t = clock()
            self.obs, r, term, trunc, _ = self.env.step(a)
            self.timers.add("env", t)
            ret.append(r)
            if term or trunc:
                t = clock()
                self.obs, _ = self.env.reset()
                self.timers.add("env", t)
        self.end = clock()
        return np.array(obs, dtype=np.float32), np.array(act), np.array(ret, dtype=np.float32)

    def hand(self):
        return self.timers.totals(loop_s=self.end - self.timers.t0)


def main():
    args = parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    net = policy()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    actors = [Actor.remote(args.seed + i) for i in range(args.actors)]
    timers = Timers("main")
    for _ in range(args.iterations):
        t = clock()
        weights = ray.put({k: v.clone() for k, v in net.state_dict().items()})
        t = timers.add("weights", t)
        pending = [a.rollout.remote(weights, args.steps) for a in actors]
        batches = ray.get(pending)
        t = timers.add("wait", t)
        obs = torch.as_tensor(np.concatenate([b[0] for b in batches]))
        act = torch.as_tensor(np.concatenate([b[1] for b in batches]))
        ret = torch.as_tensor(np.concatenate([b[2] for b in batches]))
        logp = torch.distributions.Categorical(logits=net(obs)).log_prob(act)
        loss = -(logp * (ret - ret.mean())).mean()
        t = timers.add("forward", t)
        opt.zero_grad()
        t = timers.add("optimizer", t)
        loss.backward()
        t = timers.add("backward", t)
        opt.step()
        timers.add("optimizer", t)
    timers.write()
    for totals in ray.get([a.hand.remote() for a in actors]):
        timers.write(totals)
    print(f"final: iterations={args.iterations} loss={loss.item():.4f}")
    ray.shutdown()


if __name__ == "__main__":
    main()

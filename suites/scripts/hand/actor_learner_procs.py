"""Hand-instrumented copy of ../actor_learner_procs.py: the same training, with perf_counter timers per role and part.

Each actor process times env (step, reset), acting (the greedy steps' tensor, no_grad call and argmax), wait (its put
on the queue, and the non-blocking get of new weights) and weights (loading them); the learner (the main process) times
wait (its get, and the puts of its weights), replay (add, sample), target, forward (up to zero_grad), backward,
optimizer and target_update. Each role's loop runs from its first step to its last. With RLBENCH_HAND_OUT set, each
writes its totals (hand/timers.py).

Run: python actor_learner_procs.py --total-timesteps 4000
"""

import argparse
import multiprocessing as mp
import queue
import random

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from timers import Timers, clock


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=4000, help="env steps each actor takes")
    p.add_argument("--actors", type=int, default=2, help="actor processes")
    p.add_argument("--seed", type=int, default=1, help="seed")
    p.add_argument("--learning-starts", type=int, default=500, help="transitions before the first update")
    p.add_argument("--train-every", type=int, default=4, help="transitions per update")
    p.add_argument("--batch-size", type=int, default=64, help="minibatch size")
    p.add_argument("--sync-every", type=int, default=50, help="updates between weights sent to the actors")
    return p.parse_args()


def q_network():
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))


class ReplayBuffer:
    def __init__(self, size):
        self.items, self.size, self.pos = [], size, 0

    def add(self, item):
        if len(self.items) < self.size:
            self.items.append(item)
        else:
            self.items[self.pos] = item
        self.pos = (self.pos + 1) % self.size

    def sample(self, n):
        batch = random.sample(self.items, n)
        obs, act, rew, nobs, done = (np.array(x) for x in zip(*batch))
        return (torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(act), torch.as_tensor(rew, dtype=torch.float32),
                torch.as_tensor(nobs, dtype=torch.float32), torch.as_tensor(done, dtype=torch.float32))  # fmt: skip


def actor(index, args, out, weights):
    torch.set_num_threads(1)
    net = q_network()
    env = gym.make("CartPole-v1")
    timers = Timers("actor")
    t = clock()
    obs, _ = env.reset(seed=args.seed + index)
    timers.add("env", t)
    rng = random.Random(args.seed + index)
    for step in range(args.total_timesteps):
        t = clock()
        try:
            state = weights.get_nowait()
            t = timers.add("wait", t)
            net.load_state_dict(state)
            timers.add("weights", t)
        except queue.Empty:
            timers.add("wait", t)
        epsilon = max(0.05, 1.0 - step / (0.5 * args.total_timesteps))
        if rng.random() < epsilon:
            action = env.action_space.sample()
        else:
            t = clock()
            with torch.no_grad():
                action = int(net(torch.as_tensor(obs, dtype=torch.float32)).argmax())
            timers.add("acting", t)
        t = clock()
        nobs, reward, term, trunc, _ = env.step(action)
        timers.add("env", t)
        item = (obs, action, reward, nobs, term)
        t = clock()
        out.put(item)
        timers.add("wait", t)
        if term or trunc:
            t = clock()
            obs = env.reset()[0]
            timers.add("env", t)
        else:
            obs = nobs
    t = clock()
    out.put(None)
    timers.add("wait", t)
    timers.write()


def main():
    args = parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    items = ctx.Queue(maxsize=256)
    weights = [ctx.Queue(maxsize=1) for _ in range(args.actors)]
    procs = [ctx.Process(target=actor, args=(i, args, items, weights[i]), name=f"actor-{i}") for i in range(args.actors)]
    for p in procs:
        p.start()
    net, target = q_network(), q_network()
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=2.5e-4)
    rb = ReplayBuffer(10_000)
    timers = Timers("main")
    done = seen = updates = 0
    while done < args.actors:
        t = clock()
        item = items.get()
        t = timers.add("wait", t)
        if item is None:
            done += 1
            continue
        rb.add(item)
        timers.add("replay", t)
        seen += 1
        if seen < args.learning_starts or seen % args.train_every:
            continue
        t = clock()
        obs, act, rew, nobs, dn = rb.sample(args.batch_size)
        t = timers.add("replay", t)
        with torch.no_grad():
            y = rew + 0.99 * target(nobs).max(1)[0] * (1.0 - dn)
        t = timers.add("target", t)
        q = net(obs).gather(1, act.long().unsqueeze(1)).squeeze(1)
        loss = nn.functional.mse_loss(q, y)
        t = timers.add("forward", t)
        opt.zero_grad()
        t = timers.add("optimizer", t)
        loss.backward()
        t = timers.add("backward", t)
        opt.step()
        timers.add("optimizer", t)
        updates += 1
        if updates % args.sync_every == 0:
            t = clock()
            target.load_state_dict(net.state_dict())
            timers.add("target_update", t)
            state = {k: v.clone() for k, v in net.state_dict().items()}
            for w in weights:
                t = clock()
                try:
                    w.put_nowait(state)
                except queue.Full:
                    pass
                timers.add("wait", t)
    t = clock()
    for p in procs:
        p.join()
    timers.add("wait", t)
    timers.write()
    print(f"final: transitions={seen} updates={updates}")


if __name__ == "__main__":
    main()

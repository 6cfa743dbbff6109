"""Hand-instrumented copy of ../actor_learner_threads.py: the same training, with perf_counter timers per role and part.

The actor thread times env (step, reset), acting (the greedy steps' tensor, no_grad call and argmax) and wait (its put
on the bounded queue); the learner (the main thread) times wait (its get), replay (add, sample), target (the no_grad
block), forward (the Q-values and the loss, up to zero_grad), backward, optimizer (zero_grad and step) and
target_update. Each role's loop runs from its first step to its last. With RLBENCH_HAND_OUT set, each role writes its
totals (hand/timers.py).

Run: python actor_learner_threads.py --total-timesteps 6000
"""

import argparse
import queue
import random
import threading

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from timers import Timers, clock


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=6000, help="env steps the actor takes")
    p.add_argument("--seed", type=int, default=1, help="seed")
    p.add_argument("--learning-starts", type=int, default=500, help="transitions before the first update")
    p.add_argument("--train-every", type=int, default=4, help="transitions per update")
    p.add_argument("--batch-size", type=int, default=64, help="minibatch size")
    p.add_argument("--target-every", type=int, default=100, help="updates between target-network copies")
    p.add_argument("--queue-size", type=int, default=64, help="the bounded queue between actor and learner")
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


def actor(args, net, out):
    env = gym.make("CartPole-v1")
    timers = Timers("actor")
    t = clock()
    obs, _ = env.reset(seed=args.seed)
    timers.add("env", t)
    rng = random.Random(args.seed)
    for step in range(args.total_timesteps):
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
    net, target = q_network(), q_network()
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=2.5e-4)
    items = queue.Queue(maxsize=args.queue_size)
    rb = ReplayBuffer(10_000)
    thread = threading.Thread(target=actor, args=(args, net, items), name="actor")
    timers = Timers("main")
    thread.start()
    seen = updates = 0
    while True:
        t = clock()
        item = items.get()
        t = timers.add("wait", t)
        if item is None:
            break
        rb.add(item)
        timers.add("replay", t)
        seen += 1
        if seen < args.learning_starts or seen % args.train_every:
            continue
        t = clock()
        obs, act, rew, nobs, done = rb.sample(args.batch_size)
        t = timers.add("replay", t)
        with torch.no_grad():
            y = rew + 0.99 * target(nobs).max(1)[0] * (1.0 - done)
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
        if updates % args.target_every == 0:
            t = clock()
            target.load_state_dict(net.state_dict())
            timers.add("target_update", t)
    t = clock()
    thread.join()
    timers.add("wait", t)
    timers.write()
    print(f"final: transitions={seen} updates={updates}")


if __name__ == "__main__":
    main()

"""A DQN-style actor-learner on CartPole-v1 in one process: an actor thread steps the env and acts epsilon-greedily,
feeding transitions through a bounded queue to the learner (the main thread), which fills a replay buffer and updates a
Q-network against a target network (Ape-X's shape, threads instead of machines).

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
    obs, _ = env.reset(seed=args.seed)
    rng = random.Random(args.seed)
    for step in range(args.total_timesteps):
        epsilon = max(0.05, 1.0 - step / (0.5 * args.total_timesteps))
        if rng.random() < epsilon:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                action = int(net(torch.as_tensor(obs, dtype=torch.float32)).argmax())
        nobs, reward, term, trunc, _ = env.step(action)
        out.put((obs, action, reward, nobs, term))
        obs = nobs if not (term or trunc) else env.reset()[0]
    out.put(None)


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
    thread.start()
    seen = updates = 0
    while (item := items.get()) is not None:
        rb.add(item)
        seen += 1
        if seen < args.learning_starts or seen % args.train_every:
            continue
        obs, act, rew, nobs, done = rb.sample(args.batch_size)
        with torch.no_grad():
            y = rew + 0.99 * target(nobs).max(1)[0] * (1.0 - done)
        q = net(obs).gather(1, act.long().unsqueeze(1)).squeeze(1)
        loss = nn.functional.mse_loss(q, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        updates += 1
        if updates % args.target_every == 0:
            target.load_state_dict(net.state_dict())
    thread.join()
    print(f"final: transitions={seen} updates={updates}")


if __name__ == "__main__":
    main()

"""Tiny training loops whose true split is known: each part busy-waits a set time inside the code a hook sees."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch


def spin(seconds: float) -> None:
    """Busy-wait (sleep would hand the core to the other tests' processes and time nothing)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class SlowEnv(gym.Env):
    """One-dimensional env whose ``step`` takes ``step_s``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, step_s: float = 0.0) -> None:
        self.step_s = step_s

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        spin(self.step_s)
        return np.zeros(4, np.float32), 1.0, False, False, {}


class SlowNet(torch.nn.Module):
    """A linear layer (and two nested modules) whose forward also takes ``forward_s``."""

    def __init__(self, forward_s: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        self.forward_s = forward_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(self.forward_s)
        return self.body(x)


class _SlowBackward(torch.autograd.Function):
    seconds = 0.0

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        spin(_SlowBackward.seconds)
        return grad


def known_loop(
    iterations: int = 6,
    steps: int = 8,
    num_envs: int = 2,
    env_s: float = 0.002,
    infer_s: float = 0.001,
    forward_s: float = 0.002,
    loss_s: float = 0.001,
    backward_s: float = 0.002,
    other_s: float = 0.001,
) -> dict[str, float]:
    """A PPO-shaped loop, timed by hand around exactly the calls the hooks see.

    Returns the hand-timed seconds per phase over the steady iterations (all but the first): the true split, taken
    in the same run, so a busy machine slows both measurements alike.
    """
    clock = time.perf_counter
    envs = gym.vector.SyncVectorEnv([lambda: SlowEnv(env_s) for _ in range(num_envs)])
    net = SlowNet()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    obs, _ = envs.reset(seed=0)
    _SlowBackward.seconds = backward_s
    truth = dict.fromkeys(("env/step", "inference", "train/forward", "train/backward", "train/optimizer"), 0.0)

    def book(phase: str, t0: float, it: int) -> float:
        t1 = clock()
        if it > 0:
            truth[phase] += t1 - t0
        return t1

    for it in range(iterations):
        for _ in range(steps):
            net.forward_s = infer_s
            x = torch.as_tensor(obs)
            t = clock()
            with torch.no_grad():
                net(x)
            t = book("inference", t, it)
            action = np.zeros(num_envs, np.int64)
            t = clock()
            obs, *_ = envs.step(action)
            book("env/step", t, it)
            spin(other_s / steps)
        net.forward_s = forward_s
        x = torch.zeros(16, 4)
        t = clock()
        out = net(x)
        spin(loss_s)  # the loss computation: part of the sticky training forward
        loss = _SlowBackward.apply(out).pow(2).mean()
        t = book("train/forward", t, it)
        opt.zero_grad()
        t = book("train/optimizer", t, it)
        loss.backward()
        t = book("train/backward", t, it)
        opt.step()
        book("train/optimizer", t, it)
    envs.close()
    return truth

"""PPO's configuration: one dataclass whose field help texts become ``rlbench run ppo-cartpole --help``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option


@dataclass
class PPOConfig:
    """PPO on a discrete- or continuous-action gymnasium env (defaults: the rlox report's CartPole setting)."""

    env: str = option("gymnasium env id; CartPole-v1 runs on rlbench's batched NumPy CartPole", default="CartPole-v1")
    total_steps: int = option("agent steps (env transitions summed over envs) to train for", default=50_000)
    num_envs: int = option("environments stepped together", default=8)
    rollout_steps: int = option("steps per env per rollout (T)", default=128)
    epochs: int = option("passes over each rollout", default=4)
    minibatches: int = option("minibatches per epoch", default=2)
    hidden: tuple[int, ...] = option("hidden layer sizes of actor and critic", default=(64, 64))
    activation: Literal["tanh", "relu"] = option("hidden activation", default="tanh")
    network: Literal["fused", "separate"] = option(
        "actor-critic layout: fused (stacked weights, one batched matmul per depth) or separate", default="fused"
    )
    init: Literal["torch", "orthogonal"] = option(
        "weight init: orthogonal (SB3/CleanRL) or torch (PyTorch default)", default="orthogonal"
    )
    lr: float = option("Adam learning rate", default=2.5e-4)
    adam_eps: float = option("Adam epsilon", default=1e-5)
    gamma: float = option("discount factor", default=0.99)
    gae_lambda: float = option("GAE lambda", default=0.95)
    clip_coef: float = option("PPO clipping range epsilon", default=0.2)
    vf_coef: float = option("value-loss weight", default=0.5)
    ent_coef: float = option("entropy-bonus weight", default=0.0)
    max_grad_norm: float = option("gradient-norm clipping threshold", default=0.5)
    normalize_advantages: bool = option("standardize advantages per minibatch", default=True)
    recompute_advantages: bool = option("recompute values and GAE before every epoch (TorchRL style)", default=False)
    seed: int = option("random seed (envs, networks, sampling)", default=0)
    device: str = option("torch device for the update: auto, cpu, cuda[:N] or mps", default="auto")
    inference: Literal["auto", "numpy", "torch"] = option(
        "rollout inference: auto (numpy on cpu, torch elsewhere), numpy or torch", default="auto"
    )
    gradients: Literal["auto", "manual", "autograd"] = option(
        "auto (hand-written PPO gradients where supported: fused network, discrete actions), manual or autograd",
        default="auto",
    )
    optimizer: Literal["lean", "torch"] = option(
        "Adam implementation: lean (rlbench's, same math, no torch.optim overhead) or torch", default="lean"
    )
    collector: Literal["sync", "async"] = option(
        "rollout collector: sync (one vectorized env, one policy call per step) or async (--num-envs env workers, "
        "actions from a batched inference server)",
        default="sync",
    )
    transport: Literal["slot", "lock", "direct", "multiprocess"] = option(
        "async collector's transport: slot (lock-free slots), lock (queue + futures), direct (no server) or "
        "multiprocess (env workers in processes)",
        default="slot",
    )
    threads: int = option("torch intra-op threads (1 is fastest for tiny MLPs on shared cores)", default=1)
    eval_episodes: int = option("deterministic evaluation episodes after training", default=10)
    return_threshold: float = option("return counted as solved (NaN: the env's reward_threshold)", default=math.nan)

    def validate(self) -> None:
        """Check values and their combinations.

        Raises:
            UsageError: Naming the offending parameter and the accepted range.
        """
        check_choices(self)  # every Literal field's value among its declared ones
        positive = ("total_steps", "num_envs", "rollout_steps", "epochs", "minibatches", "threads")
        for name in positive:
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.eval_episodes < 0:
            raise UsageError(f"--eval-episodes must be 0 or more, got {self.eval_episodes}")
        batch = self.num_envs * self.rollout_steps
        if self.total_steps < batch:
            raise UsageError(
                f"--total-steps {self.total_steps} is less than one rollout (num_envs x rollout_steps = {batch}); "
                f"use at least {batch}"
            )
        if self.minibatches > batch:
            raise UsageError(f"--minibatches {self.minibatches} exceeds the rollout size {batch}")
        for name in ("lr", "adam_eps", "max_grad_norm", "clip_coef"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UsageError(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(self, name)}")
        if self.gradients == "manual" and self.network != "fused":
            raise UsageError("--gradients manual needs --network fused; use auto or autograd")

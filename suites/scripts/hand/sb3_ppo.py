"""Hand-instrumented copy of ../sb3_ppo.py: the same training, with time.perf_counter() accumulators per phase.

SB3 owns the loop, so the timers go on the objects it calls: a PPO subclass times collect_rollouts (collect) and train
(train) as parent phases; the VecEnv instance's step/reset are env; the policy instance's forward and predict_values are
inference while rollouts are collected; the rollout buffer's compute_returns_and_advantage is advantage (inside collect).
In train, forward runs from the start of policy.evaluate_actions to the start of optimizer.zero_grad() (the loss math in
between included), backward is torch.Tensor.backward, optimizer is zero_grad + clip_grad_norm_ + step. loop_s is the
model.learn(...) call. With RLBENCH_HAND_OUT set, the totals are written there as JSON.

Run: python sb3_ppo.py --seed 1 --total-timesteps 20000
"""

import argparse
import json
import os
import time

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv

PHASE_S = dict.fromkeys(("env", "inference", "forward", "backward", "optimizer", "advantage", "collect", "train"), 0.0)


def timed(fn, phase):
    """fn, booking the wall time of each call to PHASE_S[phase]."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASE_S[phase] += time.perf_counter() - t0

    return wrapper


class TimedPPO(PPO):
    """PPO with the collection and update phases timed; the training itself is untouched."""

    def collect_rollouts(self, env, callback, rollout_buffer, n_rollout_steps):
        policy = self.policy
        policy.forward = timed(policy.forward, "inference")  # the instance attribute shadows the class method
        policy.predict_values = timed(policy.predict_values, "inference")  # bootstrap and truncation values
        t0 = time.perf_counter()
        try:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        finally:
            PHASE_S["collect"] += time.perf_counter() - t0
            del policy.forward, policy.predict_values

    def train(self):
        policy, optimizer = self.policy, self.policy.optimizer
        forward_t0 = None
        real_evaluate_actions, real_zero_grad = policy.evaluate_actions, optimizer.zero_grad
        real_backward, real_clip = torch.Tensor.backward, torch.nn.utils.clip_grad_norm_

        def evaluate_actions(*args, **kwargs):
            nonlocal forward_t0
            forward_t0 = time.perf_counter()  # forward runs on through the loss math, until zero_grad
            return real_evaluate_actions(*args, **kwargs)

        def zero_grad(*args, **kwargs):
            nonlocal forward_t0
            t0 = time.perf_counter()
            if forward_t0 is not None:
                PHASE_S["forward"] += t0 - forward_t0
                forward_t0 = None
            try:
                return real_zero_grad(*args, **kwargs)
            finally:
                PHASE_S["optimizer"] += time.perf_counter() - t0

        policy.evaluate_actions = evaluate_actions
        optimizer.zero_grad = zero_grad
        optimizer.step = timed(optimizer.step, "optimizer")
        torch.Tensor.backward = timed(real_backward, "backward")
        torch.nn.utils.clip_grad_norm_ = timed(real_clip, "optimizer")
        t0 = time.perf_counter()
        try:
            return super().train()
        finally:
            PHASE_S["train"] += time.perf_counter() - t0
            torch.Tensor.backward, torch.nn.utils.clip_grad_norm_ = real_backward, real_clip
            del policy.evaluate_actions, optimizer.zero_grad, optimizer.step


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--total-timesteps", type=int, default=20000, help="total timesteps of the experiment")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--n-envs", type=int, default=4, help="vectorized envs")
    parser.add_argument(
        "--subproc", action="store_true", help="step each env in a worker process (SB3's SubprocVecEnv, not DummyVecEnv)"
    )
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.torch_threads)

    extra = {}
    if args.subproc:  # each worker's own env time, hand-timed in the worker (timers.py), written when it is closed
        from timers import timed_env

        extra = {"vec_env_cls": SubprocVecEnv, "wrapper_class": timed_env}
    env = make_vec_env("CartPole-v1", n_envs=args.n_envs, seed=args.seed, **extra)
    model = TimedPPO("MlpPolicy", env, n_steps=128, batch_size=128, n_epochs=4, seed=args.seed, device="cpu", verbose=0)
    model.env.step = timed(model.env.step, "env")  # the VecEnv the model steps (make_vec_env's DummyVecEnv)
    model.env.reset = timed(model.env.reset, "env")
    buffer = model.rollout_buffer
    buffer.compute_returns_and_advantage = timed(buffer.compute_returns_and_advantage, "advantage")

    loop_t0 = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps)
    loop_s = time.perf_counter() - loop_t0

    # every sub-env is wrapped in a Monitor by make_vec_env; it keeps all episode returns, the model only the last 100
    episodes = sum(len(returns) for returns in env.env_method("get_episode_rewards"))
    last10 = [info["r"] for info in list(model.ep_info_buffer)[-10:]]
    mean_last10 = float(np.mean(last10)) if last10 else float("nan")
    print(f"final: episodes={episodes} mean_return_last10={mean_last10:.2f} global_step={model.num_timesteps}", flush=True)
    env.close()

    out_path = os.environ.get("RLBENCH_HAND_OUT")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"loop_s": loop_s, "steps": model.num_timesteps, "phases": PHASE_S, "script": "sb3_ppo"}, f, indent=2)


if __name__ == "__main__":
    main()

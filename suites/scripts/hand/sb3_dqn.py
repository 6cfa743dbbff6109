"""Hand-instrumented copy of ../sb3_dqn.py: the same training, with time.perf_counter() accumulators per phase.

SB3 owns the loop, so the timers go on the objects it calls: a DQN subclass times collect_rollouts (collect) and train
(train) as parent phases; the VecEnv instance's step/reset are env; the policy instance's predict (the greedy action:
observation to tensor, Q-network, argmax, back to numpy; epsilon's random actions and the warm-up's are not acting) is
acting; the replay buffer instance's add (in collect) and sample (in train) are replay; polyak_update, which DQN's
_on_step calls from collect every target_update_interval steps, is target_update. In train, target runs from the
target network's forward (the first call inside the `with th.no_grad():` TD-target block) to the online network's
grad-enabled forward, which starts forward; forward runs on through the loss math until optimizer.zero_grad();
backward is torch.Tensor.backward, optimizer is zero_grad + clip_grad_norm_ + step. loop_s is the model.learn(...)
call. With RLBENCH_HAND_OUT set, the totals are written there as JSON.

Run: python sb3_dqn.py --seed 1 --total-timesteps 3000
"""

import argparse
import json
import os
import time

import numpy as np
import stable_baselines3.dqn.dqn
import torch
from stable_baselines3 import DQN

PHASE_S = dict.fromkeys(
    ("env", "acting", "replay", "target", "forward", "backward", "optimizer", "target_update", "collect", "train"), 0.0
)


def timed(fn, phase):
    """fn, booking the wall time of each call to PHASE_S[phase]."""

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASE_S[phase] += time.perf_counter() - t0

    return wrapper


class Stretch:
    """The phase (target or forward) running in train between hooked calls: switch() closes it and opens the next."""

    phase, t0 = None, 0.0

    @classmethod
    def switch(cls, phase):
        now = time.perf_counter()
        if cls.phase is not None:
            PHASE_S[cls.phase] += now - cls.t0
        cls.phase, cls.t0 = phase, now


class TimedDQN(DQN):
    """DQN with the collection and update phases timed; the training itself is untouched."""

    training_now = False

    def collect_rollouts(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().collect_rollouts(*args, **kwargs)
        finally:
            PHASE_S["collect"] += time.perf_counter() - t0

    def train(self, *args, **kwargs):
        t0 = time.perf_counter()
        self.training_now = True
        try:
            return super().train(*args, **kwargs)
        finally:
            self.training_now = False
            Stretch.switch(None)
            PHASE_S["train"] += time.perf_counter() - t0


def instrument(model):
    """Timers on the model's env, policy, networks, buffer and optimizer (instance attributes shadow the methods)."""
    model.env.step = timed(model.env.step, "env")  # the VecEnv the model steps (a DummyVecEnv around a Monitor)
    model.env.reset = timed(model.env.reset, "env")
    model.policy.predict = timed(model.policy.predict, "acting")
    model.replay_buffer.add = timed(model.replay_buffer.add, "replay")
    model.replay_buffer.sample = timed(model.replay_buffer.sample, "replay")
    stable_baselines3.dqn.dqn.polyak_update = timed(stable_baselines3.dqn.dqn.polyak_update, "target_update")

    real_target_forward, real_forward = model.q_net_target.forward, model.q_net.forward

    def target_forward(*args, **kwargs):
        if model.training_now:
            Stretch.switch("target")
        return real_target_forward(*args, **kwargs)

    def forward(*args, **kwargs):
        if model.training_now and torch.is_grad_enabled():
            Stretch.switch("forward")  # runs on through the loss math, until zero_grad
        return real_forward(*args, **kwargs)

    optimizer = model.policy.optimizer
    real_zero_grad = optimizer.zero_grad

    def zero_grad(*args, **kwargs):
        Stretch.switch(None)
        t0 = time.perf_counter()
        try:
            return real_zero_grad(*args, **kwargs)
        finally:
            PHASE_S["optimizer"] += time.perf_counter() - t0

    model.q_net_target.forward, model.q_net.forward = target_forward, forward
    optimizer.zero_grad = zero_grad
    optimizer.step = timed(optimizer.step, "optimizer")
    torch.Tensor.backward = timed(torch.Tensor.backward, "backward")
    torch.nn.utils.clip_grad_norm_ = timed(torch.nn.utils.clip_grad_norm_, "optimizer")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--total-timesteps", type=int, default=3000, help="total timesteps of the experiment")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.torch_threads)

    model = TimedDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_rate=2.5e-4,
        buffer_size=10000,
        learning_starts=500,
        batch_size=64,
        train_freq=1,
        gradient_steps=1,
        target_update_interval=100,
        exploration_fraction=0.5,
        policy_kwargs={"net_arch": [64, 64]},
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    instrument(model)

    loop_t0 = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps)
    loop_s = time.perf_counter() - loop_t0

    # the model wraps its env in a Monitor, which keeps all episode returns; the model only the last 100
    env = model.get_env()
    episodes = sum(len(returns) for returns in env.env_method("get_episode_rewards"))
    last10 = [info["r"] for info in list(model.ep_info_buffer)[-10:]]
    mean_last10 = float(np.mean(last10)) if last10 else float("nan")
    print(f"final: episodes={episodes} mean_return_last10={mean_last10:.2f} global_step={model.num_timesteps}", flush=True)
    env.close()

    out_path = os.environ.get("RLBENCH_HAND_OUT")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"loop_s": loop_s, "steps": model.num_timesteps, "phases": PHASE_S, "script": "sb3_dqn"}, f, indent=2)


if __name__ == "__main__":
    main()

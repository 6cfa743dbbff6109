"""Hand-instrumented copy of ../torchrl_dqn.py: the same training, with time.perf_counter() accumulators per phase.

The collector hides the env loop, so its own iteration (next(iterator)) is timed as collect, and inside it the TorchRL
env's step_and_maybe_reset/reset (what the collector calls) are timed as env and the exploring policy instance's forward
(Q-network, argmax, epsilon-greedy) as acting, both only while the collector is iterating (the first
INIT_RANDOM_FRAMES come from the collector's random policy: not acting). Outside collect: replay is rb.extend and
rb.sample, forward is loss_module(sample) (DQNLoss computes its no_grad TD target inside, so there is no separate target
phase), optimizer is zero_grad + step, backward is loss_vals["loss"].backward(), target_update is updater.step().
loop_s runs from just before the iterator over the collector is created to the end of the last batch. With
RLBENCH_HAND_OUT set, the totals are written there as JSON.

Run: python torchrl_dqn.py --seed 1 --total-frames 2000
"""

import argparse
import json
import os
import time

import torch
from tensordict.nn import TensorDictSequential
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import RewardSum, StepCounter, TransformedEnv
from torchrl.envs.libs.gym import GymEnv
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate

try:  # torchrl >= 0.12 calls the single-process collector Collector
    from torchrl.collectors import Collector
except ImportError:  # older torchrl
    from torchrl.collectors import SyncDataCollector as Collector

FRAMES_PER_BATCH = 10
INIT_RANDOM_FRAMES = 500
BUFFER_SIZE = 10000
BATCH_SIZE = 64
OPTIM_STEPS = 10  # one gradient step per collected frame
LEARNING_RATE = 2.5e-4

PHASE_S = dict.fromkeys(("env", "acting", "replay", "forward", "backward", "optimizer", "target_update", "collect"), 0.0)
COLLECTING = False  # True while the collector is producing a batch


def timed_while_collecting(fn, phase):
    """fn, booking the wall time of the calls made while the collector iterates to PHASE_S[phase]."""

    def wrapper(*args, **kwargs):
        if not COLLECTING:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASE_S[phase] += time.perf_counter() - t0

    return wrapper


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--total-frames", type=int, default=2000, help="total environment frames to collect")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    return parser.parse_args()


def main():
    global COLLECTING
    args = parse_args()
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)

    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
    env.append_transform(RewardSum())
    env.set_seed(args.seed)

    value_mlp = MLP(out_features=env.action_spec.shape[-1], num_cells=[64, 64])
    policy = QValueActor(value_mlp, in_keys=["observation"], spec=env.action_spec)
    exploration = EGreedyModule(env.action_spec, annealing_num_steps=args.total_frames // 2, eps_init=1.0, eps_end=0.05)
    policy_explore = TensorDictSequential(policy, exploration)
    policy_explore(env.reset())  # materialize the lazy MLP before the loss copies it for its target network
    # env stepping as the collector sees it: TorchRL's own env calls (TensorDict packing and transforms included)
    env.step_and_maybe_reset = timed_while_collecting(env.step_and_maybe_reset, "env")
    env.reset = timed_while_collecting(env.reset, "env")
    policy_explore.forward = timed_while_collecting(policy_explore.forward, "acting")  # the collector calls it

    collector = Collector(
        env,
        policy_explore,
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=args.total_frames,
        init_random_frames=INIT_RANDOM_FRAMES,
        device="cpu",
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(BUFFER_SIZE))
    loss_module = DQNLoss(value_network=policy, action_space=env.action_spec, delay_value=True)
    optim = torch.optim.Adam(loss_module.parameters(), lr=LEARNING_RATE)
    updater = SoftUpdate(loss_module, eps=0.99)

    frames = 0
    episode_returns = []
    loop_t0 = time.perf_counter()
    iterator = iter(collector)
    i = -1
    while True:
        t0 = time.perf_counter()
        COLLECTING = True
        try:
            data = next(iterator)
        except StopIteration:
            break
        finally:
            COLLECTING = False
            PHASE_S["collect"] += time.perf_counter() - t0
        i += 1
        frames += data.numel()
        t0 = time.perf_counter()
        rb.extend(data)
        PHASE_S["replay"] += time.perf_counter() - t0
        if len(rb) > INIT_RANDOM_FRAMES:
            for _ in range(OPTIM_STEPS):
                t0 = time.perf_counter()
                sample = rb.sample(BATCH_SIZE)
                PHASE_S["replay"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                loss_vals = loss_module(sample)
                PHASE_S["forward"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                optim.zero_grad()
                PHASE_S["optimizer"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                loss_vals["loss"].backward()
                PHASE_S["backward"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                optim.step()
                PHASE_S["optimizer"] += time.perf_counter() - t0
                t0 = time.perf_counter()
                updater.step()
                PHASE_S["target_update"] += time.perf_counter() - t0
            exploration.step(data.numel())

        done = data["next", "done"].squeeze(-1)
        episode_returns.extend(data["next", "episode_reward"][done].squeeze(-1).tolist())
        if (i + 1) % 100 == 0:
            recent = episode_returns[-10:]
            mean_recent = sum(recent) / len(recent) if recent else float("nan")
            print(f"batch={i + 1} frames={frames} mean_return_last10={mean_recent:.1f}", flush=True)

    loop_s = time.perf_counter() - loop_t0

    collector.shutdown()
    last10 = episode_returns[-10:]
    mean_last10 = sum(last10) / len(last10) if last10 else float("nan")
    print(f"final: episodes={len(episode_returns)} mean_return_last10={mean_last10:.2f} global_step={frames}", flush=True)

    out_path = os.environ.get("RLBENCH_HAND_OUT")
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"loop_s": loop_s, "steps": frames, "phases": PHASE_S, "script": "torchrl_dqn"}, f, indent=2)


if __name__ == "__main__":
    main()

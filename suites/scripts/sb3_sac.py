"""SAC on Pendulum-v1 with Stable-Baselines3: one env, small actor and critics, a short warm-up, CPU.

Run: python sb3_sac.py --seed 1 --total-timesteps 1500
"""

import argparse

import numpy as np
import torch
from stable_baselines3 import SAC


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seed of the experiment")
    parser.add_argument("--total-timesteps", type=int, default=1500, help="total timesteps of the experiment")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.torch_threads)

    model = SAC(
        "MlpPolicy",
        "Pendulum-v1",
        learning_rate=1e-3,
        buffer_size=10000,
        learning_starts=500,
        batch_size=64,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        policy_kwargs={"net_arch": [64, 64]},
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=args.total_timesteps)

    # the model wraps its env in a Monitor, which keeps all episode returns; the model only the last 100
    env = model.get_env()
    episodes = sum(len(returns) for returns in env.env_method("get_episode_rewards"))
    last10 = [info["r"] for info in list(model.ep_info_buffer)[-10:]]
    mean_last10 = float(np.mean(last10)) if last10 else float("nan")
    print(f"final: episodes={episodes} mean_return_last10={mean_last10:.2f} global_step={model.num_timesteps}", flush=True)
    env.close()


if __name__ == "__main__":
    main()

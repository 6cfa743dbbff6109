"""PPO on CartPole-v1 with Stable-Baselines3: four vectorized envs, short rollouts, CPU.

Run: python sb3_ppo.py --seed 1 --total-timesteps 20000
"""

import argparse

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv


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

    env = make_vec_env("CartPole-v1", n_envs=args.n_envs, seed=args.seed, vec_env_cls=SubprocVecEnv if args.subproc else None)
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=128, n_epochs=4, seed=args.seed, device="cpu", verbose=0)
    model.learn(total_timesteps=args.total_timesteps)

    # every sub-env is wrapped in a Monitor by make_vec_env; it keeps all episode returns, the model only the last 100
    episodes = sum(len(returns) for returns in env.env_method("get_episode_rewards"))
    last10 = [info["r"] for info in list(model.ep_info_buffer)[-10:]]
    mean_last10 = float(np.mean(last10)) if last10 else float("nan")
    print(f"final: episodes={episodes} mean_return_last10={mean_last10:.2f} global_step={model.num_timesteps}", flush=True)
    env.close()


if __name__ == "__main__":
    main()

"""Ordinary user training scripts for `rlbench profile -- python script.py` to profile unmodified, and hand-timed copies.

The top-level scripts here (`cleanrl_ppo.py`, `sb3_ppo.py`, `torchrl_ppo.py`) are plain PPO-on-CartPole training programs
written the way people write them with CleanRL, Stable-Baselines3 and TorchRL; they do not import rlbench and know nothing
about being measured. The `hand/` directory holds copies of the same scripts with `time.perf_counter()` accumulators placed
by hand around each phase of the loop (env, inference, forward, backward, optimizer, advantage, ...); when the environment
variable `RLBENCH_HAND_OUT` names a file they write their phase totals there as JSON, which the tests and the accuracy checks
compare against what the profiler attributes to the unmodified scripts. Same flags, defaults and seed give the same training.
"""

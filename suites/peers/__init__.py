"""Other libraries' PPO and SAC beside rlbench's, interleaved per seed in one run: ``rlbench run peers``."""

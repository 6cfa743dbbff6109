"""Deprecated package, kept for one release: the SB3 callback is ``rlbench.profiling.sb3.RlbenchCallback``."""

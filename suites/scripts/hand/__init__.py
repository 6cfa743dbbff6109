"""Hand-instrumented copies of the scripts in `rlbench.suites.scripts`: explicit wall-time accumulators per phase, written to
the JSON file named by `RLBENCH_HAND_OUT`; the ground truth the profiler's attribution is checked against."""

"""``rlbench run transports``: the benchmark (``benchmark``), its load generator and its stress run."""

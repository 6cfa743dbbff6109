"""SAC and DDPG end to end: configuration (``config``) and the instrumented training loop (``train``)."""

"""Collectors: on-policy rollouts, off-policy steps, async batched collection through an inference server, exploration."""

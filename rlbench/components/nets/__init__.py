"""Policy and value networks: actor-critics for PPO (separate and fused), off-policy actors and critics, acting backends."""

"""Off-policy updates: SAC and DDPG on a shared skeleton, Polyak variants, hand-written gradients."""

"""Return and advantage estimators: GAE, TD(0)/TD(lambda), group-relative advantages, KL penalties."""

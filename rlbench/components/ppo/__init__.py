"""PPO: the clipped loss, hand-written gradients for the fused network, and the instrumented update."""

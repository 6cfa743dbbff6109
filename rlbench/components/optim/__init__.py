"""Optimizers: a lean Adam on torch's fused kernel, gradient clipping and flat parameter buffers."""

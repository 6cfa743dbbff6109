"""Integrations with RL libraries for users who call them from their own code (``rlbench profile`` needs none)."""

"""What flows from generators through the scorer to the learner: one group of G sampled actions per state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TrajectorySlice:
    """A generator's output for ``B`` states (NumPy only, so it pickles cheaply between processes).

    Attributes:
        version: Policy version that sampled the actions.
        states: float32 ``(B, state_dim)``.
        actions: int64 ``(B, G)``: G samples per state.
        logps: float32 ``(B, G)``: their log-probabilities under the sampling policy.
        rewards: float32 ``(B, G)``; zeros until the scorer fills them.
        generator: Index of the generator that made it.
        created: Wall-clock time it was generated (``time.time()``).
    """

    version: int
    states: np.ndarray
    actions: np.ndarray
    logps: np.ndarray
    rewards: np.ndarray
    generator: int = 0
    created: float = field(default_factory=time.time)

    @property
    def samples(self) -> int:
        """Number of (state, action) samples: ``B * G``."""
        return int(self.actions.size)

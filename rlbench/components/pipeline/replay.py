"""A replay of scored slices that favours newer policy versions (the reference design's weighting)."""

from __future__ import annotations

from collections import deque

import numpy as np

from rlbench.components.pipeline.slices import TrajectorySlice


class VersionWeightedReplay:
    """Keeps the last ``capacity`` slices; samples them with probability proportional to ``version + 1``.

    Args:
        capacity: Slices kept (the oldest go first).
        seed: Seed of the sampling.
    """

    def __init__(self, capacity: int = 64, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.items: deque[TrajectorySlice] = deque(maxlen=capacity)
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, s: TrajectorySlice) -> None:
        """Store a scored slice."""
        self.items.append(s)

    def weights(self) -> np.ndarray:
        """Sampling probability of each stored slice, oldest first."""
        w = np.array([s.version + 1 for s in self.items], dtype=np.float64)
        return w / w.sum()

    def sample(self, k: int) -> list[TrajectorySlice]:
        """``k`` slices drawn with replacement, newer versions more likely.

        Raises:
            ValueError: If the replay is empty.
        """
        if not self.items:
            raise ValueError("cannot sample from an empty replay: add scored slices first")
        idx = self.rng.choice(len(self.items), size=k, replace=True, p=self.weights())
        return [self.items[i] for i in idx]

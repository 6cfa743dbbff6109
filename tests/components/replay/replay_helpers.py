"""Shared helpers of the replay-buffer tests: batches, a deque reference ring, chi-square, a buffer per variant."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlbench.components.replay import (
    BUFFERS,
    FIELDS,
    MemmapReplayBuffer,
    UniformReplayBuffer,
)

P_MIN = 1e-3  # chi-square tests fail below this p-value (all RNGs are seeded: the outcomes are fixed)
KERNELS = ["numpy", "numba"]


def make_batch(start: int, n: int, episode_len: int = 5) -> dict[str, np.ndarray]:
    """N transitions numbered ``start, start + 1, ...``: every field encodes the step, ``done`` ends episodes."""
    step = np.arange(start, start + n)
    obs = np.stack([step, -step], axis=1).astype(np.float32)
    reward, done = step.astype(np.float32), step % episode_len == episode_len - 1
    return {"obs": obs, "action": reward * 2, "reward": reward, "next_obs": obs + 1, "done": done}


class ReferenceRing:
    """The plain definition: a deque of per-step rows that forgets the oldest beyond ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.rows, self.added = capacity, deque(maxlen=capacity), 0

    def add(self, batch: dict[str, np.ndarray]) -> None:
        for i in range(len(batch["obs"])):
            self.rows.append({k: np.asarray(batch[k][i]) for k in FIELDS})
        self.added += len(batch["obs"])

    def field(self, name: str) -> np.ndarray:
        return np.array([row[name] for row in self.rows])


def chronological(buf: UniformReplayBuffer, name: str) -> np.ndarray:
    """Field ``name`` of ``buf`` from the oldest to the newest row, as NumPy."""
    data = buf.storage[name]
    data = data.cpu().numpy() if isinstance(data, torch.Tensor) else np.asarray(data)
    oldest = buf.cursor if len(buf) == buf.capacity else 0
    return data[(oldest + np.arange(len(buf))) % buf.capacity]


def chi_square_p(counts: np.ndarray, expected: np.ndarray) -> float:
    """Upper-tail p-value of Pearson's chi-square statistic (df = len - 1), via the regularized gamma function."""
    stat = float(((counts - expected) ** 2 / expected).sum())
    return float(torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2, dtype=torch.float64), torch.tensor(stat / 2)))


def new_buffer(variant: str, capacity: int, tmp_path: Path, **kwargs: Any) -> UniformReplayBuffer:
    """Builds one buffer variant with 2-float observations."""
    if variant.startswith("memmap"):
        return MemmapReplayBuffer(tmp_path / "mm", capacity, (2,), **kwargs)
    if variant == "uniform-torch":
        return UniformReplayBuffer(capacity, (2,), backend="torch", **kwargs)
    if "numpy" in variant:
        kwargs["kernel"] = "numpy"
    return BUFFERS[variant.split("-")[0]](capacity, (2,), **kwargs)


VARIANTS = ["uniform", "uniform-torch", "prioritized", "trajectory", "memmap"]
ROWS_VARIANTS = ["uniform-rows", "uniform-numpy-rows", "prioritized-rows", "trajectory-rows", "memmap-rows"]


def push(buf: UniformReplayBuffer, batch: dict[str, np.ndarray], rows: bool, staging: dict[int, np.ndarray]) -> None:
    """``add(batch)``, or ``add_rows`` of the batch packed into a reused staging record array (one per size)."""
    if not rows:
        buf.add(batch)
        return
    n = len(batch["obs"])
    packed = staging.setdefault(n, buf.new_rows(n)) if n % 2 else np.zeros(n, buf.record_dtype)  # also foreign arrays
    for name in FIELDS:
        packed[name] = batch[name]
    buf.add_rows(packed)

"""Replay of sub-trajectories (episode crops) for TD(lambda) targets, never crossing an episode end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlbench.components.replay.uniform import FIELDS, Array, UniformReplayBuffer, check_positive, episode_steps, to_numpy


class TrajectoryReplayBuffer(UniformReplayBuffer):
    """Ring buffer that also records episode ids and samples crops of consecutive steps of single episodes.

    Add the steps of an episode consecutively (e.g. one environment at a time). Episode ids come from
    ``batch["episode"]`` (integers) when given, else from ``done`` (a new id after every done step).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Same arguments as :class:`UniformReplayBuffer`.

        Args:
            *args: Positional arguments of :class:`UniformReplayBuffer`.
            **kwargs: Keyword arguments of :class:`UniformReplayBuffer`.
        """
        super().__init__(*args, **kwargs)
        self.episodes = np.full(self.capacity, -1, dtype=np.int64)  # ring order, -1 = never written
        self._back = np.zeros(self.capacity, dtype=np.int64)  # steps of the same episode written right before a row
        self._next_episode, self._version = 0, 0
        self._eligible: tuple[int, int, np.ndarray] | None = None  # (version, length, eligible start ranks)

    def add(self, batch: Mapping[str, Array]) -> None:
        """Appends N transitions and their episode ids.

        Args:
            batch: ``{field: N rows}`` for every field in :data:`FIELDS`, optionally ``"episode"`` (N integers).

        Raises:
            ValueError: If a field is missing or has a wrong shape.
        """
        if "obs" not in batch:
            raise ValueError(f"batch is missing field 'obs'; need {FIELDS}")
        n, explicit = len(batch["obs"]), "episode" in batch
        labels = to_numpy(batch["episode"]) if explicit else to_numpy(batch.get("done", ()), bool)
        if labels.size != n or (explicit and not np.issubdtype(labels.dtype, np.integer)):
            raise ValueError(f"batch needs {n} 'done' flags or {n} integer 'episode' ids, got {labels.size} {labels.dtype}")
        last = (self._cursor - 1) % self.capacity
        prev = (int(self.episodes[last]), int(self._back[last])) if self._size else (None, -1)
        ids, back, next_episode = episode_steps(labels, explicit, self._next_episode, *prev)
        self._write(batch, ((self.episodes, ids), (self._back, back)))
        self._next_episode, self._version = next_episode, self._version + 1

    def add_rows(self, rows: np.ndarray) -> None:
        """Appends N transitions packed as a record array; episode ids come from their ``done`` flags.

        Args:
            rows: Structured array of shape (N,) and dtype :attr:`record_dtype`.
        """
        self.add({name: rows[name] for name in FIELDS})

    def sample_slices(self, num_slices: int, length: int) -> dict[str, Array]:
        """Draws crops of ``length`` consecutive steps of one episode, uniformly over all eligible starts.

        A start row is eligible when it and the next ``length - 1`` stored steps (in time order, never past the newest
        row) belong to one episode. Rejection sampling first, then a draw from the exact eligible set.

        Args:
            num_slices: Number of crops (>= 1).
            length: Steps per crop (>= 1).

        Returns:
            ``{field: (num_slices, length, ...)}`` plus int64 ``"episode"`` ids and ring ``"indices"`` of shape
            ``(num_slices, length)``; NumPy arrays or (torch backend) tensors.

        Raises:
            ValueError: If an argument is not positive, the buffer is empty or no episode has ``length`` stored steps.
        """
        num_slices, length = self._check_sample(num_slices), check_positive("length", length)
        oldest, span = self._cursor if self._size == self.capacity else 0, self._size - length + 1
        ranks = np.empty(0, np.int64)  # chronological ranks of accepted starts (rank 0: the oldest stored step)
        for _ in range(4 if span > 0 else 0):  # rejection sampling: uniform candidates, keep the eligible ones
            draw = 2 * (num_slices - ranks.size) + 16
            cand = np.multiply(self._rng.random(draw), span, out=np.empty(draw, np.int64), casting="unsafe")
            ends = cand + (oldest + length - 1)
            ends %= self.capacity
            ok = cand[self._back.take(ends) >= length - 1]
            ranks = np.concatenate((ranks, ok)) if ranks.size else ok
            if ranks.size >= num_slices:
                ranks = ranks[:num_slices]
                break
        else:  # rare eligible starts: draw the rest from the exact set
            if self._eligible is None or self._eligible[:2] != (self._version, length):
                ends = (oldest + np.arange(length - 1, self._size)) % self.capacity
                self._eligible = (self._version, length, np.flatnonzero(self._back[ends] >= length - 1))
            eligible = self._eligible[2]
            if eligible.size == 0:
                ring = (oldest + np.arange(self._size)) % self.capacity
                longest = int(np.minimum(self._back[ring], np.arange(self._size)).max()) + 1
                raise ValueError(f"no episode has {length} consecutive stored steps (longest run stored: {longest})")
            ranks = np.concatenate((ranks, eligible[self._rng.integers(0, eligible.size, num_slices - ranks.size)]))
        rows = np.add.outer(ranks + oldest, np.arange(length))
        rows %= self.capacity
        out = self._gather(rows)
        out["episode"], out["indices"] = self.episodes[rows], rows
        if self._is_torch:
            out["episode"], out["indices"] = (torch.from_numpy(out[k]).to(self.device) for k in ("episode", "indices"))
        return out

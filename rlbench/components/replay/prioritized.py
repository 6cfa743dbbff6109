"""Prioritized replay (proportional, with importance weights) on a sum tree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlbench.components.replay.sumtree import SumTree
from rlbench.components.replay.uniform import Array, UniformReplayBuffer, to_numpy


class PrioritizedReplayBuffer(UniformReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) on a :class:`~rlbench.components.replay.sumtree.SumTree`.

    Row ``i`` is drawn with probability ``P(i) = p_i^alpha / sum_j p_j^alpha``, ``p_i = priority_i + eps``; new rows
    get the largest ``p`` seen so far (initially 1). ``sample`` adds ``indices`` (int64) and importance ``weights``
    (float32) ``w_i = (N * P(i))^-beta / max w``, N the number of stored rows and the max taken over the batch.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        *args: Any,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        kernel: str = "auto",
        **kwargs: Any,
    ) -> None:
        """Creates the buffer and its sum tree.

        Args:
            capacity: Number of transitions kept (>= 1).
            obs_shape: Shape of one observation.
            *args: Further positional arguments of :class:`UniformReplayBuffer`.
            alpha: Priority exponent (>= 0; 0 is uniform).
            beta: Importance-sampling exponent (>= 0).
            eps: Added to every priority (> 0) so that no row becomes unreachable.
            kernel: Sum-tree kernel, ``"auto"`` (numba if available), ``"numpy"`` or ``"numba"``.
            **kwargs: Further keyword arguments of :class:`UniformReplayBuffer` (``backend``, ``seed``, ...).

        Raises:
            ValueError: On bad arguments (as :class:`UniformReplayBuffer`), negative alpha or beta, or eps <= 0.
        """
        if not (alpha >= 0 and beta >= 0 and eps > 0):
            raise ValueError(f"need alpha >= 0, beta >= 0 and eps > 0; got alpha={alpha}, beta={beta}, eps={eps}")
        super().__init__(capacity, obs_shape, *args, kernel=kernel, **kwargs)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.tree = SumTree(self.capacity, kernel=kernel)
        self._max_priority = 1.0
        self._fused = self._kernels is not None and self.tree.kernel == "numba"  # one compiled call per sample

    def add(self, batch: Mapping[str, Array]) -> None:
        """Appends N transitions with the largest priority seen so far.

        Args:
            batch: ``{field: N rows}`` for every field in :data:`FIELDS`.

        Raises:
            ValueError: If a field is missing or has a wrong shape.
        """
        start, m = self._write(batch)
        self.tree.fill(start, m, self._max_priority**self.alpha)

    def add_rows(self, rows: np.ndarray) -> None:
        """Appends N transitions packed as a record array (see :meth:`UniformReplayBuffer.add_rows`), max priority.

        Args:
            rows: Structured array of shape (N,) and dtype :attr:`record_dtype`.
        """
        cursor = self._cursor
        super().add_rows(rows)
        m = min(rows.shape[0], self.capacity)
        self.tree.fill((cursor + rows.shape[0] - m) % self.capacity, m, self._max_priority**self.alpha)

    def sample(self, batch_size: int) -> dict[str, Array]:
        """Draws one row in each of ``batch_size`` equal-mass segments of the total priority (stratified sampling).

        Args:
            batch_size: Number of rows (>= 1).

        Returns:
            ``{field: rows, "indices": int64, "weights": float32}``, NumPy arrays or (torch backend) tensors.

        Raises:
            ValueError: If the buffer is empty or ``batch_size`` is not positive.
        """
        if self._fused:  # draws, descent, weights and gather in one compiled call
            n = self._check_sample(batch_size)
            words, idx, weights = (
                np.empty((n, self._words.shape[1]), self._words.dtype),
                np.empty(n, np.int64),
                np.empty(n, np.float32),
            )
            self._kernels.prioritized_sample(
                self.tree.tree, self.tree.depth, self._size, self.beta, self._kstate, self._words, idx, weights, words
            )
            rows = words.view(self._rec_dtype)[:, 0]
            out = {name: rows[name] for name in self.specs}
            out["indices"], out["weights"] = idx, weights
            return out
        idx, p = self.tree.sample_stratified(self._check_sample(batch_size), self._rng, limit=self._size)
        out = self._gather(idx)
        out["indices"] = idx
        out["weights"] = np.power(p * (1.0 / p.min()), -self.beta, dtype=np.float32)  # the N / total factors cancel
        if self._is_torch:
            out["indices"], out["weights"] = (torch.from_numpy(out[k]).to(self.device) for k in ("indices", "weights"))
        return out

    def sample_torch(self, batch_size: int) -> dict[str, torch.Tensor]:
        """:meth:`sample` as CPU tensors sharing memory with the fresh NumPy arrays (NumPy backend).

        Args:
            batch_size: Number of rows (>= 1).

        Returns:
            ``{field: tensor, "indices": int64 tensor, "weights": float32 tensor}``.

        Raises:
            ValueError: If the buffer is empty, ``batch_size`` is not positive or the backend is torch.
        """
        if self._is_torch:
            raise ValueError("sample_torch is for the NumPy backend; on the torch backend sample() returns tensors")
        return {k: torch.from_numpy(v) for k, v in self.sample(batch_size).items()}

    def update_priorities(self, indices: Array, priorities: Array) -> None:
        """Sets new priorities (e.g. ``|TD error|``) of stored rows; on duplicated indices the last one wins.

        Args:
            indices: Rows in ``[0, len(self))``, shape (n,) (array, tensor or sequence).
            priorities: Finite non-negative priorities, shape (n,).

        Raises:
            ValueError: On mismatching lengths, out-of-range or non-integer indices, negative or non-finite priorities.
        """
        idx, pri = to_numpy(indices), to_numpy(priorities, np.float64)
        if idx.shape != pri.shape:
            raise ValueError(f"indices and priorities must have the same length, got {idx.size} and {pri.size}")
        if idx.size and (not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= self._size):
            raise ValueError(f"indices must be integers in [0, {self._size}), got {idx.dtype} in [{idx.min()}, {idx.max()}]")
        if idx.size and (not np.isfinite(pri).all() or pri.min() < 0):
            raise ValueError("priorities must be finite and non-negative")
        if idx.size:
            pri = pri + self.eps
            self._max_priority = max(self._max_priority, float(pri.max()))
            self.tree.update(idx, pri**self.alpha)

"""Replay buffers: uniform (NumPy or torch storage), prioritized, episode-slice and disk-backed (memmap), and a registry.

:class:`UniformReplayBuffer` (defined in :mod:`.ringbuffer`) is the ring storage the others extend: same ``add``,
``sample`` and ``sample_torch`` contract. :data:`BUFFERS` maps short names to the classes for the micro-benchmarks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlbench.components.ringbuffer import FIELDS, Array, UniformReplayBuffer, check_positive, episode_steps, to_numpy
from rlbench.components.sumtree import SumTree

__all__ = [
    "BUFFERS",
    "FIELDS",
    "MemmapReplayBuffer",
    "PrioritizedReplayBuffer",
    "TrajectoryReplayBuffer",
    "UniformReplayBuffer",
]


class PrioritizedReplayBuffer(UniformReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016) on a :class:`~rlbench.components.sumtree.SumTree`.

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
            self._kernels.prioritized_sample(self.tree.tree, self.tree.depth, self._size, self.beta, self._kstate,
                                             self._words, idx, weights, words)  # fmt: skip
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


class MemmapReplayBuffer(UniformReplayBuffer):
    """:class:`UniformReplayBuffer` (NumPy backend) on ``np.memmap`` files, for buffers larger than RAM.

    A directory holds one ``<field>.bin`` per field and ``header.json`` (format, capacity, row shapes and dtypes,
    cursor, size). :meth:`flush` and :meth:`close` write the header; :meth:`open` maps an existing buffer again.
    """

    FORMAT, VERSION, HEADER = "rlbench-memmap-replay-buffer", 1, "header.json"

    def __init__(
        self, path: str | os.PathLike[str], capacity: int, obs_shape: tuple[int, ...], *args: Any, **kwargs: Any
    ) -> None:
        """Creates a new buffer in directory ``path`` (made if missing).

        Args:
            path: Directory for the files; must not hold a buffer already.
            capacity: Number of transitions kept (>= 1).
            obs_shape: Shape of one observation.
            *args: Further positional arguments of :class:`UniformReplayBuffer` (``action_shape``, dtypes).
            **kwargs: ``action_shape``, ``obs_dtype``, ``action_dtype``, ``seed`` (the backend is always NumPy).

        Raises:
            ValueError: On bad arguments or if ``path`` already holds a buffer (use :meth:`open`).
        """
        self.path, self._maps, self._closed = Path(path), [], False
        self._mode = kwargs.pop("_mode", "w+")
        if self._mode == "w+":
            if (self.path / self.HEADER).exists():
                raise ValueError(f"{self.path} already holds a replay buffer; use MemmapReplayBuffer.open({str(self.path)!r})")
            self.path.mkdir(parents=True, exist_ok=True)
        super().__init__(capacity, obs_shape, *args, **kwargs)
        if self.backend != "numpy":
            raise ValueError("MemmapReplayBuffer stores NumPy memmaps; use sample_torch() for tensors")
        if self._mode == "w+":
            self.flush()

    def _allocate(self) -> tuple[None, dict[str, np.ndarray]]:
        """Maps ``<path>/<field>.bin`` per field (checking sizes when reopening) as plain ndarray views."""
        views = {}
        for name, (shape, dtype) in self.specs.items():
            file, rows = self.path / f"{name}.bin", (self.capacity, *shape)
            nbytes = math.prod(rows) * dtype.itemsize
            if self._mode != "w+" and file.stat().st_size != nbytes:
                raise ValueError(f"{file} has {file.stat().st_size} bytes, the header implies {nbytes}")
            self._maps.append(np.memmap(file, dtype=dtype, mode=self._mode, shape=rows))
            views[name] = self._maps[-1].view(np.ndarray)
        return None, views

    def flush(self) -> None:
        """Flushes the data files, then atomically rewrites the header (with cursor and size)."""
        self._check_open()
        for mm in self._maps:
            mm.flush()
        fields = {name: {"shape": list(shape), "dtype": dtype.str} for name, (shape, dtype) in self.specs.items()}
        header = {"format": self.FORMAT, "version": self.VERSION, "capacity": self.capacity, "fields": fields,
                  "cursor": self._cursor, "size": self._size}  # fmt: skip
        tmp = self.path / (self.HEADER + ".tmp")
        tmp.write_text(json.dumps(header, indent=1))
        os.replace(tmp, self.path / self.HEADER)

    def close(self) -> None:
        """Flushes and unmaps the files; afterwards the buffer raises ValueError on use (closing twice is fine)."""
        if not self._closed:
            self.flush()
            self._maps, self._storage, self._items, self._out, self._closed = [], {}, (), {}, True

    def _check_open(self) -> None:
        """Raises ValueError if the buffer was closed."""
        if self._closed:
            raise ValueError(f"MemmapReplayBuffer at {self.path} is closed")

    def add(self, batch: Mapping[str, Array]) -> None:
        """See :meth:`UniformReplayBuffer.add`.

        Args:
            batch: ``{field: N rows}`` for every field in :data:`FIELDS`.
        """
        self._check_open()
        super().add(batch)

    def sample(self, batch_size: int) -> dict[str, Array]:
        """See :meth:`UniformReplayBuffer.sample`.

        Args:
            batch_size: Number of rows (>= 1).

        Returns:
            ``{field: rows}`` as fresh NumPy arrays.
        """
        self._check_open()
        return super().sample(batch_size)

    def sample_torch(self, batch_size: int) -> dict[str, torch.Tensor]:
        """See :meth:`UniformReplayBuffer.sample_torch`.

        Args:
            batch_size: Number of rows (>= 1).

        Returns:
            ``{field: tensor}`` over reused buffers.
        """
        self._check_open()
        return super().sample_torch(batch_size)

    def __enter__(self) -> MemmapReplayBuffer:
        """Returns the buffer itself."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the buffer."""
        self.close()

    @classmethod
    def open(cls, path: str | os.PathLike[str], seed: int | None = None) -> MemmapReplayBuffer:
        """Maps an existing buffer again, with its contents, cursor and size.

        Args:
            path: The buffer's directory.
            seed: Seed of the sampling RNG.

        Returns:
            The buffer, mapped read-write.

        Raises:
            ValueError: If ``path`` is not such a buffer or its header does not match its files.
        """
        path, name = Path(path), Path(path) / cls.HEADER
        try:
            header = json.loads(name.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path} is not a MemmapReplayBuffer directory (no readable {cls.HEADER}: {exc})") from None
        if not isinstance(header, dict) or header.get("format") != cls.FORMAT or header.get("version") != cls.VERSION:
            raise ValueError(f"{name} is not a {cls.FORMAT} header of version {cls.VERSION}")
        try:
            fields, cap, cursor, size = header["fields"], header["capacity"], header["cursor"], header["size"]
            specs = {k: (tuple(fields[k]["shape"]), np.dtype(fields[k]["dtype"])) for k in FIELDS}
            (obs_shape, obs_dtype), (action_shape, action_dtype) = specs["obs"], specs["action"]
            buf = cls(path, cap, obs_shape, action_shape, obs_dtype, action_dtype, seed=seed, _mode="r+")
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ValueError(f"{name} does not describe this directory's buffer: {exc}") from None
        if buf.specs != specs or not (0 <= size <= cap and 0 <= cursor < cap and (size == cap or cursor == size)):
            raise ValueError(f"{name} is inconsistent: fields {specs}, capacity {cap}, cursor {cursor}, size {size}")
        buf._cursor, buf._size = int(cursor), int(size)
        return buf


BUFFERS: dict[str, type] = {
    "uniform": UniformReplayBuffer,
    "prioritized": PrioritizedReplayBuffer,
    "trajectory": TrajectoryReplayBuffer,
    "memmap": MemmapReplayBuffer,
}

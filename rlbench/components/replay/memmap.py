"""Disk-backed replay: the uniform ring buffer on ``numpy.memmap`` files that reopen intact."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlbench.components.replay.uniform import FIELDS, Array, UniformReplayBuffer


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
        header = {
            "format": self.FORMAT,
            "version": self.VERSION,
            "capacity": self.capacity,
            "fields": fields,
            "cursor": self._cursor,
            "size": self._size,
        }
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

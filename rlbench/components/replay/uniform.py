"""The uniform replay ring buffer (NumPy or torch storage) that the other buffers of :mod:`.buffers` build on.

Storage is preallocated with ``capacity`` rows. On the NumPy backend all fields of a row sit in one aligned record
(a structured array; ``storage[field]`` are strided views), so gathering a row is one ``take`` touching one or two
cache lines; the torch backend keeps one tensor per field. ``add(batch)`` writes the N rows of a dict of arrays at
the cursor (at most two slice copies per field; of an oversized batch only the last ``capacity`` rows are kept).
``sample(k)`` draws ``k`` rows with replacement from the filled part. On the NumPy backend ``sample_torch(k)``
gathers with ``np.take(..., out=...)`` into a preallocated record array and returns tensors viewing its fields,
overwritten by the next call of the same size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlbench.components.replay import kernels as replay_kernels

FIELDS = ("obs", "action", "reward", "next_obs", "done")
Array = Any  # np.ndarray or torch.Tensor


def check_positive(name: str, value: int) -> int:
    """Returns ``value`` as int if it is a positive integer, else raises ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def to_numpy(x: Array, dtype: Any = None) -> np.ndarray:
    """``x`` (array, tensor or sequence) as a flat NumPy array."""
    return np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=dtype).reshape(-1)


def episode_steps(
    labels: np.ndarray, explicit: bool, next_episode: int, prev_id: int | None, prev_back: int
) -> tuple[np.ndarray | list[int], np.ndarray | list[int], int]:
    """Episode ids and steps since the episode's first stored step for N new rows (trajectory buffer bookkeeping).

    Args:
        labels: Episode ids (``explicit``) or done flags (a new id after every done row), shape (N,).
        explicit: Whether ``labels`` are ids.
        next_episode: Id of the next row when ids come from done flags.
        prev_id: Id of the newest stored row (None if empty); a row continuing it counts on from ``prev_back``.
        prev_back: Steps before the newest stored row in its episode.

    Returns:
        ``(ids, back, next_episode)``: ids and steps back to the episode's first row (int64 arrays, or lists for
        small batches), and the updated counter.
    """
    if labels.size <= 64:  # a Python loop beats a dozen NumPy calls on small batches
        ids, back = [], []
        for x in labels.tolist():
            i = x if explicit else next_episode
            next_episode += 0 if explicit else x
            prev_back, prev_id = (prev_back + 1 if i == prev_id else 0), i
            ids.append(i)
            back.append(prev_back)
        return ids, back, next_episode  # lists: written into the int64 ring arrays directly
    ids = labels.astype(np.int64) if explicit else next_episode + np.cumsum(labels) - labels
    new_run = np.empty(ids.size, dtype=bool)
    new_run[0] = prev_id is None or ids[0] != prev_id
    new_run[1:] = ids[1:] != ids[:-1]
    pos = np.arange(ids.size)
    back = pos - np.maximum.accumulate(np.where(new_run, pos, 0))
    if not new_run[0]:  # the first run continues the stored episode
        back[: np.argmax(np.append(new_run[1:], True)) + 1] += prev_back + 1
    return ids, back, next_episode + (0 if explicit else int(labels.sum()))


class UniformReplayBuffer:
    """Ring buffer with uniform sampling with replacement (``reward`` is stored as float32, ``done`` as bool).

    Attributes:
        capacity: Number of rows.
        backend: ``"numpy"`` or ``"torch"``.
        device: Torch device of the storage.
        specs: ``{field: (row shape, NumPy dtype)}``.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...] = (),
        obs_dtype: Any = np.float32,
        action_dtype: Any = np.float32,
        backend: str = "numpy",
        device: str | torch.device = "cpu",
        seed: int | None = None,
        kernel: str = "auto",
    ) -> None:
        """Allocates zeroed storage.

        Args:
            capacity: Number of transitions kept (>= 1).
            obs_shape: Shape of one observation (and of ``next_obs``).
            action_shape: Shape of one action (``()`` for scalars).
            obs_dtype: NumPy dtype of observations.
            action_dtype: NumPy dtype of actions.
            backend: ``"numpy"`` (arrays in and out) or ``"torch"`` (tensors on ``device``).
            device: Torch device; only ``"cpu"`` with the NumPy backend.
            seed: Seed of the sampling RNG (a NumPy Generator, plus a torch Generator on the torch backend).
            kernel: NumPy backend: ``"numba"`` samples and pushes records with compiled kernels (own SplitMix64 stream,
                seeded from ``seed``), ``"numpy"`` with NumPy calls, ``"auto"`` numba when it imports.

        Raises:
            ValueError: On a non-positive capacity, a bad shape, an unknown backend or kernel, or a device without torch
                backend.
            ImportError: If ``kernel="numba"`` and numba does not import.
        """
        self.capacity = check_positive("capacity", capacity)
        if kernel not in ("auto", "numpy", "numba"):
            raise ValueError(f"unknown replay-buffer kernel {kernel!r}; choose from ('auto', 'numpy', 'numba')")
        if backend not in ("numpy", "torch"):
            raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}")
        if backend == "numpy" and torch.device(device).type != "cpu":
            raise ValueError(f"device {device!r} needs backend='torch' (the NumPy backend stores on the CPU)")
        self.backend, self.device, self._is_torch = backend, torch.device(device), backend == "torch"
        try:
            obs_shape, action_shape = tuple(int(d) for d in obs_shape), tuple(int(d) for d in action_shape)
        except (TypeError, ValueError):
            raise ValueError(f"obs_shape and action_shape must be tuples of ints: {obs_shape!r}, {action_shape!r}") from None
        if min((*obs_shape, *action_shape, 0)) < 0:
            raise ValueError(f"negative dimension in obs_shape {obs_shape} or action_shape {action_shape}")
        odt, adt = np.dtype(obs_dtype), np.dtype(action_dtype)
        self.specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            "obs": (obs_shape, odt),
            "action": (action_shape, adt),
            "reward": ((), np.dtype(np.float32)),
            "next_obs": (obs_shape, odt),
            "done": ((), np.dtype(np.bool_)),
        }
        self._records, self._storage = self._allocate()  # records: (capacity, itemsize) bytes of all fields, or None
        self._items = tuple(self._storage.items())
        self._cursor = self._size = 0
        self._rng = np.random.default_rng(seed)
        if self._is_torch:
            self._gen = torch.Generator(self.device).manual_seed(int(self._rng.integers(2**63)))
        self._out: dict[int, tuple[np.ndarray, np.ndarray, tuple[tuple[np.ndarray, np.ndarray], ...], dict]] = {}
        self._rec_dtype = self.record_dtype
        self._kernels = None if self._records is None or kernel == "numpy" else replay_kernels.kernels()
        if kernel == "numba" and self._kernels is None and self._records is not None:
            raise ImportError("kernel='numba' needs numba (`pip install numba`); use kernel='numpy'")
        self.kernel = "numba" if self._kernels is not None else "numpy"
        self._last_rows: np.ndarray | None = None  # add_rows: the last staging batch seen and its word view
        self._last_words: np.ndarray | None = None
        if self._kernels is not None:
            self._words = replay_kernels.word_view(self._records)
            self._kstate = replay_kernels.new_state(self._rng)
            self._put = replay_kernels.put_rows_kernel()

    @property
    def record_dtype(self) -> np.dtype:
        """Aligned structured dtype of one row: the fields interleaved, padded so every field view stays aligned."""
        if hasattr(self, "_rec_dtype"):
            return self._rec_dtype
        return np.dtype([(name, dtype, shape) for name, (shape, dtype) in self.specs.items()], align=True)

    def _allocate(self) -> tuple[np.ndarray | None, dict[str, Array]]:
        """Zeroed storage: ``(records, {field: storage})``.

        NumPy: the fields are views of one record array, also returned as a ``(capacity, itemsize)`` byte view (a
        take of byte rows is the fastest gather); torch: one tensor per field and no records (the memmap buffer: one
        file per field and no records).
        """
        if not self._is_torch:
            records = np.zeros(self.capacity, dtype=self.record_dtype)
            return records.view(np.uint8).reshape(self.capacity, -1), {name: records[name] for name in self.specs}
        storage = {}
        for name, (shape, dtype) in self.specs.items():
            torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
            storage[name] = torch.zeros((self.capacity, *shape), dtype=torch_dtype, device=self.device)
        return None, storage

    def __len__(self) -> int:
        """Number of transitions stored."""
        return self._size

    @property
    def cursor(self) -> int:
        """Row that the next ``add`` writes first."""
        return self._cursor

    @property
    def storage(self) -> Mapping[str, Array]:
        """The storage per field, in ring order (not chronological once wrapped; NumPy: strided record views)."""
        return self._storage

    def add(self, batch: Mapping[str, Array]) -> None:
        """Appends N transitions, overwriting the oldest ones when full.

        Args:
            batch: ``{field: N rows}`` (arrays or tensors) for every field in :data:`FIELDS`; other keys are ignored.

        Raises:
            ValueError: If a field is missing or has a wrong shape (rows at the cursor may then be partly written).
        """
        if self._is_torch:
            batch = self._tensors(batch)
        c = self._cursor
        try:
            end = c + len(batch["obs"])
            if end < self.capacity:  # fast path: one slice copy per field
                for name, store in self._items:
                    store[c:end] = batch[name]
                self._cursor = end
                self._size = min(self._size + end - c, self.capacity)
            else:
                self._write(batch)
        except KeyError as exc:
            raise ValueError(f"batch is missing field {exc}; need {FIELDS}") from None

    def new_rows(self, n: int) -> np.ndarray:
        """A zeroed record array of ``n`` rows of :attr:`record_dtype` to fill (``rows["obs"] = ...``) for :meth:`add_rows`.

        Args:
            n: Number of rows.

        Returns:
            Structured array of shape (n,); its memory is a word array (``rows.base``) that :meth:`add_rows` copies
            without any dtype conversion.
        """
        if self._kernels is None:
            return np.zeros(n, self._rec_dtype)
        return np.zeros((n, self._words.shape[1]), self._words.dtype).view(self._rec_dtype)[:, 0]

    def add_rows(self, rows: np.ndarray) -> None:
        """Appends N transitions packed as one record array of :attr:`record_dtype` (see :meth:`new_rows`).

        The fast push: with the numba kernel it is one compiled copy of whole records (no per-field work); otherwise,
        and on the torch backend or memmap storage, the fields are written as by :meth:`add`.

        Args:
            rows: Structured array of shape (N,) and dtype :attr:`record_dtype`.

        Raises:
            ValueError: If ``rows`` is not such an array.
        """
        if rows is self._last_rows:  # the usual case: one staging batch refilled and pushed again, checked once
            words = self._last_words
        else:
            words = self._row_words(rows)
            if words is None:
                self.add({name: rows[name] for name in FIELDS})
                return
        c, n = self._cursor, words.shape[0]
        if c + n < self.capacity:  # no wrap-around: one contiguous NumPy copy beats the numba call's dispatch
            self._words[c : c + n] = words
            self._cursor = c + n
        else:
            self._cursor = self._put(self._words, words, c)
        size = self._size + n
        self._size = size if size < self.capacity else self.capacity

    def _row_words(self, rows: np.ndarray) -> np.ndarray | None:
        """Checks a record array for :meth:`add_rows`; returns its rows as words (None without the numba kernel)."""
        if type(rows) is not np.ndarray or rows.ndim != 1 or rows.dtype != self._rec_dtype:
            raise ValueError(f"add_rows needs a 1-D NumPy record array of the buffer's record_dtype, got {rows!r:.80}")
        if self._kernels is None:
            return None
        words = rows.base  # rows from new_rows(): a view of a C-contiguous word array, one row per record
        if not (
            isinstance(words, np.ndarray)
            and words.dtype == self._words.dtype
            and words.ndim == 2
            and words.shape[0] == rows.shape[0]
            and words.flags.c_contiguous
            and rows.strides == (words.strides[0],)
            and words.ctypes.data == rows.ctypes.data
            and words.shape[1] == self._words.shape[1]
        ):
            words = np.ascontiguousarray(rows).view(np.uint8).reshape(rows.shape[0], self._rec_dtype.itemsize)
            words = words.view(self._words.dtype)
            if words.ctypes.data % words.itemsize:  # rare: unaligned copy
                words = words.copy()
        else:
            self._last_rows, self._last_words = rows, words
        return words

    def _tensors(self, batch: Mapping[str, Array]) -> dict[str, Array]:
        """The fields of ``batch`` as tensors (NumPy arrays are wrapped, not copied)."""
        return {k: torch.as_tensor(batch[k]) for k in FIELDS if k in batch}

    def _write(self, batch: Mapping[str, Array], extra: tuple[tuple[Array, Any], ...] = ()) -> tuple[int, int]:
        """Writes the last ``m = min(N, capacity)`` rows of ``batch`` with wrap-around; returns ``(first row, m)``.

        ``extra`` holds further ``(ring array, N rows)`` pairs (e.g. episode bookkeeping) written the same way.
        """
        if self._is_torch:
            batch = self._tensors(batch)
        try:
            n = len(batch["obs"])
            m = min(n, self.capacity)
            start = (self._cursor + n - m) % self.capacity
            first = min(m, self.capacity - start)
            if first == n:  # the common case: no wrap-around, nothing dropped
                for name, store in self._items:
                    store[start : start + n] = batch[name]
                for store, rows in extra:
                    store[start : start + n] = rows
            else:
                for store, rows in [(store, batch[name]) for name, store in self._items] + list(extra):
                    rows = rows[n - m :]
                    store[start : start + first] = rows[:first]
                    store[: m - first] = rows[first:]
        except KeyError as exc:
            raise ValueError(f"batch is missing field {exc}; need {FIELDS}") from None
        self._cursor = (self._cursor + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return start, m

    def _check_sample(self, batch_size: int) -> int:
        """Validates a sample request; returns ``batch_size`` as int."""
        batch_size = check_positive("batch_size", batch_size)
        if self._size == 0:
            raise ValueError(f"cannot sample from an empty {type(self).__name__}; add transitions first")
        return batch_size

    def _gather(self, idx: np.ndarray) -> dict[str, Array]:
        """Rows ``idx`` (any shape) of every field, fresh arrays / tensors of shape ``(*idx.shape, *row_shape)``."""
        if not self._is_torch:
            if self._records is not None:  # one take of whole rows (a take on a strided field view copies the field)
                rows = self._records.take(idx, axis=0).view(self.record_dtype)[..., 0]
                return {name: rows[name] for name in self.specs}  # strided views of the fresh rows (densifying: 2x time)
            return {name: store.take(idx, axis=0) for name, store in self._items}
        t = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64)).to(self.device).reshape(-1)
        return {name: store.index_select(0, t).reshape(*idx.shape, *store.shape[1:]) for name, store in self._items}

    def sample(self, batch_size: int) -> dict[str, Array]:
        """Draws ``batch_size`` transitions uniformly with replacement.

        Args:
            batch_size: Number of rows (>= 1).

        Returns:
            ``{field: rows}``: tensors on ``device`` (torch backend), else NumPy field views of one freshly gathered
            record array (strided like :meth:`sample_torch`'s; ``np.ascontiguousarray`` them if needed).

        Raises:
            ValueError: If the buffer is empty or ``batch_size`` is not positive.
        """
        batch_size = self._check_sample(batch_size)
        if self._is_torch:
            idx = torch.randint(self._size, (batch_size,), generator=self._gen, device=self.device)
            return {name: store.index_select(0, idx) for name, store in self._items}
        if self._kernels is not None:  # one compiled call: draws and gathers whole records
            words = np.empty((batch_size, self._words.shape[1]), self._words.dtype)
            self._kernels.uniform_gather(self._words, self._size, self._kstate, np.empty(batch_size, np.int64), words)
            rows = words.view(self._rec_dtype)[:, 0]
            return {name: rows[name] for name in self.specs}
        u = self._rng.random(batch_size)
        u *= self._size
        return self._gather(u.astype(np.intp))  # floor(u * size) < size for every float64 u < 1; faster than integers()

    def sample_torch(self, batch_size: int) -> dict[str, torch.Tensor]:
        """Like :meth:`sample` on the NumPy backend, as CPU tensors over reused buffers (no per-call allocation).

        Args:
            batch_size: Number of rows (>= 1).

        Returns:
            ``{field: tensor}``, overwritten by the next ``sample_torch`` call of this batch size. Gathering whole
            records (one cache line or two per row instead of one per field) makes them strided views, rows
            ``record_dtype.itemsize`` bytes apart: ``.contiguous()`` or ``.to(device)`` if a consumer needs dense rows.

        Raises:
            ValueError: If the buffer is empty, ``batch_size`` is not positive or the backend is torch.
        """
        bufs = self._out.get(batch_size)
        if bufs is None or self._size == 0:
            if self._is_torch:
                raise ValueError("sample_torch is for the NumPy backend; on the torch backend sample() returns tensors")
            if self._records is None:  # one output array per field
                pairs = [(s, np.empty((self._check_sample(batch_size), *s.shape[1:]), s.dtype)) for _, s in self._items]
                fields = [out for _, out in pairs]
            else:  # one record array, gathered as byte rows (NumPy) or machine words (numba)
                rows = np.empty(self._check_sample(batch_size), self.record_dtype)
                raw = rows.view(np.uint8).reshape(batch_size, -1) if self._kernels is None else replay_kernels.word_view(rows)
                pairs, fields = [(self._records, raw)], [rows[n] for n in self.specs]
            tensors = {name: torch.from_numpy(f) for name, f in zip(self.specs, fields)}
            bufs = self._out[batch_size] = (np.empty(batch_size), np.empty(batch_size, np.intp), tuple(pairs), tensors)
        u, idx, pairs, tensors = bufs
        if self._kernels is not None:  # one compiled call: draws and gathers whole records
            self._kernels.uniform_gather(self._words, self._size, self._kstate, idx, pairs[0][1])
            return dict(tensors)
        self._rng.random(out=u)
        u *= self._size
        np.copyto(idx, u, casting="unsafe")  # floor(u * size) < size for every float64 u < 1
        for source, out in pairs:
            np.take(source, idx, axis=0, out=out, mode="clip")  # mode="clip" does not buffer `out`; idx is in range
        return dict(tensors)

"""Numba kernels of the replay buffers' fast paths: one compiled call per ``sample``, its own random numbers.

Each kernel does a whole sampling request (draws, tree descent, importance weights, row gather) so that a call
pays one dispatch instead of a dozen NumPy calls. Rows are copied as machine words: a record array of the
buffer's aligned ``record_dtype`` is viewed as ``(rows, itemsize // word)`` unsigned integers.

Random numbers come from SplitMix64 (Steele, Lea & Flood 2014; the seeding generator of xoshiro, passes
BigCrush), one ``uint64`` state per buffer, seeded from the buffer's NumPy generator. An index in ``[0, n)`` is
``floor(u * n)`` with ``u`` a 53-bit uniform in ``[0, 1)``: relative bias below ``n / 2**53``.

Numba is imported and the kernels compiled (explicit signatures, cached on disk) on first use; :func:`kernels`
returns None when numba is missing and the buffers keep their NumPy paths.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_TO_UNIT = 1.0 / (1 << 53)


def word_view(records: np.ndarray) -> np.ndarray:
    """A C-contiguous record array (or its ``(rows, itemsize)`` byte view) as ``(rows, words)`` unsigned words.

    The word is 8, 4, 2 or 1 bytes: the largest that divides the row size and the array's address alignment.
    """
    raw = records.view(np.uint8).reshape(records.shape[0], -1)
    for dtype in (np.uint64, np.uint32, np.uint16):
        size = np.dtype(dtype).itemsize
        if raw.shape[1] % size == 0 and raw.ctypes.data % size == 0:
            return raw.view(dtype)
    return raw


def splitmix_uniforms(state: np.ndarray, n: int) -> np.ndarray:
    """``n`` uniforms in ``[0, 1)`` from SplitMix64, advancing ``state[0]``: the kernels' stream, in plain Python.

    Args:
        state: ``uint64[1]`` state (modified).
        n: Number of draws.

    Returns:
        float64 array of shape (n,).
    """
    s, out, mask = int(state[0]), np.empty(n), (1 << 64) - 1
    for k in range(n):
        s = (s + _GOLDEN) & mask
        z = ((s ^ (s >> 30)) * _MIX1) & mask
        z = ((z ^ (z >> 27)) * _MIX2) & mask
        out[k] = ((z ^ (z >> 31)) >> 11) * _TO_UNIT
    state[0] = s
    return out


def _gather_rows(records: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """``out[k] = records[idx[k]]``; first touches both ends of every row so that their cache misses overlap."""
    words = records.shape[1]
    acc = records[0, 0]
    for k in range(idx.shape[0]):
        acc ^= records[idx[k], 0] ^ records[idx[k], words - 1]
    for k in range(idx.shape[0]):
        j = idx[k]
        for w in range(words):
            out[k, w] = records[j, w]
    out[0, 0] ^= acc & 0  # keeps the touches alive


def _uniform_gather(records: np.ndarray, size: int, state: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """Draws ``len(idx)`` rows uniformly from ``records[:size]`` with replacement into ``idx`` and ``out``."""
    golden, mix1, mix2 = np.uint64(_GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)
    sh11, sh27, sh30, sh31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)
    s = state[0]
    for k in range(idx.shape[0]):
        s = s + golden
        z = (s ^ (s >> sh30)) * mix1
        z = (z ^ (z >> sh27)) * mix2
        u = float((z ^ (z >> sh31)) >> sh11) * _TO_UNIT
        idx[k] = min(int(u * size), size - 1)
    state[0] = s
    _gather_rows(records, idx, out)


def _prioritized_sample(
    tree: np.ndarray,
    depth: int,
    limit: int,
    beta: float,
    state: np.ndarray,
    records: np.ndarray,
    idx: np.ndarray,
    weights: np.ndarray,
    out: np.ndarray,
) -> None:
    """Stratified proportional sampling on a sum tree, importance weights and row gather in one pass.

    One mass uniform in each of ``n`` equal segments of ``[0, total)``; all queries descend level by level
    (independent loads in flight together); ``weights[k] = (p_k / min p) ** -beta`` (float32); rows into ``out``.
    """
    n, leaf0 = idx.shape[0], 1 << depth
    segment = tree[1] / n
    golden, mix1, mix2 = np.uint64(_GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)
    sh11, sh27, sh30, sh31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)
    s = state[0]
    values = np.empty(n)
    for k in range(n):
        s = s + golden
        z = (s ^ (s >> sh30)) * mix1
        z = (z ^ (z >> sh27)) * mix2
        u = float((z ^ (z >> sh31)) >> sh11) * _TO_UNIT
        values[k] = (k + u) * segment
        idx[k] = 1
    state[0] = s
    for _ in range(depth):
        for k in range(n):
            node = idx[k] << 1
            left = tree[node]
            v = values[k]
            go = v >= left  # half-open [prefix, prefix + leaf): zero-mass leaves are never found
            values[k] = v - left * go
            idx[k] = node + go
    p_min = np.inf
    for k in range(n):
        leaf = min(idx[k] - leaf0, limit - 1)  # float rounding may walk right of the filled part
        idx[k] = leaf
        p = tree[leaf0 + leaf]
        values[k] = p
        p_min = min(p_min, p)
    for k in range(n):
        weights[k] = (values[k] / p_min) ** -beta
    _gather_rows(records, idx, out)


class ReplayKernels(NamedTuple):
    """The compiled kernels (see the module docstring)."""

    uniform_gather: Any
    prioritized_sample: Any


@functools.cache
def kernels() -> ReplayKernels | None:
    """Compiles the kernels on first use (explicit signatures: faster dispatch); None when numba does not import."""
    from rlbench.core.jit import njit

    try:
        import numba  # noqa: F401  (None without it)
    except ImportError:
        return None
    global _gather_rows
    jit = functools.partial(njit, nogil=True, boundscheck=False)
    words = ("uint64", "uint32", "uint16", "uint8")
    if not hasattr(_gather_rows, "py_func"):  # called from the kernels below: jitted first (Python calls still work)
        _gather_rows = jit(_gather_rows, [f"void({w}[:, ::1], int64[::1], {w}[:, ::1])" for w in words])
    return ReplayKernels(
        jit(_uniform_gather, [f"void({w}[:, ::1], int64, uint64[::1], int64[::1], {w}[:, ::1])" for w in words]),
        jit(
            _prioritized_sample,
            [
                f"void(float64[::1], int64, int64, float64, uint64[::1], {w}[:, ::1], int64[::1], float32[::1], {w}[:, ::1])"
                for w in words
            ],
        ),
    )


def new_state(rng: np.random.Generator) -> np.ndarray:
    """A SplitMix64 state (``uint64[1]``) seeded from ``rng``."""
    return rng.integers(0, 2**64 - 1, size=1, dtype=np.uint64, endpoint=True)


def _put_rows(records: np.ndarray, rows: np.ndarray, cursor: int) -> int:
    """Writes ``rows`` (word views of records) at ``cursor`` with wrap-around; returns the next cursor."""
    capacity, words = records.shape
    c = cursor
    for k in range(rows.shape[0]):
        for w in range(words):
            records[c, w] = rows[k, w]
        c += 1
        if c == capacity:
            c = 0
    return c


@functools.cache
def put_rows_kernel() -> Any:
    """The jitted :func:`_put_rows` (explicit signatures, cached on disk); None without numba."""
    from rlbench.core.jit import njit

    words = ("uint64", "uint32", "uint16", "uint8")
    try:
        return njit(_put_rows, [f"int64({w}[:, ::1], {w}[:, ::1], int64)" for w in words], nogil=True)
    except ImportError:
        return None

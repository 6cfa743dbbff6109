"""A sum tree on a flat NumPy array, for prioritized replay: vectorized NumPy kernels and optional numba ones.

Layout: ``P`` (the capacity rounded up to a power of two) leaves at ``tree[P:2P]``, node ``i`` has children ``2i`` and
``2i + 1``, the root (the total mass) is ``tree[1]`` and ``tree[0]`` is unused. Parents are always *recomputed* from
their children (never updated by deltas), so ``tree[i] == tree[2i] + tree[2i + 1]`` holds exactly after every update.

Two kernels share this layout. ``"numba"`` walks all queries (or all updated leaves) through the tree level by level
in jitted loops (imported and compiled lazily on first use, cached on disk). ``"numpy"`` does the same with
whole-array operations below level ``_TOP_LEVELS``; above it a search finds the level's node with one ``searchsorted``
over that level's prefix sums, and an update rebuilds the small top levels wholesale (one vectorized add per level).
``kernel="auto"`` picks numba when it imports, else NumPy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

KERNELS = ("auto", "numpy", "numba")
_TOP_LEVELS = 10  # NumPy kernels: level 10 (1024 nodes) is handled at once, replacing 10 per-level steps of 5 calls


def _find_loop(
    tree: np.ndarray, depth: int, values: np.ndarray, segment: float, limit: int, out_idx: np.ndarray, out_p: np.ndarray
) -> None:
    """Prefix-sum descent of all queries, level by level (numba kernel; ``values`` is clobbered).

    With ``segment > 0`` the queries are ``(k + values[k]) * segment`` (stratified sampling from uniforms). Level-major
    order keeps the loads of different queries independent, so their cache misses overlap; the per-query step is
    branch-free (the branch would be mispredicted half of the time).
    """
    n, leaf0 = values.shape[0], 1 << depth
    for k in range(n):
        out_idx[k] = 1
        if segment > 0.0:
            values[k] = (k + values[k]) * segment
    for _ in range(depth):
        for k in range(n):
            node = out_idx[k] << 1
            left = tree[node]
            v = values[k]
            go = v >= left  # half-open [prefix, prefix + leaf): zero-mass leaves are never found
            values[k] = v - left * go
            out_idx[k] = node + go
    for k in range(n):
        leaf = min(out_idx[k] - leaf0, limit - 1)  # float rounding may walk right of the filled part
        out_idx[k] = leaf
        out_p[k] = tree[leaf0 + leaf]


def _update_loop(tree: np.ndarray, depth: int, indices: np.ndarray, values: np.ndarray) -> None:
    """Writes leaves in order (the last write to a duplicated index wins), then recomputes ancestors level by level."""
    leaf0 = 1 << depth
    nodes = indices + leaf0
    for k in range(nodes.shape[0]):
        tree[nodes[k]] = values[k]
    for _ in range(depth):
        prev = -1
        for k in range(nodes.shape[0]):
            node = nodes[k] >> 1
            nodes[k] = node
            if node != prev:  # runs of equal parents (sorted or contiguous indices) are summed once
                tree[node] = tree[2 * node] + tree[2 * node + 1]
                prev = node


def _fill_loop(tree: np.ndarray, depth: int, capacity: int, start: int, count: int, value: float) -> None:
    """Sets leaves ``(start + i) % capacity`` for ``i < count`` to ``value`` and recomputes their ancestors."""
    leaf0 = 1 << depth
    first = min(count, capacity - start)
    for lo, hi in ((start, start + first), (0, count - first)):
        if hi <= lo:
            continue
        lo, hi = lo + leaf0, hi + leaf0
        for node in range(lo, hi):
            tree[node] = value
        for _ in range(depth):
            lo, hi = lo >> 1, ((hi - 1) >> 1) + 1
            for node in range(lo, hi):
                tree[node] = tree[2 * node] + tree[2 * node + 1]


@functools.cache
def _numba_kernels() -> tuple[Callable[..., None], ...] | None:
    """Jits the loop kernels on first use (cached on disk: :func:`rlbench.core.jit.njit`); None when numba does not import."""
    from rlbench.core.jit import njit

    try:
        return tuple(njit(f, nogil=True, boundscheck=False) for f in (_find_loop, _update_loop, _fill_loop))
    except ImportError:
        return None


class SumTree:
    """Binary sum tree over ``capacity`` non-negative leaves, stored as one flat float64 array.

    Attributes:
        capacity: Number of usable leaves.
        depth: Number of levels below the root (``2 ** depth >= capacity``).
        tree: The flat array (``2 * 2 ** depth`` float64); read it, write through :meth:`update`.
        kernel: ``"numpy"`` or ``"numba"``, the kernel in use.
    """

    def __init__(self, capacity: int, kernel: str = "auto") -> None:
        """Creates an all-zero tree.

        Args:
            capacity: Number of leaves (>= 1).
            kernel: ``"auto"`` (numba when available), ``"numpy"`` or ``"numba"``.

        Raises:
            ValueError: If ``capacity < 1`` or ``kernel`` is unknown.
            ImportError: If ``kernel="numba"`` and numba does not import.
        """
        if int(capacity) != capacity or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if kernel not in KERNELS:
            raise ValueError(f"unknown sum-tree kernel {kernel!r}; choose from {KERNELS}")
        self.capacity = int(capacity)
        self.depth = (self.capacity - 1).bit_length()
        self._leaf0 = 1 << self.depth
        self.tree = np.zeros(2 * self._leaf0, dtype=np.float64)
        jitted = _numba_kernels() if kernel != "numpy" else None
        if kernel == "numba" and jitted is None:
            raise ImportError("sum-tree kernel 'numba' needs numba (`pip install numba`); use kernel='numpy'")
        self.kernel = "numba" if jitted is not None else "numpy"
        self._jit_find, self._jit_update, self._jit_fill = jitted if jitted is not None else (None, None, None)
        self._pairs = self.tree.reshape(-1, 2)  # row i: the children of node i
        self._top = min(self.depth, _TOP_LEVELS)  # the NumPy kernels treat levels above this one as a whole
        self._scratch: dict[int, tuple[np.ndarray, ...]] = {}

    @property
    def total(self) -> float:
        """The sum of all leaves (the root)."""
        return float(self.tree[1])

    @property
    def leaves(self) -> np.ndarray:
        """Read-only view of the ``capacity`` leaves."""
        view = self.tree[self._leaf0 : self._leaf0 + self.capacity]
        view.flags.writeable = False
        return view

    def update(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """Sets ``leaf[indices[k]] = values[k]`` (the last write wins on duplicates) and recomputes the ancestors.

        Args:
            indices: Leaf indices in ``[0, capacity)``, shape (n,) (any integer dtype; not range-checked here).
            values: Non-negative leaf values, shape (n,) or a scalar.
        """
        idx = np.ascontiguousarray(indices, dtype=np.intp).reshape(-1)
        vals = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=np.float64), idx.shape))
        if idx.size == 0:
            return
        if self._jit_update is not None:
            self._jit_update(self.tree, self.depth, idx, vals)
            return
        if idx.size > 1:  # last write wins: first occurrence in the reversed arrays
            idx, first = np.unique(idx[::-1], return_index=True)
            vals = vals[::-1][first]
        nodes = idx + self._leaf0
        self.tree[nodes] = vals
        for _ in range(self.depth - self._top):  # duplicated parents are fine: every copy writes the same sum
            nodes >>= 1
            children = self._pairs.take(nodes, axis=0)
            self.tree[nodes] = np.add(children[:, 0], children[:, 1])
        self._rebuild_top()

    def fill(self, start: int, count: int, value: float) -> None:
        """Sets the ``count`` leaves ``start, start + 1, ...`` (wrapping around ``capacity``) to ``value``.

        Args:
            start: First leaf, in ``[0, capacity)``.
            count: Number of leaves, in ``[0, capacity]``.
            value: Non-negative leaf value.
        """
        if self._jit_fill is not None:
            self._jit_fill(self.tree, self.depth, self.capacity, int(start), int(count), float(value))
            return
        first = min(count, self.capacity - start)
        for lo, hi in ((start, start + first), (0, count - first)):
            if hi > lo:
                lo, hi = lo + self._leaf0, hi + self._leaf0
                self.tree[lo:hi] = value
                for _ in range(self.depth - self._top):
                    lo, hi = lo >> 1, ((hi - 1) >> 1) + 1
                    np.add(self._pairs[lo:hi, 0], self._pairs[lo:hi, 1], out=self.tree[lo:hi])
        self._rebuild_top()

    def _rebuild_top(self) -> None:
        """Recomputes every node above level ``_top`` from that level (one vectorized sum per level)."""
        for level in range(self._top - 1, -1, -1):
            children = self._pairs[1 << level : 2 << level]
            np.add(children[:, 0], children[:, 1], out=self.tree[1 << level : 2 << level])

    def find(self, values: np.ndarray, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Prefix-sum search: the leaf ``i`` with ``sum(leaf[:i]) <= v < sum(leaf[:i + 1])`` for every ``v``.

        Args:
            values: Query masses in ``[0, total)``, shape (n,).
            limit: Clamp results to ``[0, limit)`` (guards float rounding past the last non-zero leaf); default capacity.

        Returns:
            ``(indices, leaf_values)``: intp leaf indices and their float64 values, shape (n,).
        """
        limit = self.capacity if limit is None else int(limit)
        v = np.array(values, dtype=np.float64, copy=True).reshape(-1)
        idx, p = np.empty(v.size, dtype=np.intp), np.empty(v.size, dtype=np.float64)
        self._find_into(v, limit, idx, p, np.empty(v.size, dtype=bool))
        return idx, p

    def sample_stratified(self, batch_size: int, rng: np.random.Generator, limit: int | None = None) -> tuple[np.ndarray, ...]:
        """Draws one mass uniformly in each of ``batch_size`` equal segments of ``[0, total)`` and finds its leaf.

        Args:
            batch_size: Number of samples (>= 1).
            rng: Generator for the uniforms (one call).
            limit: Clamp results to ``[0, limit)``; default capacity.

        Returns:
            ``(indices, leaf_values)``: intp leaf indices and float64 leaf values, shape (batch_size,).
        """
        scratch = self._scratch.get(batch_size)
        if scratch is None:
            scratch = self._scratch[batch_size] = (np.arange(batch_size, dtype=np.float64), np.empty(batch_size))
        base, v = scratch
        idx, p = np.empty(batch_size, np.intp), np.empty(batch_size)
        rng.random(out=v)
        segment = self.tree[1] / batch_size
        if self._jit_find is not None:
            self._jit_find(self.tree, self.depth, v, segment, self.capacity if limit is None else int(limit), idx, p)
            return idx, p
        v += base
        v *= segment
        self._find_into(v, self.capacity if limit is None else int(limit), idx, p, np.empty(batch_size, bool))
        return idx, p

    def _find_into(self, v: np.ndarray, limit: int, idx: np.ndarray, p: np.ndarray, mask: np.ndarray) -> None:
        """Runs the descent for masses ``v`` (clobbered) into ``idx`` and ``p``; ``mask`` is bool scratch."""
        if self._jit_find is not None:
            self._jit_find(self.tree, self.depth, v, 0.0, limit, idx, p)
            return
        tree, top = self.tree, self._top
        level = tree[1 << top : 2 << top]
        csum = np.cumsum(level)  # search level `top` at once: first node whose inclusive prefix exceeds v
        np.minimum(np.searchsorted(csum, v, side="right"), (1 << top) - 1, out=idx)
        v -= csum[idx] - level[idx]  # mass left inside that node (float rounding may leave it a hair outside)
        np.maximum(v, 0.0, out=v)
        idx += 1 << top
        for _ in range(self.depth - top):
            np.left_shift(idx, 1, out=idx)  # left child
            np.take(tree, idx, out=p, mode="clip")
            np.greater_equal(v, p, out=mask)  # half-open intervals, as in _find_loop
            np.subtract(v, p, out=v, where=mask)
            np.add(idx, mask, out=idx)
        np.subtract(idx, self._leaf0, out=idx)
        np.minimum(idx, limit - 1, out=idx)
        np.take(tree, idx + self._leaf0, out=p, mode="clip")

    def check(self, rtol: float = 1e-9) -> None:
        """Asserts the invariants: every parent is the sum of its children and the root the sum of the leaves.

        Args:
            rtol: Relative tolerance for root vs. ``sum(leaves)`` (summation orders differ).

        Raises:
            AssertionError: If an invariant is violated.
        """
        t, n = self.tree, self._leaf0
        bad = np.flatnonzero(t[1:n] != t[2 : 2 * n : 2] + t[3 : 2 * n : 2]) + 1
        assert bad.size == 0, f"parents {bad[:5].tolist()} differ from the sum of their children"
        assert np.isclose(t[1], t[n:].sum(), rtol=rtol, atol=0.0), f"root {t[1]} != sum of leaves {t[n:].sum()}"

    def __repr__(self) -> str:
        """Short description with capacity, kernel and total."""
        return f"SumTree(capacity={self.capacity}, kernel={self.kernel!r}, total={self.total:.6g})"

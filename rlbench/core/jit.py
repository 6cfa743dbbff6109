"""rlbench's numba kernels, compiled once and cached on disk in the user's cache folder, never inside the package.

numba keeps a ``cache=True`` kernel's compiled code in the ``__pycache__`` folder beside its source whenever it can
write there. For an installed rlbench that is ``site-packages/rlbench/...``: files pip never installed, so pip never
removes them. After ``pip install .``, a run, then ``pip install -e .`` (the README's two commands in order), they kept
``site-packages/rlbench/`` alive as a bare folder that Python imported as an empty namespace package ahead of the
editable checkout, and every user suite failed (``module 'rlbench' has no attribute 'benchmark'``).

So every rlbench kernel is declared through :func:`njit`, which caches it under :func:`cache_dir`
(``$XDG_CACHE_HOME/rlbench/numba``, by default ``~/.cache/rlbench/numba``). numba's documented setting for the
folder is ``NUMBA_CACHE_DIR``, held as ``numba.config.CACHE_DIR``, and numba picks a kernel's folder when the kernel
is declared; :func:`njit` sets that value only while it declares an rlbench kernel (numba keeps values set in its
config module), so a user's own kernels, in the same process or in a script ``rlbench profile`` runs, cache where
numba would put them. A ``NUMBA_CACHE_DIR`` the user set is left as it is: their kernels and rlbench's go there. Where
the folder cannot be written, an rlbench kernel is compiled without an on-disk cache (each process compiles it again)
rather than cached inside the package.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

_LOCK = threading.Lock()  # (the window in which numba's config names rlbench's folder)


def cache_dir() -> Path:
    """rlbench's per-user cache folder: ``$XDG_CACHE_HOME/rlbench`` (default ``~/.cache/rlbench``);
    ``~/Library/Caches/rlbench`` on macOS and ``%LOCALAPPDATA%\\rlbench\\Cache`` on Windows."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "rlbench" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "rlbench"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "rlbench"


def _writable(folder: Path) -> Path | None:
    """``folder``, created if missing, if a file can be made in it; else None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return None
    return folder


def njit(fn: Callable[..., Any], signature: Any = None, **options: Any) -> Any:
    """``numba.njit(signature, cache=True, **options)(fn)``, its compiled code cached in :func:`cache_dir`.

    Args:
        fn: The kernel's Python function.
        signature: numba signature(s) to compile now (``None``: compiled at the first call).
        **options: Other ``numba.njit`` options (``nogil``, ``boundscheck``, ...).

    Returns:
        The jitted kernel.

    Raises:
        ImportError: numba is not installed.
    """
    import numba
    from numba.core import config

    def declare(cache: bool) -> Any:
        jit = numba.njit(signature, cache=cache, **options) if signature is not None else numba.njit(cache=cache, **options)
        return jit(fn)

    with _LOCK:
        if config.CACHE_DIR:  # the user's NUMBA_CACHE_DIR: outside the package, and theirs to choose
            return declare(True)
        folder = _writable(cache_dir() / "numba")
        if folder is None:
            return declare(False)  # never beside the source: that is inside the installed package
        config.CACHE_DIR = str(folder)
        try:
            return declare(True)
        finally:
            config.CACHE_DIR = ""

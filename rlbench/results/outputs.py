"""Output files that never replace what they should not: the one writer of every report, chart, trace and export.

The rule, for a path the user names (``--report``, ``--trace``, ``-o``, ``--output``, ...) and for every file
rlbench puts beside it:

* **absent, or a regular file**: written whole or not at all. The content goes to a fresh temporary file in the same
  directory, then is renamed onto the path; a rename never leaves a half-written file, and a second rlbench writing
  the same path never shares a temporary name with this one.
* **a character device** (``/dev/null``, ``/dev/stdout`` on a terminal): written through, opened as it is. The
  device stays: nothing is renamed onto it, nothing is deleted, and no file is put beside it (a report on
  ``/dev/null`` draws no ``/dev/null-phases.png``).
* **anything else**: a symbolic link, a FIFO, a socket, a block device or a directory is refused before any work
  starts, as a :class:`~rlbench.core.errors.UsageError` (exit 2) naming the path and what it is. rlbench never turns
  one into a plain file and never writes into the file a link points to: give that file's own path.

:func:`check_output` applies the rule before a command starts measuring; :func:`write_output` and
:func:`open_output` apply it again when they write (the path may have changed meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rlbench.core.errors import UsageError

#: what a refused path is, by its file type
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # absent (under a file: its directory cannot be made, said next)
        return None
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r} ({exc.strerror or exc}); choose another path") from None


def is_device(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a character device (``/dev/null``): written through, with nothing put beside it."""
    st = _lstat(Path(path))
    return st is not None and stat.S_ISCHR(st.st_mode)


def check_output(path: str | os.PathLike[str], flag: str = "output") -> Path:
    """Check that ``path`` may be written under the module's rule; its directory is created if missing.

    Args:
        path: The output path.
        flag: The option that named it (``--report``), for the message.

    Returns:
        The path.

    Raises:
        UsageError: If the path is a link, FIFO, socket, block device or directory, or cannot be written.
    """
    out = Path(path)
    st = _lstat(out)
    if st is not None:
        for test, what in _KINDS:
            if test(st.st_mode):
                hint = "give the path of the file it points to" if what == "a symbolic link" else "give a regular file's path"
                raise UsageError(f"{flag} {str(out)!r} is {what}; rlbench never replaces one: {hint}")
        if not os.access(out, os.W_OK):
            raise UsageError(f"{flag} {str(out)!r}: not writable; choose another path")
        if stat.S_ISCHR(st.st_mode):
            return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {str(out)!r}: cannot create directory {str(out.parent)!r} ({exc.strerror or exc})") from None
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {str(out)!r}: directory {str(out.parent)!r} is not writable; choose another path")
    return out


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def open_output(path: str | os.PathLike[str], flag: str = "output") -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s content into; committed when the block ends without an exception.

    A regular (or absent) path gets the content through a temporary file renamed onto it, so it is written whole or
    not at all; a character device is written through; anything else is refused (see the module docstring).

    Raises:
        UsageError: If the path is refused or writing fails (disk full, removed directory); the path is then as it
            was (a regular file keeps its old content).
    """
    out = check_output(path, flag)
    try:
        if is_device(out):
            fd = os.open(out, os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY)
            with os.fdopen(fd, "wb") as fh:
                yield fh
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name[:64]}.", suffix=".tmp", dir=out.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh
                fh.flush()
                os.fchmod(fh.fileno(), 0o666 & ~_umask())
            check_output(out, flag)  # still a regular file or absent: never rename onto something that became a link
            os.replace(tmp, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise UsageError(f"{flag} {str(out)!r}: cannot write ({exc.strerror or exc})") from None


def write_output(path: str | os.PathLike[str], data: str | bytes, flag: str = "output") -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` under the module's rule; returns the path.

    Raises:
        UsageError: See :func:`open_output`.
    """
    with open_output(path, flag) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)

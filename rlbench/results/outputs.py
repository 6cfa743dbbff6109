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

:func:`check_outputs` checks every output of one command at once, before any measuring: each path under the rule,
a folder it keeps files in (``ab --keep DIR``) under :func:`check_output_dir`, and no two outputs, nor an output and an
input, the same file (``calibrate --out x.json`` would overwrite its report with its own JSON).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
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


def check_output_dir(path: str | os.PathLike[str], flag: str, inside: Iterable[str] = ()) -> Path:
    """Check that ``path`` is a folder rlbench may put files in (``ab --keep DIR``); it is created if missing.

    Args:
        path: The folder.
        flag: The option that named it (``--keep``), for the message.
        inside: Names of the files (``name``) and folders (``name/``) the command will put in it: each must be absent
            or of that kind (never a link: rlbench never writes through one).

    Returns:
        The folder.

    Raises:
        UsageError: If the path is a file, a link or anything but a folder, cannot be created (under a file), or is
            not writable; or one of ``inside`` is of another kind (a link, a file where a folder goes, ...).
    """
    out = Path(path)
    st = _lstat(out)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        what = next((w for test, w in _KINDS if test(st.st_mode)), "a file")
        hint = "give the path of the folder it points to" if what == "a symbolic link" else "give a folder's path"
        raise UsageError(f"{flag} {str(out)!r} is {what}, not a folder: {hint}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise UsageError(f"{flag} {str(out)!r}: cannot create the folder ({why}); choose another path") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {str(out)!r}: the folder is not writable; choose another path")
    for name in inside:
        folder = name.endswith("/")
        sub_path = out / name.rstrip("/")
        sub = _lstat(sub_path)
        if sub is None or (stat.S_ISDIR(sub.st_mode) if folder else stat.S_ISREG(sub.st_mode)):
            continue
        what = "a file" if stat.S_ISREG(sub.st_mode) else next((w for test, w in _KINDS if test(sub.st_mode)), "no file")
        raise UsageError(
            f"{flag} {str(out)!r}: {str(sub_path)!r} is {what}, where rlbench puts a {'folder' if folder else 'file'}; "
            "remove it or choose another folder"
        )
    return out


def _identity(path: Path) -> tuple[object, ...]:
    """What makes two paths the same file: its device and inode if it exists, else its resolved path."""
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def check_outputs(
    outputs: Iterable[tuple[str | os.PathLike[str] | None, str]],
    *,
    folders: Iterable[tuple[str | os.PathLike[str] | None, str, tuple[str, ...]]] = (),
    inputs: Iterable[tuple[str | os.PathLike[str] | None, str]] = (),
) -> list[Path | None]:
    """Check every output of one command before it measures anything: the class of "outputs checked only after the
    work".

    Each file goes through :func:`check_output`, each folder through :func:`check_output_dir`; then no two files may be
    the same file, and no file may be one of the command's inputs (a character device such as ``/dev/null`` may be
    named more than once: it is written through).

    Args:
        outputs: ``(path, what)`` per output file; ``path`` ``None`` or ``"-"`` (stdout) is skipped. ``what`` names it
            in messages (``--report``, ``--out's JSON``).
        folders: ``(path, what, inside)`` per output folder (see :func:`check_output_dir`).
        inputs: ``(path, what)`` per file the command reads, which no output may replace; ``what`` as in ``the --render
            input``.

    Returns:
        Each output's path (``None`` where skipped), in order.

    Raises:
        UsageError: The first output that may not or cannot be written, or two that are the same file, naming both.
    """
    checked: list[Path | None] = []
    seen: dict[tuple[object, ...], str] = {}
    for path, what in outputs:
        if path is None or str(path) == "-":
            checked.append(None)
            continue
        out = check_output(path, what)
        checked.append(out)
        if is_device(out):
            continue
        key = _identity(out)
        if key in seen:
            raise UsageError(
                f"{what} {str(out)!r} is the same file as {seen[key]}: one would overwrite the other; give different paths"
            )
        seen[key] = f"{what} {str(out)!r}"
    for path, what, inside in folders:
        if path is not None:
            check_output_dir(path, what, inside)
    for path, what in inputs:
        if path is None:
            continue
        key = _identity(Path(path))
        if key in seen:
            raise UsageError(f"{seen[key]} is {what} {str(path)!r}: writing it would replace that input; give another path")
    return checked


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

"""The results store: append-only JSONL, one file per run, and loading records back.

Layout: ``<store>/<run_id>.jsonl`` (default store: ``.rlbench/`` in the working directory). A run's
records are appended as each repeat finishes: one ``write`` system call of whole lines on an ``O_APPEND``
descriptor, then ``fsync``. A write that fails or comes up short (disk full, ``RLIMIT_FSIZE``) is cut back to the
file's previous length, so no partial record is ever left visible; a crash or Ctrl-C loses at most the repeat in
flight.

Reading recovers what can be recovered: a torn *last* line (a writer killed mid-write by something this module
could not catch, such as ``kill -9`` or a power cut) is skipped with a warning naming the file; scanning a store
directory skips an unreadable file with a warning instead of refusing every run in the store; and a run asked
for by id reads only that run's file. Warnings go through :mod:`warnings` as :class:`RecordsWarning`.
"""

from __future__ import annotations

import json
import lzma
import mmap
import os
import secrets
import stat
import warnings
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rlbench.core.children import signals_deferred
from rlbench.core.errors import DataError, StoreError
from rlbench.results.records import Record, from_dict

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_STORE = ".rlbench"
SUFFIX = ".jsonl"
ARCHIVED = SUFFIX + ".xz"  # a run file compressed with xz (archives such as this repository's reports/): read, never written


class RecordsWarning(UserWarning):
    """Something in a store was skipped while reading (a torn last line, an unreadable file)."""


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus random hex (``20261122T010203Z-1a2b3c``)."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def utc_now() -> str:
    """Current UTC time, ISO-8601."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class RunWriter:
    """Appends the records of one run to ``<store>/<run_id>.jsonl``.

    The store directory is created and probed for writing at construction, so an unwritable store
    fails before anything is measured.

    Args:
        store: Directory of the store.
        run_id: The run's id (a new one when omitted).

    Raises:
        StoreError: If the directory cannot be created or written.
    """

    def __init__(self, store: str | os.PathLike[str], run_id: str | None = None) -> None:
        self.store = Path(store)
        self.run_id = run_id or new_run_id()
        self.path = self.store / f"{self.run_id}{SUFFIX}"
        self.count = 0
        try:
            self.store.mkdir(parents=True, exist_ok=True)
            probe = self.store / f".probe-{self.run_id}-{secrets.token_hex(4)}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            probe.unlink()
        except OSError as exc:
            raise StoreError(
                f"cannot write to results store {str(self.store)!r} ({exc.strerror or exc}); "
                "pass --store DIR with a writable directory"
            ) from None

    def write(self, records: Iterable[Record]) -> None:
        """Append records as whole lines in one system call and flush them to disk, or leave the file as it was.

        Raises:
            StoreError: If the disk is full, the file size limit is reached or the file cannot be written; the file
                then holds exactly the records of earlier calls.
        """
        data = "".join(r.to_json() + "\n" for r in records).encode("utf-8")
        if not data:
            return
        with signals_deferred():
            self._append(data)
        self.count += data.count(b"\n")

    def _append(self, data: bytes) -> None:
        try:  # a link, FIFO or device where the run file belongs is never written through (O_NONBLOCK: a FIFO
            # without a reader fails at once instead of blocking)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot write results to {str(self.path)!r} ({exc.strerror or exc})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StoreError(f"cannot write results to {str(self.path)!r}: not a regular file; remove it")
            os.set_blocking(fd, True)
            size = st.st_size
            append_whole(fd, data, size, f"cannot write results to {str(self.path)!r}")
        finally:
            os.close(fd)


def append_whole(fd: int, data: bytes, size: int, what: str) -> None:
    """Append ``data`` to the file open at ``fd`` (``size`` bytes long) whole and synced, or not at all.

    Raises:
        StoreError: ``what`` and the reason (a full disk, a file size limit); the file is cut back to ``size``.
    """
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(28, f"disk full or file size limit: {written} of {len(data)} bytes fit")
        os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, size)  # never leave a partial record behind
        except OSError:
            pass
        raise StoreError(f"{what} ({exc.strerror or exc})") from None


def run_files(store: str | os.PathLike[str]) -> list[Path]:
    """The run files of a store (``.jsonl``, and archived ``.jsonl.xz``), oldest first (run ids sort by time)."""
    return sorted([*Path(store).glob(f"*{SUFFIX}"), *Path(store).glob(f"*{ARCHIVED}")])


def resolve(path: str | os.PathLike[str]) -> list[Path]:
    """Files a path refers to: a records file, or every run file of a store directory.

    Raises:
        DataError: If the path does not exist or a directory holds no run files.
    """
    p = Path(path)
    if p.is_dir():
        files = run_files(p)
        if not files:
            raise DataError(f"{str(p)!r} holds no rlbench records (*{SUFFIX}); run `rlbench run ...` first")
        return files
    if not p.exists():
        raise DataError(f"no such records file or store: {str(p)!r}")
    return [p]


def _warn(message: str) -> None:
    warnings.warn(message, RecordsWarning, stacklevel=3)


def read_text(file: Path) -> str:
    """A run file's text. Only a regular file is read (a FIFO or a device such as ``/dev/zero`` could block or never
    end); any failure to read, decompress or decode it is a :class:`DataError`."""
    text = _read_text(file, ())
    assert text is not None  # (nothing was asked of it)
    return text


def _read_text(file: Path, holding: tuple[str, ...]) -> str | None:
    """:func:`read_text`, or ``None`` where the file lacks one of the strings ``holding``, looked for in its bytes in
    place (mapped, not read or decoded; an archived file is decompressed first)."""
    try:  # O_NONBLOCK: opening a FIFO never waits for a writer; it is refused below
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise DataError(f"cannot read {str(file)!r} ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # (before fdopen, which refuses a directory with a bare IsADirectoryError)
            os.close(fd)
            raise DataError(f"cannot read {str(file)!r}: it is {_file_kind(mode)}, not a regular file; give a file's path")
        with os.fdopen(fd, "rb") as fh:
            os.set_blocking(fh.fileno(), True)
            wanted = [w.encode() for w in holding]
            if wanted and not file.name.endswith(ARCHIVED) and os.fstat(fh.fileno()).st_size > 0:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    if any(mm.find(w) < 0 for w in wanted):
                        return None
            data = fh.read()
        if file.name.endswith(ARCHIVED):
            data = lzma.decompress(data)
            if not all(w in data for w in wanted):
                return None
        return data.decode("utf-8")
    except DataError:
        raise
    except Exception as exc:  # OSError, LZMAError, UnicodeDecodeError, MemoryError: unreadable, whatever the cause
        raise DataError(f"cannot read {str(file)!r} ({type(exc).__name__}: {exc})"[:300]) from None


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a message."""
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def _parse_line(line: str, where: str) -> Record:
    """One line as a record; any decoding failure (not JSON, nested past the recursion limit, too large) is a
    :class:`DataError` naming ``file:line``."""
    try:
        data = json.loads(line)
    except Exception as exc:  # JSONDecodeError, RecursionError (deeply nested), MemoryError, ...
        what = "not JSON" if isinstance(exc, ValueError) else f"undecodable ({type(exc).__name__})"
        raise DataError(f"{where}: {what}; this is not a readable rlbench records file") from None
    try:
        return from_dict(data, where)
    except DataError:
        raise
    except Exception as exc:  # a value the validator did not foresee: unreadable too, never an internal error
        raise DataError(f"{where}: not an rlbench record ({type(exc).__name__})") from None


def read_file(file: Path, lines_with: tuple[str, ...] = ()) -> list[Record]:
    """Every complete record of one run file; a torn last line is skipped with a warning naming the file.

    ``lines_with``: only lines holding every one of these strings are decoded (a cheap text test before JSON; a
    reader that wants a few records of a large store skips the rest unread).

    Raises:
        DataError: On an unreadable, empty, foreign or corrupt file (with ``file:line``), or a future schema.
    """
    text = _read_text(file, lines_with)
    if text is None:
        return []  # no line can hold one
    if not text or text.isspace():
        raise DataError(f"{str(file)!r} is empty: no records to read")
    lines = text.split("\n")
    torn = lines.pop() if not text.endswith("\n") else ""  # a last line without its newline was cut off mid-write
    records: list[Record] = []
    for i, line in enumerate(lines, 1):
        if not line.strip() or (lines_with and not all(w in line for w in lines_with)):
            continue
        records.append(_parse_line(line, f"{file}:{i}"))
    if lines_with and not all(w in torn for w in lines_with):
        torn = ""
    if torn.strip():
        try:
            records.append(_parse_line(torn, f"{file}:{len(lines) + 1}"))
        except DataError:
            if not records:
                raise DataError(f"{file}:{len(lines) + 1}: truncated, and no complete record before it") from None
            _warn(f"{file}:{len(lines) + 1}: skipped a torn last record (the writer was cut off); {len(records)} kept")
    return records


def read_records(path: str | os.PathLike[str], run_id: str | None = None, lines_with: tuple[str, ...] = ()) -> list[Record]:
    """Read and validate the records of a file or a store directory.

    Args:
        path: A records file, or a store directory (every run file in it).
        run_id: Read only this run (a unique prefix is enough): in a store, only its file is opened.
        lines_with: Decode only the lines that hold every one of these strings (see :func:`read_file`).

    Raises:
        DataError: On an empty, truncated or corrupt file, a foreign JSON file, or a future schema. In a store
            directory, an unreadable file is skipped with a :class:`RecordsWarning` instead, unless no file is
            readable.
    """
    _check_run_id(run_id)
    files = resolve(path)
    if run_id is not None and Path(path).is_dir():
        named = [f for f in files if f.stem.startswith(run_id)]
        if len(named) == 1:
            files = named
    if len(files) == 1:
        return read_file(files[0], lines_with)
    records: list[Record] = []
    problems = []
    for file in files:
        try:
            records += read_file(file, lines_with)
        except DataError as exc:
            problems.append(str(exc))
            _warn(f"skipped {file}: {exc}")
    if not records:
        raise DataError(f"no readable records in {str(path)!r}: " + "; ".join(problems[-3:]))
    return records


def _check_run_id(run_id: str | None) -> None:
    """An empty run id would be a prefix of every run: refused."""
    if run_id is not None and not run_id.strip():
        raise DataError("an empty run id matches every run; give a run id or a unique prefix of one (`--run ID`)")


def select_run(records: list[Record], run_id: str | None = None) -> list[Record]:
    """The records of one run: ``run_id`` (a unique prefix is enough) or the latest run.

    Raises:
        DataError: If there are no records or no run matches.
    """
    _check_run_id(run_id)
    if not records:
        raise DataError("no records to report on")
    runs = sorted({r.run_id for r in records})
    if run_id is None:
        chosen = runs[-1]
    else:
        matches = [r for r in runs if r.startswith(run_id)]
        if len(matches) != 1:
            what = "no run" if not matches else f"{len(matches)} runs"
            raise DataError(f"{what} match run id {run_id!r}; runs present: {', '.join(runs[-5:])}")
        chosen = matches[0]
    return [r for r in records if r.run_id == chosen]


def read_run(path: str | os.PathLike[str], run_id: str | None = None) -> list[Record]:
    """The records of one run from a file or store: ``run_id`` (a unique prefix), else the latest run.

    In a store directory without ``run_id``, the newest readable run file is read (older files are not opened).
    """
    p = Path(path)
    if run_id is None and p.is_dir():
        for file in reversed(resolve(p)):
            try:
                return select_run(read_file(file))
            except DataError as exc:
                _warn(f"skipped {file}: {exc}")
        raise DataError(f"no readable run in {str(p)!r}")
    return select_run(read_records(p, run_id), run_id)


def load(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Load records into a tidy pandas DataFrame: one row per sample.

    Columns: ``run_id, timestamp, benchmark, metric, unit, direction, repeat, seed, sample, value, x,
    device, definition_hash, machine_id, cpu, commit, dirty, torch, params`` (``params`` as a JSON
    string, so cases can be grouped), plus one ``param.<name>`` column per parameter.

    Args:
        path: A records file or a store directory (every run in it).

    Raises:
        DataError: If the records cannot be read (see :func:`read_records`).
    """
    import pandas as pd

    rows = []
    for r in read_records(path):
        fp = r.fingerprint or {}
        machine, software, git = fp.get("machine", {}), fp.get("software", {}), fp.get("git", {})
        base = {
            "run_id": r.run_id,
            "timestamp": r.timestamp,
            "benchmark": r.benchmark,
            "metric": r.metric,
            "unit": r.unit,
            "direction": r.direction,
            "repeat": r.repeat,
            "seed": r.seed,
            "device": r.device,
            "definition_hash": r.definition_hash,
            "machine_id": machine.get("id"),
            "cpu": machine.get("cpu"),
            "commit": git.get("commit"),
            "dirty": git.get("dirty"),
            "torch": (software.get("packages") or {}).get("torch"),
            "params": json.dumps(r.params, sort_keys=True, default=str),
            **{f"param.{k}": (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.params.items()},
        }
        for i, v in enumerate(r.samples):
            rows.append({**base, "sample": i, "value": v, "x": r.x[i] if r.x is not None and i < len(r.x) else None})
    return pd.DataFrame(rows)

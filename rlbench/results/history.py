"""The history store: every record that names a commit, kept per machine, read back as series over commits.

Layout of a history store (default :data:`DEFAULT_HISTORY`, ``.rlbench/history`` in the working directory)::

    ROOT/commits.jsonl                        one CommitInfo per line (the latest line for a sha wins)
    ROOT/<machine_id>/machine.json            the machine fingerprint (as first seen)
    ROOT/<machine_id>/records/<sha>.jsonl     that commit's records (append-only, deduplicated)
    ROOT/<machine_id>/gaps.jsonl              Gap lines: a commit where a benchmark was absent or failed
    ROOT/<machine_id>/confirmations.jsonl     Confirmation lines: a candidate step measured again (``history confirm``)

* **Machines are kept apart.** A record goes under the id of its machine fingerprint (``fingerprint.machine.id``,
  else the hash :func:`~rlbench.results.fingerprint.machine_id` of its machine fields, else ``unknown``); a series
  never holds two machines.
* **Adding is idempotent.** A record is identified by (run id, benchmark, parameters, metric, repeat); one already
  stored is counted as a duplicate and not written again, so adding the same store twice changes nothing. A record
  without a commit (measured outside a git repository) is counted as skipped, never stored.
* **Dirty trees.** A record measured from a tree with uncommitted changes is kept under its commit, and that commit's
  :class:`CommitInfo` is marked ``dirty`` (a page says so).
* **Writes** are appends of whole lines in one system call (then ``fsync``) or atomic replacements (``machine.json``,
  a ``commits.jsonl`` written afresh), with SIGINT/SIGTERM held meanwhile. A torn last line (a writer killed by
  ``kill -9``) is skipped on read with a warning, and cut off before the next append; a complete last line that only
  lacks its newline is kept, and the newline added. Only regular files are written: a link, FIFO, device or folder
  where a store file belongs is refused with a one-line :class:`~rlbench.core.errors.StoreError` naming it
  (:meth:`HistoryStore.check_writable` says so before a command measures anything).
* **Nothing is appended where it would not be seen.** A file of which nothing is readable (not UTF-8, not JSON, no
  record, gap or commit in it) is moved to ``ROOT/unreadable/`` (the same path below it) before the next append to
  it, with a warning naming both paths, and the new lines start a fresh file.
* **Reading never fails on one bad file.** A corrupt line, a corrupt or foreign file (a name that is not
  ``<sha>.jsonl``, text that is not records) or an unexpected directory is skipped with a
  :class:`~rlbench.results.store.RecordsWarning` naming it. Dotfiles are ignored.
* **Order.** :meth:`HistoryStore.order` sorts commits by the repository's topology (``git rev-list --topo-order``)
  when a repository is given, else by committer time (from :meth:`add_commits`, or the records' git fingerprint: a
  missing or corrupt ``commits.jsonl`` changes nothing, and the next write puts back what it lacks).
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
import secrets
import shlex
import stat
import subprocess
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlbench.core.children import signals_deferred
from rlbench.core.errors import DataError, StoreError
from rlbench.results.fingerprint import machine_id
from rlbench.results.metrics import COUNTERS, MACHINE, MACHINE_OTHER_CPU
from rlbench.results.records import Record, case_metric, from_dict
from rlbench.results.store import RecordsWarning, append_whole, read_records, read_text

DEFAULT_HISTORY = ".rlbench/history"
COMMITS = "commits.jsonl"
MACHINE_FILE = "machine.json"
RECORDS = "records"
GAPS = "gaps.jsonl"
CONFIRMATIONS = "confirmations.jsonl"
CONFIRMED, DISMISSED, UNDECIDED = "confirmed", "dismissed", "undecided"
CONFIRMATION_VERDICTS = (CONFIRMED, DISMISSED, UNDECIDED)
UNCONFIRMED = "unconfirmed"  #: a candidate step no confirmation has decided (none run, or undecided)
GAP_STATUSES = ("absent", "failed")
UNKNOWN_MACHINE = "unknown"
UNREADABLE = "unreadable"  # ROOT/unreadable/...: store files moved aside because nothing in them could be read

_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_MACHINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class CommitInfo:
    """A commit of the history.

    Attributes:
        sha: Full hex commit id.
        time: Committer time, unix seconds (``None`` when unknown: records written before git time was recorded).
        subject: First line of the commit message (``None`` when unknown).
        dirty: Some record of this commit was measured from a tree with uncommitted changes.
    """

    sha: str
    time: int | None
    subject: str | None
    dirty: bool = False


@dataclass(frozen=True)
class Gap:
    """A commit where a benchmark was absent or failed: a gap in its series, not an abort.

    Attributes:
        machine: Machine id.
        commit: Full hex commit id.
        benchmark: Benchmark id.
        params: The parameters it was asked to run with.
        status: ``absent`` (the commit does not have it) or ``failed`` (it raised, or the build failed).
        message: One line saying what happened.
    """

    machine: str
    commit: str
    benchmark: str
    params: dict
    status: str
    message: str


@dataclass(frozen=True)
class Confirmation:
    """A candidate step measured again: ``rlbench ab --rounds auto`` between its last good and first bad commits.

    Attributes:
        machine: Machine id (the series' and the one that measured again).
        benchmark: Benchmark id.
        params: The series' parameters (:meth:`HistoryStore.identity`).
        metric: The series' metric.
        last_good: The last commit at the old level.
        first_bad: The first commit at the new level.
        verdict: ``confirmed`` (the gate FAILed: worse by more than the threshold), ``dismissed`` (it PASSed: the
            interval rules out a regression that large) or ``undecided`` (INCONCLUSIVE after ``--max-rounds``).
        threshold: The gate's limit as a fraction (half the step's size, as the site's commands).
        ratio: First bad over last good (paired median ratio); ``None`` when not measured.
        ci: Its interval at the last look's level.
        rounds: Interleaved rounds run.
        reason: The gate's words (and, when undecided, what would settle it).
        time: When it was measured (unix seconds).
        pinned: For a confirmed step, the first commit measured slower than the window's good end: the commit the
            regression is at (the detector places a step within +-1 commit; ``history confirm`` measures the window and
            pins it). ``None`` when not pinned (undecided between two commits, or not confirmed), and in lines written
            before it was recorded.
    """

    machine: str
    benchmark: str
    params: dict
    metric: str
    last_good: str
    first_bad: str
    verdict: str
    threshold: float
    ratio: float | None
    ci: list | None
    rounds: int
    reason: str
    time: int
    pinned: str | None = None

    def key(self) -> tuple[str, str, str, str, str]:
        """What a step must share to be the one confirmed: benchmark, parameters, metric and both commits."""
        return self.benchmark, params_json(self.params), self.metric, self.last_good, self.first_bad


@dataclass
class AddResult:
    """What an add did.

    Attributes:
        added: Records written.
        duplicates: Records already stored (not written again).
        skipped: Records without a (valid) commit: never stored.
        machines: Machine ids that got new records, sorted.
        commits: Commits that got new records, sorted.
    """

    added: int = 0
    duplicates: int = 0
    skipped: int = 0
    machines: list[str] = field(default_factory=list)
    commits: list[str] = field(default_factory=list)


def params_json(params: dict[str, Any]) -> str:
    """Parameters as canonical JSON (sorted keys): how series, keys and :meth:`HistoryStore.has` compare them."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def is_exact(metric: str, unit: str) -> bool:
    """Noise-free counts: ``ops/``, ``syncs/``, ``copies/``, ``flops/`` and any other metric in the ``count`` unit."""
    return unit == "count" or metric.split("/", 1)[0] in COUNTERS


@dataclass
class Series:
    """One (machine, benchmark, parameters, metric) over commits.

    Attributes:
        machine: Machine id.
        benchmark: Benchmark id.
        params: The parameters that tell the series apart (:meth:`HistoryStore.identity`): a case's own (a micro
            benchmark's implementation and size) and those set on the command line. A parameter a later commit
            added, or a default it changed, does not split a benchmark's history in two.
        metric: Metric name.
        unit: Unit of the samples (of the newest record).
        direction: ``higher``, ``lower`` or ``none``.
        exact: A noise-free count (:func:`is_exact`): any change is a step.
        commits: Commits with samples, oldest first.
        samples: Per commit, the finite raw samples of every record (all repeats and runs pooled).
        values: Every parameter of the series' newest record (its settings at the latest commit, defaults included),
            for display: ``params`` holds only those that tell series apart.
        loads: Per commit, the median share of the machine's CPU that other processes used while it was measured
            (``machine/other_cpu`` of the same benchmark and parameters; ``None`` where not recorded).
    """

    machine: str
    benchmark: str
    params: dict
    metric: str
    unit: str
    direction: str
    exact: bool
    commits: list[str]
    samples: list[list[float]]
    values: dict = field(default_factory=dict)
    loads: list = field(default_factory=list)

    def key(self) -> str:
        """Stable id: ``machine|benchmark|params-json|metric``."""
        return f"{self.machine}|{self.benchmark}|{params_json(self.params)}|{self.metric}"


def _median(values: list[float] | None) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _warn(message: str) -> None:
    warnings.warn(message, RecordsWarning, stacklevel=3)


def record_machine(r: Record) -> str:
    """The machine id a record belongs to (see the module docstring)."""
    machine = (r.fingerprint or {}).get("machine") or {}
    if not isinstance(machine, dict) or not machine:
        return UNKNOWN_MACHINE
    mid = machine.get("id")
    if isinstance(mid, str) and _MACHINE.match(mid):
        return mid
    return machine_id(machine)


def record_commit(r: Record) -> str | None:
    """The record's commit as lowercase hex, or ``None`` when it has none (or a value that is not a commit id)."""
    git = (r.fingerprint or {}).get("git") or {}
    sha = git.get("commit") if isinstance(git, dict) else None
    if not isinstance(sha, str) or not _SHA.match(sha.lower()):
        return None
    return sha.lower()


def _record_key(r: Record) -> tuple[str, str, str, str, int]:
    return r.run_id, r.benchmark, params_json(r.params), case_metric(r), r.repeat


def _commit_from_record(r: Record, sha: str) -> CommitInfo:
    git = (r.fingerprint or {}).get("git") or {}
    t = git.get("time")
    subject = git.get("subject")
    return CommitInfo(
        sha,
        t if isinstance(t, int) and not isinstance(t, bool) else None,
        subject if isinstance(subject, str) else None,
        git.get("dirty") is True,
    )


def _merge(old: CommitInfo | None, new: CommitInfo) -> CommitInfo:
    """New facts win; an unknown time or subject keeps the known one; dirty once, dirty for good."""
    if old is None:
        return new
    return CommitInfo(
        new.sha,
        new.time if new.time is not None else old.time,
        new.subject if new.subject is not None else old.subject,
        old.dirty or new.dirty,
    )


def _append_lines(path: Path, lines: list[str]) -> None:
    """Append whole lines in one write, then fsync; or leave the file as it was.

    A file that does not end in a newline was either cut off mid-line by a writer (``kill -9``, a power cut) or
    written by hand without its last newline. The last line is cut off only when the reader would skip it as torn
    (it does not decode as JSON: :func:`_json_lines`); a complete last line is kept, and the missing newline written
    before the new lines. Only a regular file is written (never a link, FIFO or device).
    """
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if not data:
        return
    with signals_deferred():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot write to history store file {str(path)!r}{_why_not(path, exc)}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise StoreError(f"cannot write to history store file {str(path)!r}: {_not_regular(path)}{_REPLACE}")
            os.set_blocking(fd, True)
            size = os.fstat(fd).st_size
            start = _last_line_start(fd, size)
            if start < size:  # no newline at the end
                if _complete(os.pread(fd, size - start, start)):
                    data = b"\n" + data  # a whole record that lacks its newline: keep it
                else:
                    os.ftruncate(fd, start)  # a writer was cut off mid-line: drop its partial line
                    size = start
            append_whole(fd, data, size, f"cannot write to history store file {str(path)!r}")
        finally:
            os.close(fd)


def _last_line_start(fd: int, size: int, chunk: int = 1 << 20) -> int:
    """The offset just after the file's last newline (0 when it has none; ``size`` when it ends in one)."""
    end = size
    while end > 0:
        begin = max(0, end - chunk)
        cut = os.pread(fd, end - begin, begin).rfind(b"\n")
        if cut >= 0:
            return begin + cut + 1
        end = begin
    return 0


def _complete(line: bytes) -> bool:
    """Whether a last line without its newline is whole: the reader decodes it (a torn line is not JSON)."""
    if not line.strip():
        return True
    try:
        json.loads(line.decode("utf-8"))
    except Exception:  # not UTF-8, not JSON, nested too deep: the reader skips it as torn
        return False
    return True


_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


def _not_regular(path: Path) -> str:
    """What stands at ``path`` instead of a regular file (for a one-line message)."""
    try:
        what = _KINDS.get(stat.S_IFMT(path.lstat().st_mode), "a device")
    except OSError:
        return "not a regular file"
    return f"it is {what}, not a regular file"


_REPLACE = " (rlbench never writes through one); move it away, or replace it by the regular file it stands for"


def _why_not(path: Path, exc: OSError) -> str:
    """Why ``path`` could not be opened for an append, as the end of a one-line error."""
    if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) or path.is_symlink():
        return f": {_not_regular(path)}{_REPLACE}"
    return f" ({exc.strerror or exc})"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with signals_deferred():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise StoreError(f"cannot write to history store file {str(path)!r} ({exc.strerror or exc})") from None


def _json_lines(path: Path, problems: list[str] | None = None) -> list[tuple[int, Any]]:
    """``(line number, decoded JSON)`` of a JSONL file; bad lines skipped with a warning naming ``file:line``.

    A missing file is empty; an unreadable one is skipped whole, with a warning. ``problems`` gets why nothing at all
    could be read (the file does not decode, or no line is JSON).
    """
    if not path.exists():
        return []
    try:
        text = read_text(path)
    except DataError as exc:
        _warn(f"skipped {path}: {exc}")
        if problems is not None:
            problems.append(str(exc))
        return []
    lines = text.split("\n")
    torn = not text.endswith("\n") and bool(text)
    out: list[tuple[int, Any]] = []
    bad: list[int] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((i, json.loads(line)))
        except Exception:  # not JSON, too deep, too large: an unreadable line
            if torn and i == len(lines):
                _warn(f"{path}:{i}: skipped a torn last line (the writer was cut off)")
            else:
                bad.append(i)
    if bad and not out:
        _warn(f"skipped {path}: not a history store file (line {bad[0]} is not JSON)")
        if problems is not None:
            problems.append(f"line {bad[0]} is not JSON")
    elif bad:
        _warn(f"{path}: skipped {len(bad)} unreadable line(s) ({', '.join(map(str, bad[:5]))})")
    return out


class HistoryStore:
    """A history store rooted at ``root`` (see the module docstring for its layout).

    Nothing is created until something is added; reading a store that does not exist yields nothing.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._keys: dict[tuple[str, str], set[tuple[str, str, str, str, int]]] = {}

    def __repr__(self) -> str:
        return f"HistoryStore({str(self.root)!r})"

    # ---- writing -------------------------------------------------------------------------------------------------

    def check_writable(self, machine: str | None = None) -> None:
        """Refuse, before anything is measured or added, a store whose files cannot be appended to: a link, FIFO,
        device or directory where ``commits.jsonl``, a machine's ``machine.json`` or ``gaps.jsonl`` or a
        ``records/<commit>.jsonl`` belongs (rlbench never writes through one), a file where a folder belongs.

        Args:
            machine: Check this machine's files (it may not exist yet); default: every machine in the store.

        Raises:
            StoreError: Naming the first such path and what to do.
        """
        if os.path.lexists(self.root) and not self.root.is_dir():
            raise StoreError(f"history store {str(self.root)!r} is not a directory; give a history store directory")
        files = [self.root / COMMITS]
        for m in [machine] if machine is not None else self.machines():
            folder = self._machine_dir(m)
            for sub in (folder, folder / RECORDS):
                if os.path.lexists(sub) and not sub.is_dir():
                    raise StoreError(f"history store folder {str(sub)!r} is not a directory; move it away")
            files += [folder / MACHINE_FILE, folder / GAPS, folder / CONFIRMATIONS]
            if (folder / RECORDS).is_dir():
                files += [folder / RECORDS / f"{sha}.jsonl" for sha in self._record_shas(m)]
        for path in files:
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue  # absent: created when needed
            if not stat.S_ISREG(mode):
                raise StoreError(f"cannot write to history store file {str(path)!r}: {_not_regular(path)}{_REPLACE}")

    def _machine_dir(self, machine: str) -> Path:
        if not _MACHINE.match(machine):
            raise DataError(f"{machine!r} is not a machine id")
        return self.root / machine

    def _records_file(self, machine: str, sha: str) -> Path:
        return self._machine_dir(machine) / RECORDS / f"{sha}.jsonl"

    def _stored_keys(self, machine: str, sha: str) -> set[tuple[str, str, str, str, int]]:
        k = (machine, sha)
        if k not in self._keys:
            path = self._records_file(machine, sha)
            self._keys[k] = {
                _record_key(r) for r in self._before_append(path, lambda p: self._read_records_file(path, sha, p))
            }
        return self._keys[k]

    def _before_append(self, path: Path, read: Callable[[list[str]], list[Any]]) -> list[Any]:
        """What the reader reads of a store file about to be appended to (``read(problems)``).

        A regular file of which nothing is readable (not UTF-8, no line that is JSON, no line that is a record, gap or
        commit) would swallow every line appended to it, unseen, and a history run would measure its commits again
        forever: it is moved to ``ROOT/unreadable/`` first (the same path below it), with a warning naming both paths,
        and the lines go to a fresh file.
        """
        problems: list[str] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = read(problems)
        try:
            regular = stat.S_ISREG(path.lstat().st_mode)
        except OSError:
            regular = False
        if got or not problems or not regular:  # a link or FIFO is never moved: _append_lines refuses it, naming it
            for w in caught:
                _warn(str(w.message))
            return got
        dest = self._set_aside(path)
        _warn(
            f"{path} holds nothing readable ({problems[0]}): moved it to {dest} and started the file afresh "
            "(nothing in it is lost; what it held will not be read)"
        )
        return []

    def _set_aside(self, path: Path) -> Path:
        """Move a store file below ``ROOT/unreadable/`` (``name.1.jsonl``, ... when the name is taken); its new path.

        Raises:
            StoreError: If it cannot be moved.
        """
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            rel = Path(path.name)
        dest = self.root / UNREADABLE / rel
        stem, dot, suffix = rel.name.partition(".")
        n = 0
        while os.path.lexists(dest):
            n += 1
            dest = dest.with_name(f"{stem}.{n}{dot}{suffix}")
        with signals_deferred():
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, dest)
            except OSError as exc:
                raise StoreError(
                    f"cannot move the unreadable history store file {str(path)!r} aside to {str(dest)!r} "
                    f"({exc.strerror or exc}); move it away yourself"
                ) from None
        return dest

    def add_records(self, records: Iterable[Record]) -> AddResult:
        """Store records under their machine and commit; idempotent (see the module docstring).

        Raises:
            StoreError: If the store cannot be written (what was written before stays).
        """
        result = AddResult()
        pending: dict[tuple[str, str], list[Record]] = defaultdict(list)
        fingerprints: dict[str, dict] = {}
        infos: dict[str, CommitInfo] = {}
        for r in records:
            sha = record_commit(r)
            if sha is None:
                result.skipped += 1
                continue
            machine = record_machine(r)
            keys = self._stored_keys(machine, sha)
            key = _record_key(r)
            if key in keys:
                result.duplicates += 1
                continue
            keys.add(key)
            pending[(machine, sha)].append(r)
            fp = (r.fingerprint or {}).get("machine")
            fingerprints.setdefault(machine, fp if isinstance(fp, dict) else {})
            infos[sha] = _merge(infos.get(sha), _commit_from_record(r, sha))
        try:
            for machine, fp in fingerprints.items():
                mfile = self._machine_dir(machine) / MACHINE_FILE
                if not mfile.exists():
                    _write_atomic(mfile, json.dumps(fp, sort_keys=True, indent=1, default=str) + "\n")
            for (machine, sha), recs in pending.items():
                _append_lines(self._records_file(machine, sha), [r.to_json() for r in recs])
                result.added += len(recs)
        except BaseException:
            self._keys.clear()  # what reached the disk is re-read next time
            raise
        self.add_commits(infos.values())
        result.machines = sorted({m for m, _ in pending})
        result.commits = sorted({s for _, s in pending})
        return result

    def add_store(self, path: str | os.PathLike[str]) -> AddResult:
        """Add every record of a results store or records file (read with :func:`~rlbench.results.store.read_records`).

        Raises:
            DataError: If nothing in ``path`` is readable (unreadable files among readable ones are skipped with a
                warning).
        """
        return self.add_records(read_records(path))

    def add_gap(self, gap: Gap) -> None:
        """Record a gap (an exact duplicate of a stored gap is not written again).

        Raises:
            DataError: On a status other than ``absent``/``failed``, or a commit or machine id that is not one.
        """
        if gap.status not in GAP_STATUSES:
            raise DataError(f"gap status must be one of {', '.join(GAP_STATUSES)}, got {gap.status!r}")
        sha = gap.commit.lower()
        if not _SHA.match(sha):
            raise DataError(f"{gap.commit!r} is not a commit id")
        gap = Gap(gap.machine, sha, gap.benchmark, dict(gap.params), gap.status, " ".join(gap.message.split()))
        path = self._machine_dir(gap.machine) / GAPS
        if gap in self._before_append(path, lambda p: self._read_gaps(path, p)):
            return
        _append_lines(path, [json.dumps(asdict(gap), sort_keys=True, default=str)])

    def add_confirmation(self, c: Confirmation) -> None:
        """Record a confirmation (appended; the latest for a step wins when read: :meth:`confirmations`).

        Raises:
            DataError: A verdict other than ``confirmed``/``dismissed``/``undecided``, or a commit that is not one.
            StoreError: If the store cannot be written.
        """
        if c.verdict not in CONFIRMATION_VERDICTS:
            raise DataError(f"confirmation verdict must be one of {', '.join(CONFIRMATION_VERDICTS)}, got {c.verdict!r}")
        for sha in (c.last_good, c.first_bad, *([c.pinned] if c.pinned is not None else [])):
            if not _SHA.match(sha):
                raise DataError(f"{sha!r} is not a commit id")
        path = self._machine_dir(c.machine) / CONFIRMATIONS
        self._before_append(path, lambda p: self._read_confirmations(path, p))
        _append_lines(path, [json.dumps(asdict(c), sort_keys=True, default=str)])

    def confirmations(self, machine: str) -> dict[tuple[str, str, str, str, str], Confirmation]:
        """The latest confirmation of each step measured again on ``machine``, by :meth:`Confirmation.key`
        (unreadable lines skipped with a warning)."""
        out: dict[tuple[str, str, str, str, str], Confirmation] = {}
        for c in self._read_confirmations(self._machine_dir(machine) / CONFIRMATIONS):
            out[c.key()] = c
        return out

    def _read_confirmations(self, path: Path, problems: list[str] | None = None) -> list[Confirmation]:
        out = []
        lines = _json_lines(path, problems)
        for i, d in lines:
            try:
                c = Confirmation(**d)
                ok = (
                    all(isinstance(getattr(c, f), str) for f in ("machine", "benchmark", "metric", "verdict", "reason"))
                    and isinstance(c.params, dict)
                    and c.verdict in CONFIRMATION_VERDICTS
                    and bool(_SHA.match(str(c.last_good)))
                    and bool(_SHA.match(str(c.first_bad)))
                    and (c.pinned is None or bool(_SHA.match(str(c.pinned))))
                )
            except TypeError:
                ok = False
            if not ok:
                _warn(f"{path}:{i}: skipped a line that is not a confirmation")
                continue
            out.append(c)
        if lines and not out and problems is not None:
            problems.append("no line is a confirmation")
        return out

    def add_commits(self, infos: Iterable[CommitInfo]) -> None:
        """Record commit facts; merged with what is known (an unknown time or subject keeps the known one; ``dirty``
        sticks). Only a change is written.

        A ``commits.jsonl`` that lacks commits the records hold (deleted, cut short, or moved aside because nothing in
        it was readable) is written afresh, whole, with their facts from the records (each record carries its
        commit's time and subject).
        """
        path = self.root / COMMITS
        known = dict(self._before_append(path, lambda p: list(self._file_commits(path, p).items())))
        lines = []
        for info in infos:
            sha = info.sha.lower()
            if not _SHA.match(sha):
                raise DataError(f"{info.sha!r} is not a commit id")
            merged = _merge(known.get(sha), CommitInfo(sha, info.time, info.subject, info.dirty))
            if merged != known.get(sha):
                known[sha] = merged
                lines.append(json.dumps(asdict(merged), sort_keys=True))
        lacking = {sha for m in self.machines(quiet=True) for sha in self._record_shas(m)} - set(known)
        regular = not os.path.lexists(path) or stat.S_ISREG(path.lstat().st_mode)
        if lacking and regular:
            found = self._facts_from_records(lacking)
            whole = [*known.values(), *sorted(found.values(), key=lambda c: (c.time is None, c.time or 0, c.sha))]
            _write_atomic(path, "".join(json.dumps(asdict(c), sort_keys=True) + "\n" for c in whole))
            return
        _append_lines(path, lines)

    # ---- reading -------------------------------------------------------------------------------------------------

    def _read_commit(self, machine: str, sha: str) -> list[Record]:
        return self._read_records_file(self._records_file(machine, sha), sha)

    def _read_records_file(self, path: Path, sha: str, problems: list[str] | None = None) -> list[Record]:
        out: list[Record] = []
        bad = 0
        for i, data in _json_lines(path, problems):
            try:
                r = from_dict(data, f"{path}:{i}")
            except DataError as exc:
                bad += 1
                if bad == 1:
                    first = str(exc)
                continue
            except Exception:
                bad += 1
                if bad == 1:
                    first = f"{path}:{i}: not an rlbench record"
                continue
            if record_commit(r) != sha:
                bad += 1
                if bad == 1:
                    first = f"{path}:{i}: a record of another commit"
                continue
            out.append(r)
        if bad and not out:
            _warn(f"skipped {path}: no readable record of commit {sha[:12]} ({first})")
            if problems is not None:
                problems.append(f"no readable record of commit {sha[:12]}: {first}")
        elif bad:
            _warn(f"{path}: skipped {bad} unreadable record(s) ({first})")
        return out

    def has(self, machine: str, commit: str, benchmark: str, params: dict, *, gaps: bool = False) -> bool:
        """Whether ``benchmark`` was already measured at ``commit`` on ``machine`` (to resume a history run).

        A stored record matches when its benchmark is ``benchmark`` and it holds every item of ``params`` (records
        may carry more parameters than were asked for: a micro-benchmark's group, size, ...). With ``gaps=True`` a
        stored gap for that benchmark and parameters counts too.
        """
        sha = commit.lower()
        if not _SHA.match(sha) or not _MACHINE.match(machine):
            return False
        want = json.loads(params_json(params))
        for r in self._read_commit(machine, sha):
            if r.benchmark == benchmark:
                have = json.loads(params_json(r.params))
                if all(k in have and have[k] == v for k, v in want.items()):
                    return True
        if gaps:
            return any(
                g.commit == sha and g.benchmark == benchmark and params_json(g.params) == params_json(params)
                for g in self.gaps(machine)
            )
        return False

    def machines(self, *, quiet: bool = False) -> list[str]:
        """Machine ids present in the store, sorted (unexpected entries are skipped with a warning, unless ``quiet``)."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith("."):
                continue
            parts = (RECORDS, MACHINE_FILE, GAPS, CONFIRMATIONS)
            if entry.is_dir() and _MACHINE.match(entry.name) and any((entry / n).exists() for n in parts):
                out.append(entry.name)
                continue
            if (entry.name == COMMITS and entry.is_file()) or (entry.name == UNREADABLE and entry.is_dir()):
                continue
            if not quiet:
                _warn(f"skipped {entry}: not part of a history store")
        return out

    def machine_fingerprint(self, machine: str) -> dict:
        """The stored fingerprint of a machine (``{}`` when absent or unreadable, with a warning for the latter)."""
        path = self._machine_dir(machine) / MACHINE_FILE
        if not path.exists():
            return {}
        try:
            data = json.loads(read_text(path))
        except Exception as exc:
            _warn(f"skipped {path}: {exc if isinstance(exc, DataError) else 'not JSON'}")
            return {}
        if not isinstance(data, dict):
            _warn(f"skipped {path}: not a machine fingerprint (expected a JSON object)")
            return {}
        return data

    def _commit_files(self, machine: str) -> list[tuple[str, Path]]:
        folder = self._machine_dir(machine) / RECORDS
        if not folder.is_dir():
            return []
        out = []
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):
                continue
            sha = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else ""
            if not _SHA.match(sha):
                _warn(f"skipped {path}: not a history records file (expected <commit>.jsonl)")
                continue
            if not path.is_file():
                _warn(f"skipped {path}: {_not_regular(path)}")
                continue
            out.append((sha, path))
        return out

    def records(self, machine: str) -> list[Record]:
        """Every readable record of a machine (corrupt lines and files skipped with a warning)."""
        out: list[Record] = []
        for sha, path in self._commit_files(machine):
            out += self._read_records_file(path, sha)
        return out

    def gaps(self, machine: str) -> list[Gap]:
        """The gaps recorded on a machine (unreadable lines skipped with a warning)."""
        return self._read_gaps(self._machine_dir(machine) / GAPS)

    def _read_gaps(self, path: Path, problems: list[str] | None = None) -> list[Gap]:
        out = []
        lines = _json_lines(path, problems)
        for i, d in lines:
            try:
                gap = Gap(**d)
                ok = (
                    all(isinstance(getattr(gap, f), str) for f in ("machine", "commit", "benchmark", "status", "message"))
                    and isinstance(gap.params, dict)
                    and gap.status in GAP_STATUSES
                    and bool(_SHA.match(gap.commit))
                )
            except TypeError:
                ok = False
            if not ok:
                _warn(f"{path}:{i}: skipped a line that is not a gap")
                continue
            out.append(gap)
        if lines and not out and problems is not None:
            problems.append("no line is a gap")
        return out

    def commits(self) -> dict[str, CommitInfo]:
        """Known commit facts by sha: ``commits.jsonl`` (the latest line for a sha wins; unreadable lines skipped with a
        warning), then, for the commits it lacks or knows no time of, what their records say (each record carries its
        commit's time and subject): a missing or corrupt ``commits.jsonl`` does not scramble the order."""
        out = self._file_commits(self.root / COMMITS)
        lacking = {sha for m in self.machines(quiet=True) for sha in self._record_shas(m)}
        lacking -= {sha for sha, info in out.items() if info.time is not None}
        for sha, info in self._facts_from_records(lacking).items():
            out[sha] = _merge(info, out[sha]) if sha in out else info
        return out

    def _record_shas(self, machine: str) -> list[str]:
        """The commits with a records file on ``machine`` (names only: nothing read, nothing warned)."""
        try:
            names = os.listdir(self._machine_dir(machine) / RECORDS)
        except OSError:
            return []
        return [n[: -len(".jsonl")] for n in names if n.endswith(".jsonl") and _SHA.match(n[: -len(".jsonl")])]

    def _facts_from_records(self, shas: set[str]) -> dict[str, CommitInfo]:
        """Commit facts of ``shas`` as their records carry them (the first record with a time; else the first)."""
        out: dict[str, CommitInfo] = {}
        for m in self.machines(quiet=True) if shas else []:
            for sha in sorted(shas & set(self._record_shas(m))):
                if out.get(sha, CommitInfo(sha, None, None)).time is not None:
                    continue
                for r in self._read_commit(m, sha):
                    out[sha] = _merge(out.get(sha), _commit_from_record(r, sha))
                    if out[sha].time is not None:
                        break
        return out

    def _file_commits(self, path: Path, problems: list[str] | None = None) -> dict[str, CommitInfo]:
        out: dict[str, CommitInfo] = {}
        lines = _json_lines(path, problems)
        for i, d in lines:
            try:
                info = CommitInfo(**d)
                ok = (
                    isinstance(info.sha, str)
                    and bool(_SHA.match(info.sha))
                    and (info.time is None or (isinstance(info.time, int) and not isinstance(info.time, bool)))
                    and (info.subject is None or isinstance(info.subject, str))
                    and isinstance(info.dirty, bool)
                )
            except TypeError:
                ok = False
            if not ok:
                _warn(f"{path}:{i}: skipped a line that is not a commit")
                continue
            out[info.sha] = info
        if lines and not out and problems is not None:
            problems.append("no line is a commit")
        return out

    def known_commits(self, infos: dict[str, CommitInfo] | None = None) -> set[str]:
        """Every sha the store mentions: in commits.jsonl, in any machine's records or gaps (``infos``: what
        :meth:`commits` returned, if at hand)."""
        shas = set(self.commits() if infos is None else infos)
        for machine in self.machines():
            shas.update(sha for sha, _ in self._commit_files(machine))
            shas.update(g.commit for g in self.gaps(machine))
        return shas

    def order(self, repo: Path | None = None) -> list[str]:
        """Every known sha, oldest first.

        With ``repo``: the repository's topology (``git rev-list --topo-order``; parents before children), then any
        commits the repository does not have, by time. Without: by committer time (unknown times last); commits of
        the same second (a script's, a rebase's) in the order the store first learnt of them (``history run`` adds
        them oldest first, in the repository's topology), then by sha.

        Raises:
            DataError: If ``repo`` is not a git repository.
        """
        infos = self.commits()
        shas = self.known_commits(infos)

        first_seen = {sha: i for i, sha in enumerate(infos)}  # commits.jsonl's order: a re-written line keeps its place

        def by_time(s: str) -> tuple[bool, int, int, str]:
            t = infos[s].time if s in infos else None
            return t is None, t or 0, first_seen.get(s, len(first_seen)), s

        if repo is None:
            return sorted(shas, key=by_time)
        if _git(repo, ["rev-parse", "--git-dir"]) is None:
            raise DataError(f"{str(repo)!r} is not a git repository; give the repository the history was measured from")
        present = _existing_commits(repo, sorted(shas))
        listed = _git(repo, ["rev-list", "--topo-order", "--reverse", "--stdin"], "\n".join(present) + "\n") if present else ""
        topo = [s for s in (listed or "").split() if s in shas]
        rest = sorted(shas - set(topo), key=by_time)
        return topo + rest

    def series(self, machine: str | None = None, repo: Path | None = None) -> list[Series]:
        """Every (machine, benchmark, parameters, metric) with its per-commit samples, commits in :meth:`order`.

        Context metrics (``machine/...``) are left out; only finite samples are kept; a commit without any is left
        out of that series. Sorted by :meth:`Series.key`.
        """
        rank = {sha: i for i, sha in enumerate(self.order(repo))}
        out: list[Series] = []
        machines = self.machines()
        wanted = [machine] if machine is not None else machines
        # every machine's records, each file read once: a series' identity is learnt from all of them
        read = {
            m: [(sha, r) for sha, path in self._commit_files(m) for r in self._read_records_file(path, sha)]
            for m in dict.fromkeys([*machines, *wanted])
        }
        identity = self.identity([r for m in machines for _, r in read[m]])
        for m in wanted:
            groups: dict[tuple[str, str, str], dict[str, list[float]]] = {}
            meta: dict[tuple[str, str, str], tuple[dict, str, str, dict]] = {}
            loads: dict[tuple[str, str], dict[str, list[float]]] = {}
            records = sorted(read[m], key=lambda f: rank.get(f[0], len(rank)))  # commits in order: the newest record wins
            for sha, r in records:
                if r.metric == MACHINE_OTHER_CPU:
                    per = loads.setdefault((r.benchmark, params_json(identity(r))), {})
                    per.setdefault(sha, []).extend(v for v in r.samples if math.isfinite(v))
                if r.metric.startswith(MACHINE):
                    continue
                params = identity(r)
                k = (r.benchmark, params_json(params), case_metric(r))
                finite = [v for v in r.samples if math.isfinite(v)]
                groups.setdefault(k, {}).setdefault(sha, []).extend(finite)
                meta[k] = (params, r.unit, r.direction, r.params)
            for (benchmark, _, metric), per_commit in groups.items():
                params, unit, direction, values = meta[(benchmark, _, metric)]
                commits = sorted((s for s, v in per_commit.items() if v), key=lambda s: rank.get(s, len(rank)))
                if not commits:
                    continue
                seen = loads.get((benchmark, _), {})
                load = [_median(seen.get(sha)) for sha in commits]
                out.append(
                    Series(
                        m,
                        benchmark,
                        params,
                        metric,
                        unit,
                        direction,
                        is_exact(metric, unit),
                        commits,
                        [per_commit[s] for s in commits],
                        dict(values),
                        load,
                    )
                )
        return sorted(out, key=Series.key)

    def identity(self, records: list[Record] | None = None) -> Callable[[Record], dict]:
        """What tells a record's series apart, learnt from ``records`` (default: every machine's, so a case is the
        same series key on every machine): a function of a record.

        A series is a benchmark's *case* over commits, under one command. Its parameters are those that differ
        between the records of one run (the cases of a micro benchmark: implementation, size) and those the command
        line set (``--total-steps 16384``). The other parameters are the benchmark's defaults at that commit: a
        parameter added by a later commit, or a default changed, is part of the history (a step there, if it made a
        difference), not a new series.
        """
        if records is None:
            records = [r for m in self.machines() for r in self.records(m)]
        seen: dict[tuple[str, str], dict[str, set[str]]] = {}
        for r in records:
            values = seen.setdefault((r.benchmark, r.run_id), {})
            for k, v in r.params.items():
                values.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
        varying: dict[str, set[str]] = {}
        for (benchmark, _), values in seen.items():
            varying.setdefault(benchmark, set()).update(k for k, vs in values.items() if len(vs) > 1)

        def of(r: Record) -> dict:
            keep = varying.get(r.benchmark, set()) | command_params(r)
            return {k: v for k, v in r.params.items() if k in keep}

        return of


def command_params(r: Record) -> set[str]:
    """The parameter names the record's command line set (``--total-steps 16384`` -> ``total_steps``), run options
    (``--repeats``, ``--store``, ``--seed``, ...) excepted."""
    command = r.meta.get("command") if isinstance(r.meta, dict) else None
    if not isinstance(command, str):
        return set()
    return {n for n in _command_options(command) if n in r.params and n not in _RUN_OPTIONS}


@functools.lru_cache(maxsize=1024)
def _command_options(command: str) -> frozenset[str]:
    """The option names of a command line (``--total-steps`` -> ``total_steps``); parsed once per command: every
    record of a run carries the same one, and a history of 1,000 commits holds tens of thousands of records."""
    try:
        words = shlex.split(command)
    except ValueError:
        return frozenset()
    return frozenset(w[2:].split("=", 1)[0].replace("-", "_") for w in words if w.startswith("--"))


_RUN_OPTIONS = frozenset({"seed", "repeats", "store", "report", "quiet", "json", "profile", "backend", "address", "timeout"})


def _git(repo: Path, args: list[str], stdin: str | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _existing_commits(repo: Path, shas: list[str]) -> list[str]:
    """The shas that name a commit in ``repo`` (one ``git cat-file --batch-check`` call)."""
    if not shas:
        return []
    out = _git(repo, ["cat-file", "--batch-check=%(objectname) %(objecttype)"], "".join(f"{s}^{{commit}}\n" for s in shas))
    if out is None:
        return []
    found = []
    for sha, line in zip(shas, out.splitlines()):
        parts = line.split()
        if len(parts) == 2 and parts[1] == "commit":
            found.append(sha)
    return found

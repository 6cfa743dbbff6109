"""The history store: every record that names a commit, kept per machine, read back as series over commits.

Layout of a history store (default :data:`DEFAULT_HISTORY`, ``.rlbench/history`` in the working directory)::

    ROOT/commits.jsonl                        one CommitInfo per line (the latest line for a sha wins)
    ROOT/<machine_id>/machine.json            the machine fingerprint (as first seen)
    ROOT/<machine_id>/records/<sha>.jsonl     that commit's records (append-only, deduplicated)
    ROOT/<machine_id>/gaps.jsonl              Gap lines: a commit where a benchmark was absent or failed

* **Machines are kept apart.** A record goes under the id of its machine fingerprint (``fingerprint.machine.id``,
  else the hash :func:`~rlbench.results.fingerprint.machine_id` of its machine fields, else ``unknown``); a series
  never holds two machines.
* **Adding is idempotent.** A record is identified by (run id, benchmark, parameters, metric, repeat); one already
  stored is counted as a duplicate and not written again, so adding the same store twice changes nothing. A record
  without a commit (measured outside a git repository) is counted as skipped, never stored.
* **Dirty trees.** A record measured from a tree with uncommitted changes is kept under its commit, and that commit's
  :class:`CommitInfo` is marked ``dirty`` (a page says so).
* **Writes** are appends of whole lines in one system call (then ``fsync``) or atomic replacements (``machine.json``),
  with SIGINT/SIGTERM held meanwhile. A torn last line (a writer killed by ``kill -9``) is skipped on read with a
  warning, and cut off before the next append.
* **Reading never fails on one bad file.** A corrupt line, a corrupt or foreign file (a name that is not
  ``<sha>.jsonl``, text that is not records) or an unexpected directory is skipped with a
  :class:`~rlbench.results.store.RecordsWarning` naming it. Dotfiles are ignored.
* **Order.** :meth:`HistoryStore.order` sorts commits by the repository's topology (``git rev-list --topo-order``)
  when a repository is given, else by committer time (from the records' git fingerprint or :meth:`add_commits`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import secrets
import shlex
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
from rlbench.results.metrics import COUNTERS, MACHINE
from rlbench.results.records import Record, from_dict
from rlbench.results.store import RecordsWarning, append_whole, read_records, read_text

DEFAULT_HISTORY = ".rlbench/history"
COMMITS = "commits.jsonl"
MACHINE_FILE = "machine.json"
RECORDS = "records"
GAPS = "gaps.jsonl"
GAP_STATUSES = ("absent", "failed")
UNKNOWN_MACHINE = "unknown"

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

    def key(self) -> str:
        """Stable id: ``machine|benchmark|params-json|metric``."""
        return f"{self.machine}|{self.benchmark}|{params_json(self.params)}|{self.metric}"


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
    return r.run_id, r.benchmark, params_json(r.params), r.metric, r.repeat


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
    """Append whole lines in one write (cutting off a torn last line first), then fsync; or leave the file as it was."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if not data:
        return
    with signals_deferred():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot write to history store file {str(path)!r} ({exc.strerror or exc})") from None
        try:
            size = os.fstat(fd).st_size
            if size:
                tail = os.pread(fd, min(size, 1 << 20), max(0, size - (1 << 20)))
                if not tail.endswith(b"\n"):  # a writer was cut off mid-line: drop its partial line
                    cut = tail.rfind(b"\n")
                    size = size - len(tail) + cut + 1 if cut >= 0 else (0 if len(tail) == size else size)
                    os.ftruncate(fd, size)
            append_whole(fd, data, size, f"cannot write to history store file {str(path)!r}")
        finally:
            os.close(fd)


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


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """``(line number, decoded JSON)`` of a JSONL file; bad lines skipped with a warning naming ``file:line``.

    A missing file is empty; an unreadable one is skipped whole, with a warning.
    """
    if not path.exists():
        return []
    try:
        text = read_text(path)
    except DataError as exc:
        _warn(f"skipped {path}: {exc}")
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

    def _machine_dir(self, machine: str) -> Path:
        if not _MACHINE.match(machine):
            raise DataError(f"{machine!r} is not a machine id")
        return self.root / machine

    def _records_file(self, machine: str, sha: str) -> Path:
        return self._machine_dir(machine) / RECORDS / f"{sha}.jsonl"

    def _stored_keys(self, machine: str, sha: str) -> set[tuple[str, str, str, str, int]]:
        k = (machine, sha)
        if k not in self._keys:
            self._keys[k] = {_record_key(r) for r in self._read_commit(machine, sha)}
        return self._keys[k]

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
        if gap in self.gaps(gap.machine):
            return
        _append_lines(self._machine_dir(gap.machine) / GAPS, [json.dumps(asdict(gap), sort_keys=True, default=str)])

    def add_commits(self, infos: Iterable[CommitInfo]) -> None:
        """Record commit facts; merged with what is known (an unknown time or subject keeps the known one; ``dirty``
        sticks). Only a change is written."""
        known = self.commits()
        lines = []
        for info in infos:
            sha = info.sha.lower()
            if not _SHA.match(sha):
                raise DataError(f"{info.sha!r} is not a commit id")
            merged = _merge(known.get(sha), CommitInfo(sha, info.time, info.subject, info.dirty))
            if merged != known.get(sha):
                known[sha] = merged
                lines.append(json.dumps(asdict(merged), sort_keys=True))
        _append_lines(self.root / COMMITS, lines)

    # ---- reading -------------------------------------------------------------------------------------------------

    def _read_commit(self, machine: str, sha: str) -> list[Record]:
        return self._read_records_file(self._records_file(machine, sha), sha)

    def _read_records_file(self, path: Path, sha: str) -> list[Record]:
        out: list[Record] = []
        bad = 0
        for i, data in _json_lines(path):
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

    def machines(self) -> list[str]:
        """Machine ids present in the store, sorted (unexpected entries are skipped with a warning)."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith("."):
                continue
            parts = (RECORDS, MACHINE_FILE, GAPS)
            if entry.is_dir() and _MACHINE.match(entry.name) and any((entry / n).exists() for n in parts):
                out.append(entry.name)
                continue
            if entry.name == COMMITS and entry.is_file():
                continue
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
            if not _SHA.match(sha) or not path.is_file():
                _warn(f"skipped {path}: not a history records file (expected <commit>.jsonl)")
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
        path = self._machine_dir(machine) / GAPS
        out = []
        for i, d in _json_lines(path):
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
        return out

    def commits(self) -> dict[str, CommitInfo]:
        """Known commit facts by sha (the latest line for a sha wins; unreadable lines skipped with a warning)."""
        path = self.root / COMMITS
        out: dict[str, CommitInfo] = {}
        for i, d in _json_lines(path):
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
        return out

    def known_commits(self) -> set[str]:
        """Every sha the store mentions: in commits.jsonl, in any machine's records or gaps."""
        shas = set(self.commits())
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
        shas = self.known_commits()
        infos = self.commits()

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
            records = sorted(read[m], key=lambda f: rank.get(f[0], len(rank)))  # commits in order: the newest record wins
            for sha, r in records:
                if r.metric.startswith(MACHINE):
                    continue
                params = identity(r)
                k = (r.benchmark, params_json(params), r.metric)
                finite = [v for v in r.samples if math.isfinite(v)]
                groups.setdefault(k, {}).setdefault(sha, []).extend(finite)
                meta[k] = (params, r.unit, r.direction, r.params)
            for (benchmark, _, metric), per_commit in groups.items():
                params, unit, direction, values = meta[(benchmark, _, metric)]
                commits = sorted((s for s, v in per_commit.items() if v), key=lambda s: rank.get(s, len(rank)))
                if not commits:
                    continue
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

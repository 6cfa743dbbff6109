"""The results store: append-only JSONL, one file per run, and loading records back.

Layout: ``<store>/<run_id>.jsonl`` (default store: ``.rlbench/`` in the working directory). A run's
records are appended as each repeat finishes, one ``write`` of whole lines followed by ``fsync``, so a
crash or Ctrl-C loses at most the repeat in flight.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rlbench.errors import DataError, StoreError
from rlbench.records import Record, from_dict

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_STORE = ".rlbench"
SUFFIX = ".jsonl"


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
            probe = self.store / f".probe-{self.run_id}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreError(
                f"cannot write to results store {str(self.store)!r} ({exc.strerror or exc}); "
                "pass --store DIR with a writable directory"
            ) from None

    def write(self, records: Iterable[Record]) -> None:
        """Append records as whole lines and flush them to disk."""
        text = "".join(r.to_json() + "\n" for r in records)
        if not text:
            return
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise StoreError(f"cannot write results to {str(self.path)!r} ({exc.strerror or exc})") from None
        self.count += text.count("\n")


def run_files(store: str | os.PathLike[str]) -> list[Path]:
    """The run files of a store, oldest first (run ids sort by time)."""
    return sorted(Path(store).glob(f"*{SUFFIX}"))


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


def read_records(path: str | os.PathLike[str]) -> list[Record]:
    """Read and validate every record of a file or store directory.

    Raises:
        DataError: On an empty, truncated or corrupt file, a foreign JSON file, or a future schema.
    """
    records: list[Record] = []
    for file in resolve(path):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read {str(file)!r}: {exc}") from None
        if not text.strip():
            raise DataError(f"{str(file)!r} is empty: no records to read")
        lines = text.splitlines()
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{file}:{i}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                hint = (
                    "truncated (the run was cut off while writing?)"
                    if i == len(lines) and not text.endswith("\n")
                    else "not JSON"
                )
                raise DataError(f"{where}: {hint}; this is not a readable rlbench records file") from None
            records.append(from_dict(data, where))
    return records


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

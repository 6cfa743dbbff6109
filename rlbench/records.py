"""The versioned record schema: one JSON object per (run, benchmark, parameters, metric, repeat).

A record carries its raw samples (not only a summary) and the fingerprint of the machine, software and
commit that produced it, so any report can be rebuilt from records alone and records from different
machines are never compared silently.

Schema history (bump :data:`SCHEMA_VERSION` on change; keep old versions readable in :func:`from_dict`):

* 1 — first version.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from rlbench.errors import DataError

SCHEMA_VERSION = 1
DIRECTIONS = ("higher", "lower", "none")
_REQUIRED = ("schema", "run_id", "benchmark", "metric", "samples")


@dataclass
class Record:
    """One measured metric of one repeat of one benchmark case.

    Attributes:
        run_id: Identifier shared by every record of one ``rlbench run`` invocation.
        timestamp: ISO-8601 UTC time the record was written.
        benchmark: Benchmark id (kebab-case, e.g. ``ppo-cartpole``).
        params: The benchmark's parameters, seed excluded (cases match on these).
        definition_hash: Hash of the benchmark definition (name, definition version, parameter defaults).
        metric: Slash-namespaced metric name (``sps``, ``time/update``).
        unit: Unit of the samples (``steps/s``, ``s``, ``count``, ``return``).
        direction: ``higher`` or ``lower`` is better, or ``none`` for informational metrics.
        samples: Raw measurements (one per repeat for run-level metrics; one per iteration, episode, ...
            for series).
        repeat: 0-based repeat index within the run.
        seed: Seed of that repeat.
        device: Device the benchmark ran on (``cpu``, ``cuda:0``).
        fingerprint: ``{"machine": {...}, "software": {...}, "git": {...}}``.
        x: Optional abscissa per sample (e.g. agent steps for a learning curve).
        meta: Free-form context (command line, labels of samples, artifact paths).
        schema: Schema version this record was written with.
    """

    run_id: str
    timestamp: str
    benchmark: str
    params: dict[str, Any]
    definition_hash: str
    metric: str
    unit: str
    direction: str
    samples: list[float]
    repeat: int = 0
    seed: int | None = None
    device: str = "cpu"
    fingerprint: dict[str, Any] = field(default_factory=dict)
    x: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def to_json(self) -> str:
        """One line of JSON (NaN and infinities, anywhere in the record, become ``null``)."""
        return json.dumps(_json_safe(asdict(self)), separators=(",", ":"), sort_keys=True, allow_nan=False, default=str)


def _json_safe(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def from_dict(data: Any, where: str = "record") -> Record:
    """Validate and upgrade a decoded JSON object into a :class:`Record`.

    Args:
        data: A decoded JSON value.
        where: Location for error messages (``file:line``).

    Raises:
        DataError: If the object is not an rlbench record, or was written by a newer schema.
    """
    if not isinstance(data, dict):
        raise DataError(f"{where}: not an rlbench record (expected a JSON object)")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise DataError(f"{where}: not an rlbench record (missing {', '.join(missing)})")
    version = data["schema"]
    if not isinstance(version, int) or version < 1:
        raise DataError(f"{where}: invalid schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise DataError(
            f"{where}: written by a newer rlbench (record schema {version}, this rlbench reads up to {SCHEMA_VERSION}); "
            "upgrade rlbench to read it"
        )
    samples = data["samples"]
    if not isinstance(samples, list):
        raise DataError(f"{where}: samples must be a list")
    known = set(Record.__dataclass_fields__)
    kwargs = {k: v for k, v in data.items() if k in known}
    kwargs["samples"] = [math.nan if v is None else float(v) for v in samples]
    if kwargs.get("x") is not None:
        kwargs["x"] = [math.nan if v is None else float(v) for v in kwargs["x"]]
    kwargs.setdefault("timestamp", "")
    kwargs.setdefault("params", {})
    kwargs.setdefault("definition_hash", "")
    kwargs.setdefault("unit", "")
    kwargs.setdefault("direction", "none")
    if kwargs["direction"] not in DIRECTIONS:
        raise DataError(f"{where}: direction must be one of {', '.join(DIRECTIONS)}, got {kwargs['direction']!r}")
    try:
        return Record(**kwargs)
    except TypeError as exc:  # wrong field types
        raise DataError(f"{where}: malformed record ({exc})") from None


def definition_hash(benchmark: str, version: int, defaults: dict[str, Any]) -> str:
    """A short stable hash of a benchmark definition: its id, definition version and parameter defaults."""
    blob = json.dumps({"benchmark": benchmark, "version": version, "defaults": defaults}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

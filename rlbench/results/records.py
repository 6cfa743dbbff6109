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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from rlbench.core.errors import DataError

if TYPE_CHECKING:
    from rlbench.results.metrics import Metric

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
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        try:  # json's C encoder, in one pass (a profile's records carry thousands of samples)
            return json.dumps(d, separators=(",", ":"), sort_keys=True, allow_nan=False, default=_json_default)
        except ValueError:  # a NaN or an infinity somewhere: the slow walk that makes each one null
            return json.dumps(_json_safe(d), separators=(",", ":"), sort_keys=True, allow_nan=False, default=str)


def _json_default(v: Any) -> Any:
    """What json cannot encode itself: a dataclass as its fields, anything else as its ``str``."""
    return asdict(v) if is_dataclass(v) and not isinstance(v, type) else str(v)


def _json_safe(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if is_dataclass(v) and not isinstance(v, type):
        return _json_safe(asdict(v))
    return v


_STR_FIELDS = ("run_id", "timestamp", "benchmark", "definition_hash", "metric", "unit", "device")
_DICT_FIELDS = ("params", "fingerprint", "meta")


def _numbers(value: Any, name: str, where: str) -> list[float]:
    """A JSON list of numbers (``null`` for a missing value) as floats, or a DataError naming the bad element."""
    if not isinstance(value, list):
        raise DataError(f"{where}: {name} must be a list of numbers, got {type(value).__name__}")
    out = []
    for i, v in enumerate(value):
        if v is None:
            out.append(math.nan)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
        else:
            raise DataError(f"{where}: {name}[{i}] must be a number or null, got {json.dumps(v)[:40]}")
    return out


def from_dict(data: Any, where: str = "record") -> Record:
    """Validate and upgrade a decoded JSON object into a :class:`Record`.

    Every field is checked for its type (records are never trusted by type: a report, a comparison or the gate
    must not meet a string where a number belongs), so a malformed record is refused here, naming its location.

    Args:
        data: A decoded JSON value.
        where: Location for error messages (``file:line``).

    Raises:
        DataError: If the object is not an rlbench record, has a field of the wrong type, or was written by a newer
            schema.
    """
    if not isinstance(data, dict):
        raise DataError(f"{where}: not an rlbench record (expected a JSON object)")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise DataError(f"{where}: not an rlbench record (missing {', '.join(missing)})")
    version = data["schema"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DataError(f"{where}: invalid schema version {json.dumps(version)[:40]}")
    if version > SCHEMA_VERSION:
        raise DataError(
            f"{where}: written by a newer rlbench (record schema {version}, this rlbench reads up to {SCHEMA_VERSION}); "
            "upgrade rlbench to read it"
        )
    known = set(Record.__dataclass_fields__)
    kwargs = {k: v for k, v in data.items() if k in known}
    for name in _STR_FIELDS:
        if name in kwargs and not isinstance(kwargs[name], str):
            raise DataError(f"{where}: {name} must be a string, got {json.dumps(kwargs[name])[:40]}")
    for name in _DICT_FIELDS:
        if name in kwargs and not isinstance(kwargs[name], dict):
            raise DataError(f"{where}: {name} must be a JSON object, got {type(kwargs[name]).__name__}")
    for part in ("machine", "software", "git"):
        if part in kwargs.get("fingerprint", {}) and not isinstance(kwargs["fingerprint"][part], dict):
            raise DataError(f"{where}: fingerprint.{part} must be a JSON object")
    repeat = kwargs.get("repeat", 0)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 0:
        raise DataError(f"{where}: repeat must be a non-negative integer, got {json.dumps(repeat)[:40]}")
    seed = kwargs.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise DataError(f"{where}: seed must be an integer or null, got {json.dumps(seed)[:40]}")
    kwargs["samples"] = _numbers(data["samples"], "samples", where)
    if kwargs.get("x") is not None:
        kwargs["x"] = _numbers(kwargs["x"], "x", where)
        if len(kwargs["x"]) != len(kwargs["samples"]):
            raise DataError(f"{where}: x has {len(kwargs['x'])} values for {len(kwargs['samples'])} samples")
    kwargs.setdefault("timestamp", "")
    kwargs.setdefault("params", {})
    kwargs.setdefault("definition_hash", "")
    kwargs.setdefault("unit", "")
    kwargs.setdefault("direction", "none")
    if kwargs["direction"] not in DIRECTIONS:
        raise DataError(
            f"{where}: direction must be one of {', '.join(DIRECTIONS)}, got {json.dumps(kwargs['direction'])[:40]}"
        )
    return Record(**kwargs)


def role_of(r: Record) -> str | None:
    """The role a record belongs to (``meta.role``: a thread or process ``rlbench profile`` followed), or ``None`` for
    the main process's main thread (every record of a run that followed nothing)."""
    role = r.meta.get("role") if isinstance(r.meta, dict) else None
    return str(role) if role else None


def case_metric(r: Record) -> str:
    """The metric a comparison or a history keys a record by: its name, and for a followed role's record
    ``METRIC@ROLE`` (``time/wait/queue@learner``), so each role's figures are their own case (``--fail`` names one so)."""
    role = role_of(r)
    return r.metric if role is None else f"{r.metric}@{role}"


def metric_records(
    metrics: Iterable[Metric],
    *,
    run_id: str,
    timestamp: str,
    benchmark: str,
    params: dict[str, Any],
    definition_hash: str,
    repeat: int,
    seed: int | None,
    device: str,
    fingerprint: dict[str, Any],
    meta: dict[str, Any],
) -> list[Record]:
    """The records of one repeat: one per metric, each with the case's ``params`` and ``meta`` under its own."""
    return [
        Record(
            run_id=run_id,
            timestamp=timestamp,
            benchmark=benchmark,
            params={**params, **m.params},
            definition_hash=definition_hash,
            metric=m.name,
            unit=m.unit,
            direction=m.direction,
            samples=list(m.samples),
            repeat=repeat,
            seed=seed,
            device=device,
            fingerprint=fingerprint,
            x=m.x,
            meta={**meta, **m.meta},
        )
        for m in metrics
    ]


def definition_hash(benchmark: str, version: int, defaults: dict[str, Any]) -> str:
    """A short stable hash of a benchmark definition: its id, definition version and parameter defaults."""
    blob = json.dumps({"benchmark": benchmark, "version": version, "defaults": defaults}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

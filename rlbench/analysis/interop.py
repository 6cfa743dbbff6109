"""Records to and from other tools' formats.

* **pytest-benchmark JSON** (also read by Bencher and github-action-benchmark's ``pytest`` tool): export
  writes one benchmark per time-valued case (unit ``s``), with stats computed from the raw samples;
  import turns a ``--benchmark-json`` file into rlbench records (raw ``data`` when the file was saved
  with ``--benchmark-save-data``, else the median alone, marked as such).
* **github-action-benchmark custom JSON**: ``customBiggerIsBetter`` / ``customSmallerIsBetter`` lists of
  ``{"name", "unit", "value", "range"}`` with the median as value.
* **Bencher Metric Format (BMF) JSON**: ``{benchmark: {measure: {"value", "lower_value", "upper_value"}}}``, for
  ``bencher run --adapter json``. A benchmark is a case: its name, with ``[param=value,...]`` for the parameters
  that differ between its cases in the run (a benchmark run with one set of parameters keeps its plain name); a
  measure an rlbench metric (named as rlbench names it, in its own unit: ``wall_s`` in seconds, ``sps`` in steps/s),
  the value the median of its samples and the bounds the 95% percentile-bootstrap interval of that median (left out
  for a single sample). Context metrics (``machine/...``) and metrics without a finite sample are left out.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime
from typing import Any

import numpy as np

from rlbench.analysis.compare import match_cases
from rlbench.core.errors import DataError
from rlbench.results.metrics import MICRO_CASE_KEYS, TIME_CALL
from rlbench.results.records import Record, from_dict
from rlbench.results.store import new_run_id, utc_now


def _case_name(benchmark: str, params_json: str, metric: str, base_params: str) -> str:
    params = json.loads(params_json)
    tag = "" if params_json == base_params else "[" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + "]"
    return f"{benchmark}{tag}::{metric}"


def _cases(records: list[Record]):
    cases = match_cases(records, records)
    base_params = json.dumps(records[0].params, sort_keys=True, default=str) if records else ""
    for c in cases:
        samples = c.pooled("base")
        if samples.size:
            yield c, _case_name(c.benchmark, c.params, c.metric, base_params), samples


def _stats(x: np.ndarray) -> dict[str, Any]:
    q1, med, q3 = (float(v) for v in np.quantile(x, [0.25, 0.5, 0.75]))
    iqr = q3 - q1
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    lo, hi = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    return {
        "min": float(x.min()),
        "max": float(x.max()),
        "mean": mean,
        "stddev": std,
        "rounds": int(x.size),
        "median": med,
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": int(((x < lo) | (x > hi)).sum()),
        "stddev_outliers": int((np.abs(x - mean) > std).sum()),
        "outliers": "",
        "ld15iqr": float(x[x >= lo].min()),
        "hd15iqr": float(x[x <= hi].max()),
        "ops": 1.0 / mean if mean > 0 else 0.0,
        "total": float(x.sum()),
        "iterations": 1,
        "data": [float(v) for v in x],
    }


def to_pytest_benchmark(records: list[Record]) -> dict[str, Any]:
    """pytest-benchmark's JSON for every case measured in seconds."""
    if not records:
        raise DataError("no records to export")
    fp = records[0].fingerprint or {}
    machine, git = fp.get("machine", {}), fp.get("git", {})
    benchmarks = []
    for c, name, x in _cases(records):
        if c.unit != "s":
            continue
        benchmarks.append(
            {
                "group": c.benchmark,
                "name": name,
                "fullname": name,
                "params": json.loads(c.params),
                "param": None,
                "extra_info": {"metric": c.metric, "run_id": records[0].run_id},
                "options": {"timer": "perf_counter"},
                "stats": _stats(x),
            }
        )
    if not benchmarks:
        raise DataError("no time-valued metric (unit s) to export in pytest-benchmark format; try --format github-action")
    return {
        "machine_info": {
            "node": "",
            "processor": machine.get("cpu", ""),
            "machine": machine.get("arch", ""),
            "cpu": {"brand_raw": machine.get("cpu", ""), "count": machine.get("cores")},
            "python_version": (fp.get("software") or {}).get("python", ""),
            "system": machine.get("os", ""),
        },
        "commit_info": {"id": git.get("commit"), "dirty": git.get("dirty"), "project": git.get("repo")},
        "benchmarks": benchmarks,
        "datetime": records[0].timestamp,
        "version": "rlbench-export",
    }


def to_github_action(records: list[Record], direction: str) -> list[dict[str, Any]]:
    """github-action-benchmark custom entries of one direction (``higher`` -> customBiggerIsBetter)."""
    if direction not in ("higher", "lower"):
        raise DataError(f"direction must be higher or lower, got {direction!r}")
    out = []
    for c, name, x in _cases(records):
        if c.direction != direction:
            continue
        q1, q3 = np.quantile(x, [0.25, 0.75])
        out.append(
            {
                "name": name,
                "unit": c.unit,
                "value": float(np.median(x)),
                "range": f"IQR {float(q3 - q1):.6g}",
                "extra": f"n={x.size} run {records[0].run_id}",
            }
        )
    return out


def _median_interval(x: np.ndarray, confidence: float = 0.95, n_boot: int = 4000) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median (deterministic: a fixed seed)."""
    rng = np.random.default_rng(0)
    meds = np.median(x[rng.integers(0, x.size, (n_boot, x.size))], axis=1)
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(meds, alpha)), float(np.quantile(meds, 1.0 - alpha))


def to_bencher(records: list[Record]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: ``{benchmark: {measure: {"value", "lower_value", "upper_value"}}}`` (see the module).

    Raises:
        DataError: No records, or no metric with a finite sample.
    """
    if not records:
        raise DataError("no records to export")
    cases = list(_cases(records))
    by_bench: dict[str, list[dict]] = {}
    for params_json in dict.fromkeys((c.benchmark, c.params) for c, _, _ in cases):
        by_bench.setdefault(params_json[0], []).append(json.loads(params_json[1]))
    varying = {  # the parameters whose value (or presence) differs between a benchmark's cases
        bench: {k for k in set().union(*cases_) if len({json.dumps(p.get(k), default=str) for p in cases_}) > 1}
        for bench, cases_ in by_bench.items()
    }
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c, _, x in cases:
        params = json.loads(c.params)
        tag = ",".join(f"{k}={params[k]}" for k in sorted(varying.get(c.benchmark, ())) if k in params)
        benchmark = f"{c.benchmark}[{tag}]" if tag else c.benchmark
        entry: dict[str, float] = {"value": float(np.median(x))}
        if x.size > 1:
            lo, hi = _median_interval(x)
            entry.update(lower_value=lo, upper_value=hi)
        out.setdefault(benchmark, {})[c.metric] = entry
    if not out:
        raise DataError("no metric with a finite sample to export in Bencher Metric Format")
    return out


def _obj(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, ``{}`` if absent (``null``); else a :class:`DataError` naming ``where``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DataError(f"{where} must be a JSON object, got {json.dumps(value)[:40]}")
    return value


def _text(obj: dict[str, Any], key: str, where: str) -> str | None:
    """The string at ``obj[key]`` (``None`` if absent or ``null``); else a :class:`DataError` naming the field."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise DataError(f"{where}{key} must be a string, got {json.dumps(value)[:40]}")
    return value


def _timing(v: Any, where: str) -> float:
    """One timing: a finite number of seconds, at least 0; else a :class:`DataError` naming where it is."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DataError(f"{where} is non-numeric ({json.dumps(v)[:40]}): a timing must be a number of seconds")
    x = float(v)
    if not math.isfinite(x) or x < 0:
        shown = "NaN" if math.isnan(x) else f"{x:g}"
        raise DataError(f"{where} is {shown}: a timing is a finite number of seconds, at least 0")
    return x


def _iso_time(value: Any, where: str) -> str:
    """pytest-benchmark's ``datetime``: an ISO 8601 time (the records' timestamp, which every reader needs)."""
    if not isinstance(value, str):
        raise DataError(f"{where}datetime must be an ISO 8601 time string, got {json.dumps(value)[:40]}")
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise DataError(f"{where}datetime must be an ISO 8601 time, got {value[:40]!r}") from None
    return value


def from_pytest_benchmark(data: Any, source: str = "pytest-benchmark JSON") -> list[Record]:
    """Records (metric ``time/call``, seconds, lower is better) from pytest-benchmark's ``--benchmark-json`` output.

    A benchmark's ``params`` become the record's parameters, together with the case keys of its ``extra_info``
    (``group``, ``impl``, ``size``, ``op``, ``device``: rlbench's micro suites set them), so a run of
    ``pytest suites/micro --benchmark-json`` imports as the same cases ``rlbench run micro`` records.

    Nothing is accepted that the store could not read back, or that is no timing: every field rlbench uses is checked
    for its type, every timing must be a finite number of seconds at least 0 (not NaN, ``1e999`` or negative), and each
    record goes through the store's own reader (:func:`rlbench.results.records.from_dict`) before it is returned.

    Raises:
        DataError: If ``data`` is not pytest-benchmark output, or a field is malformed (one line naming the benchmark
            and the field).
    """
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise DataError(f"{source}: not pytest-benchmark JSON (no 'benchmarks' list)")
    head = f"{source}: "
    mi = _obj(data.get("machine_info"), f"{head}machine_info")
    ci = _obj(data.get("commit_info"), f"{head}commit_info")
    cpu = _obj(mi.get("cpu"), f"{head}machine_info.cpu")
    cores = cpu.get("count")
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int)):
        raise DataError(f"{head}machine_info.cpu.count must be an integer, got {json.dumps(cores)[:40]}")
    hardware = {
        "cpu": _text(cpu, "brand_raw", f"{head}machine_info.cpu.") or _text(mi, "processor", f"{head}machine_info."),
        "cores": cores,
        "arch": _text(mi, "machine", f"{head}machine_info."),
        "gpus": [],
    }
    system = _text(mi, "system", f"{head}machine_info.") or ""
    release = _text(mi, "release", f"{head}machine_info.") or ""
    machine = {
        **hardware,
        "os": f"{system} {release}".strip(),
        "id": hashlib.sha256(json.dumps(hardware, sort_keys=True).encode()).hexdigest()[:12],
    }
    dirty = ci.get("dirty")
    if dirty is not None and not isinstance(dirty, bool):
        raise DataError(f"{head}commit_info.dirty must be true or false, got {json.dumps(dirty)[:40]}")
    fingerprint = {
        "machine": machine,
        "software": {
            "python": _text(mi, "python_version", f"{head}machine_info."),
            "packages": {"pytest-benchmark": _text(data, "version", head)},
        },
        "git": {
            "commit": _text(ci, "id", f"{head}commit_info."),
            "dirty": dirty,
            "repo": _text(ci, "project", f"{head}commit_info."),
        },
    }
    run_id = new_run_id()
    ts = utc_now() if data.get("datetime") in (None, "") else _iso_time(data["datetime"], head)
    records = []
    for i, b in enumerate(data["benchmarks"]):
        if not isinstance(b, dict):
            raise DataError(f"{head}benchmark #{i} must be a JSON object, got {json.dumps(b)[:40]}")
        given = _text(b, "fullname", f"{head}benchmark #{i}: ") or _text(b, "name", f"{head}benchmark #{i}: ")
        name = given or f"benchmark-{i}"
        at = f"{head}benchmark {name!r}: "
        stats = b.get("stats")
        if not isinstance(stats, dict) or "median" not in stats:
            raise DataError(f"{at}no stats (a JSON object with a median)")
        raw = stats.get("data")
        if raw is not None and not isinstance(raw, list):
            raise DataError(f"{at}stats.data must be a list of timings, got {json.dumps(raw)[:40]}")
        has_raw = bool(raw)
        if has_raw:
            samples = [_timing(v, f"{at}stats.data[{k}]") for k, v in enumerate(raw)]
        else:
            samples = [_timing(stats["median"], f"{at}stats.median")]
        summary = {k: stats[k] for k in ("min", "max", "mean", "stddev", "median", "iqr", "rounds") if k in stats}
        meta = {"imported_from": "pytest-benchmark", "summary_only": not has_raw, "stats": summary}
        params = _obj(b.get("params"), f"{at}params")
        info = b.get("extra_info") if isinstance(b.get("extra_info"), dict) else {}
        record = Record(
            run_id=run_id,
            timestamp=ts,
            benchmark=name,
            params={**params, **{k: info[k] for k in MICRO_CASE_KEYS if k in info}},
            definition_hash=hashlib.sha256(name.encode()).hexdigest()[:16],
            metric=TIME_CALL,
            unit="s",
            direction="lower",
            samples=samples,
            fingerprint=fingerprint,
            meta={**meta, "group": _text(b, "group", at)},
        )
        try:  # what the store's reader would refuse is refused here, before anything is written
            from_dict(json.loads(record.to_json()), f"{at}as a record")
        except (DataError, ValueError, RecursionError) as exc:
            raise DataError(str(exc) if isinstance(exc, DataError) else f"{at}cannot be stored ({exc})"[:300]) from None
        records.append(record)
    if not records:
        raise DataError(f"{source}: holds no benchmarks")
    return records

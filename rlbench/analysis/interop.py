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
from typing import Any

import numpy as np

from rlbench.analysis.compare import match_cases
from rlbench.core.errors import DataError
from rlbench.results.metrics import MICRO_CASE_KEYS, TIME_CALL
from rlbench.results.records import Record
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


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"not a number: {v!r}")
    return float(v)


def from_pytest_benchmark(data: Any, source: str = "pytest-benchmark JSON") -> list[Record]:
    """Records (metric ``time/call``, seconds, lower is better) from pytest-benchmark's ``--benchmark-json`` output.

    A benchmark's ``params`` become the record's parameters, together with the case keys of its ``extra_info``
    (``group``, ``impl``, ``size``, ``op``, ``device``: rlbench's micro suites set them), so a run of
    ``pytest suites/micro --benchmark-json`` imports as the same cases ``rlbench run micro`` records.

    Raises:
        DataError: If ``data`` is not pytest-benchmark output.
    """
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise DataError(f"{source}: not pytest-benchmark JSON (no 'benchmarks' list)")
    mi, ci = data.get("machine_info") or {}, data.get("commit_info") or {}
    cpu = mi.get("cpu") or {}
    hardware = {
        "cpu": cpu.get("brand_raw") or mi.get("processor"),
        "cores": cpu.get("count"),
        "arch": mi.get("machine"),
        "gpus": [],
    }
    machine = {
        **hardware,
        "os": f"{mi.get('system', '')} {mi.get('release', '')}".strip(),
        "id": hashlib.sha256(json.dumps(hardware, sort_keys=True).encode()).hexdigest()[:12],
    }
    fingerprint = {
        "machine": machine,
        "software": {"python": mi.get("python_version"), "packages": {"pytest-benchmark": data.get("version")}},
        "git": {"commit": ci.get("id"), "dirty": ci.get("dirty"), "repo": ci.get("project")},
    }
    run_id = new_run_id()
    ts = data.get("datetime") or utc_now()
    records = []
    for i, b in enumerate(data["benchmarks"]):
        stats = b.get("stats") if isinstance(b, dict) else None
        if not isinstance(stats, dict) or "median" not in stats:
            raise DataError(f"{source}: benchmark #{i} has no stats")
        raw = stats.get("data")
        has_raw = isinstance(raw, list) and bool(raw)
        try:
            samples = [_number(v) for v in raw] if has_raw else [_number(stats["median"])]
        except (TypeError, ValueError):
            raise DataError(f"{source}: benchmark #{i} has a non-numeric timing in stats.data or stats.median") from None
        summary = {k: stats[k] for k in ("min", "max", "mean", "stddev", "median", "iqr", "rounds") if k in stats}
        meta = {"imported_from": "pytest-benchmark", "summary_only": not has_raw, "stats": summary}
        name = b.get("fullname") or b.get("name") or f"benchmark-{i}"
        info = b.get("extra_info") if isinstance(b.get("extra_info"), dict) else {}
        records.append(
            Record(
                run_id=run_id,
                timestamp=ts,
                benchmark=name,
                params={**(b.get("params") or {}), **{k: info[k] for k in MICRO_CASE_KEYS if k in info}},
                definition_hash=hashlib.sha256(name.encode()).hexdigest()[:16],
                metric=TIME_CALL,
                unit="s",
                direction="lower",
                samples=samples,
                fingerprint=fingerprint,
                meta={**meta, "group": b.get("group")},
            )
        )
    if not records:
        raise DataError(f"{source}: holds no benchmarks")
    return records

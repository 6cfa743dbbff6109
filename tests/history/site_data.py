"""Synthetic history stores for the site tests: records made by hand, added with ``HistoryStore.add_records``.

Nothing here is measured: the values are chosen so that a test knows, independently of the site code, what each
chart must hold (which commits have samples, on which machine) and where the injected step is.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from rlbench.results.fingerprint import machine_id
from rlbench.results.history import CommitInfo, Gap, HistoryStore, params_json
from rlbench.results.records import Record

HOSTILE_SUBJECT = "fix </script><script>window.__pwned=1</script> & <b>bold</b> \u2028 'quotes\""
HOSTILE_BENCH = "evil</script><img src=x onerror=window.__pwned=2>"
HOSTILE_PARAM = "<!--</script>"


def sha_of(i: int, salt: str = "c") -> str:
    return hashlib.sha1(f"{salt}{i}".encode()).hexdigest()


def machine(cpu: str) -> dict:
    info = {"cpu": cpu, "cores": 2, "arch": "x86_64", "os": "Linux test", "gpus": []}
    info["id"] = machine_id(info)
    return info


def record(
    m: dict, info: CommitInfo, bench: str, params: dict, metric: str, unit: str, direction: str, samples, cmd: str
) -> Record:
    git = {"commit": info.sha, "dirty": info.dirty, "repo": "toy", "time": info.time, "subject": info.subject}
    return Record(
        run_id=f"run-{info.sha[:8]}",
        timestamp="2026-01-01T00:00:00Z",
        benchmark=bench,
        params=params,
        definition_hash="def0",
        metric=metric,
        unit=unit,
        direction=direction,
        samples=list(samples),
        fingerprint={"machine": m, "software": {}, "git": git},
        meta={"command": cmd},
    )


def expected_points(syn: Synthetic, machine: str, bench: str, chart: dict) -> int:
    """The points a chart must have, from what the builder wrote: a metric's chart, one point per (case, commit) with
    samples; a phase stack or share chart, one bar per top-level phase and commit of its case."""
    if chart["kind"] == "line":
        return syn.points[(machine, bench, chart["metric"])]
    return len(PHASES) * len(syn.case_commits[(machine, bench, chart["case"])])


@dataclass
class Synthetic:
    """What a test needs to know about a synthetic store."""

    store: HistoryStore
    commits: list[str]
    slow: str  #: the first commit of the +25% slowdown (sps down, time/update up)
    sync: str  #: the first commit with one more sync per iteration (syncs/iteration 2 -> 3)
    failed: str  #: a commit whose benchmark failed on machine A (a gap record, no samples)
    absent_b: str  #: a commit where case impl=b has no samples on machine A
    machines: dict[str, str] = field(default_factory=dict)  #: "A"/"B" -> machine id
    #: (machine id, benchmark, metric) -> number of (case, commit) points with samples
    points: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: every (machine id, benchmark, params JSON, metric) written
    series: set[tuple[str, str, str, str]] = field(default_factory=set)
    #: (machine id, benchmark, params JSON) -> commits where that case has samples
    case_commits: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)


SPEED = {"sps": ("steps/s", "higher"), "eval_return": ("return", "higher"), "wall_s": ("s", "lower")}
PHASES = ("env", "inference", "update")  #: top-level phases (time/update/backward nests under update)


def synthetic_store(root: Path, n: int = 12, seed: int = 0) -> Synthetic:
    """Two machines; on A, ``toy`` in two cases (impl=a, impl=b) over ``n`` commits with a +25% slowdown at commit
    ``n // 2`` (sps, wall_s, time/update), one more sync per iteration at ``n // 2 + 2``, a failed commit at 2 (gap
    record, no samples) and case b absent at 3; on B, ``toy`` impl=a over the last ``n - 4`` commits at a tenth of
    A's speed; plus a benchmark with a hostile name. Commit 1's subject is hostile."""
    rng = random.Random(seed)
    store = HistoryStore(root)
    ma, mb = machine("Synthetic CPU A"), machine("Synthetic CPU B")
    shas = [sha_of(i) for i in range(n)]
    infos = [
        CommitInfo(sha, 1_700_000_000 + 3600 * i, HOSTILE_SUBJECT if i == 1 else f"commit {i}", dirty=(i == n - 1))
        for i, sha in enumerate(shas)
    ]
    slow_i, sync_i, failed_i, absent_i = n // 2, n // 2 + 2, 2, 3
    out = Synthetic(store, shas, shas[slow_i], shas[sync_i], shas[failed_i], shas[absent_i])
    out.machines = {"A": ma["id"], "B": mb["id"]}
    cmd = "rlbench run toy --total-steps 2048 --store .rlbench/x --repeats 3 --json --quiet"
    records: list[Record] = []

    def add(m: dict, info: CommitInfo, bench: str, params: dict, metric: str, unit: str, direction: str, samples) -> None:
        records.append(record(m, info, bench, params, metric, unit, direction, samples, cmd))
        key = (m["id"], bench, metric)
        out.points[key] = out.points.get(key, 0) + (
            1 if info.sha not in seen.setdefault((key, json_key(params)), set()) else 0
        )
        seen[(key, json_key(params))].add(info.sha)
        out.series.add((m["id"], bench, json_key(params), metric))
        out.case_commits.setdefault((m["id"], bench, json_key(params)), set()).add(info.sha)

    seen: dict = {}
    for i, info in enumerate(infos):
        for m, speed, start in ((ma, 1.0, 0), (mb, 0.1, 4)):
            if i < start or (m is ma and i == failed_i):
                continue
            cases = ("a", "b") if m is ma else ("a",)
            for impl in cases:
                if m is ma and impl == "b" and i == absent_i:
                    continue
                slow = 1.25 if i >= slow_i else 1.0
                params = {"impl": impl, "total_steps": 2048}
                noise = lambda: 1 + rng.gauss(0, 0.004)
                base = 1000.0 * speed * (1.0 if impl == "a" else 0.8)
                add(m, info, "toy", params, "sps", "steps/s", "higher", [base / slow * noise() for _ in range(3)])
                add(m, info, "toy", params, "eval_return", "return", "higher", [200 * noise() for _ in range(5)])
                add(m, info, "toy", params, "wall_s", "s", "lower", [2048 / base * slow * noise() for _ in range(3)])
                for k, phase in enumerate(PHASES):
                    f = slow if phase == "update" else 1.0
                    t = (0.5 + 0.3 * k) / speed * f
                    add(m, info, "toy", params, f"time/{phase}", "s", "lower", [t * noise() for _ in range(3)])
                add(
                    m,
                    info,
                    "toy",
                    params,
                    "time/update/backward",
                    "s",
                    "lower",
                    [0.4 / speed * slow * noise() for _ in range(3)],
                )
                add(m, info, "toy", params, "syncs/iteration", "count", "lower", [3.0 if i >= sync_i else 2.0])
                add(m, info, "toy", params, "ops/iteration", "count", "lower", [120.0])
        if i % 3 == 0:
            m = ma
            add(m, info, HOSTILE_BENCH, {"note": HOSTILE_PARAM}, "time/call", "s", "lower", [1e-4 * (1 + 0.01 * rng.random())])
    store.add_records(records)
    store.add_commits(infos)
    store.add_gap(Gap(ma["id"], shas[failed_i], "toy", {"impl": "a", "total_steps": 2048}, "failed", "RuntimeError: boom"))
    store.add_gap(Gap(ma["id"], shas[failed_i], "toy", {"impl": "b", "total_steps": 2048}, "failed", "RuntimeError: boom"))
    return out


def json_key(params: dict) -> str:
    return params_json(params)


def scale_store(root: Path, commits: int = 1000, series: int = 30, seed: int = 1) -> tuple[HistoryStore, str]:
    """One machine, one benchmark (``scale``), ``series`` metrics over ``commits`` commits, 3 samples each, with a
    +20% slowdown at the middle commit (returned)."""
    rng = random.Random(seed)
    store = HistoryStore(root)
    m = machine("Synthetic CPU scale")
    metrics = [
        ("sps", "steps/s", "higher", 1000.0),
        ("eval_return", "return", "higher", 200.0),
        ("wall_s", "s", "lower", 10.0),
    ]
    metrics += [(f"time/phase{k}", "s", "lower", 1.0 + k) for k in range(8)]
    metrics += [(f"ops/phase{k}", "count", "lower", 100.0 + k) for k in range(4)]
    metrics += [(f"iter_time/phase{k}", "s", "lower", 0.01 * (k + 1)) for k in range(max(0, series - len(metrics)))]
    metrics = metrics[:series]
    slow_i = commits // 2
    records = []
    infos = []
    for i in range(commits):
        info = CommitInfo(sha_of(i, "s"), 1_700_000_000 + 600 * i, f"change {i}")
        infos.append(info)
        f = 1.2 if i >= slow_i else 1.0
        for name, unit, direction, base in metrics:
            if unit == "count":
                samples = [base]
            else:
                v = base / f if name == "sps" else base * f if name in ("wall_s", "time/phase0") else base
                samples = [v * (1 + rng.gauss(0, 0.005)) for _ in range(3)]
            records.append(record(m, info, "scale", {"size": 64}, name, unit, direction, samples, "rlbench run scale"))
    store.add_records(records)
    store.add_commits(infos)
    return store, infos[slow_i].sha


N = 7  #: commits in cadence_store (fewer than --last's default of 20)
SETTINGS = {  # every record of cadence_store: no parameter tells its series apart
    "env": "CartPole-v1",
    "total_steps": 2048,
    "hidden": [64, 64],
}
INTERNAL = ("timer/overhead_s", "iterations", "env_steps", "profile/overhead_s", "profile/events")


def cadence_store(root: Path) -> HistoryStore:
    """``every`` measured at all 7 commits; ``sparse`` every third commit (0, 3, 6); ``once`` at commit 6 only.

    every: sps rises 100 -> 160 (higher is better: better), wall_s rises 1.0 -> 1.6 (lower is better: worse),
    note rises (no direction), noisy_s creeps up within overlapping ranges, plus rlbench's own metrics and
    ``profile/call_s`` (the user's call, shown)."""
    store = HistoryStore(root)
    m = machine("Synthetic CPU index")
    infos = [CommitInfo(sha_of(i, "ix"), 1_700_000_000 + 60 * i, f"commit {i}") for i in range(N)]
    cmd = "rlbench run every"
    records = []
    for i, info in enumerate(infos):

        def add(bench: str, metric: str, unit: str, direction: str, value: float, info: CommitInfo = info) -> None:
            records.append(record(m, info, bench, SETTINGS, metric, unit, direction, [value] * 3, cmd))

        add("every", "sps", "steps/s", "higher", 100.0 + 10 * i)
        add("every", "wall_s", "s", "lower", 1.0 + 0.1 * i)
        add("every", "note", "", "none", 5.0 + i)
        add("every", "profile/call_s", "s", "lower", 0.5)
        noisy = [1.0 + 0.01 * i, 1.3, 0.8]  # its median creeps up, its range always overlaps: within the noise
        records.append(record(m, info, "every", SETTINGS, "noisy_s", "s", "lower", noisy, cmd))
        for metric in INTERNAL:
            add("every", metric, "count", "none", 1000.0 + i)
        if i % 3 == 0:
            add("sparse", "sps", "steps/s", "higher", 50.0 - i)  # falls: worse
        if i == N - 1:
            add("once", "sps", "steps/s", "higher", 10.0)
    store.add_records(records)
    store.add_commits(infos)
    return store

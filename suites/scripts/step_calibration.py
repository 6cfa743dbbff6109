"""How often history step detection cries wolf, and how often it finds a real step, on this machine's real noise.

``python -m rlbench.suites.scripts.step_calibration --report reports/history-steps-calibration.md``

1. **Measure** (once): ``--ppo-runs`` separate invocations of ``rlbench run ppo-cartpole --total-steps N --repeats 3``
   and ``--gae-runs`` of ``rlbench run gae --select 'numpy or numba' --repeats 3``, all of ONE commit, alternating,
   each a fresh process as a history run makes one per commit. The raw samples of every timing metric (units of
   time or rate, with a direction) are saved per invocation and repeat to a JSON file (``--save-samples``); pass it
   back with ``--samples FILE`` to rerun the analysis without measuring again.
2. **Synthetic histories**: ``--commits`` commits, each one real invocation drawn at random (with replacement), with
   its ``--repeats`` repeats' raw samples: the noise between commits is the noise between real processes, and the
   samples within a commit keep their real correlation.
3. **False steps**: :func:`rlbench.analysis.steps.detect_steps` on ``--trials`` histories with nothing injected;
   every step found is false. Reported per 100 commits.
4. **Detection**: the same, with a slowdown of 10% (and 5%) injected at a random commit (every sample from it on
   multiplied by 1.10 for a time, divided by 1.10 for a rate): found when a step's first bad commit is within +-1 of
   the injected one and it goes the worse way.

**Loaded conditions** (issue 58): ``--neighbours N`` measures every invocation beside N CPU-bound processes
(``python -c "while True: pass"``), ``--neighbour-from 0.5`` starts them halfway through the invocations. Their series
are kept apart (their condition is part of the key), so one analysis over several samples files calibrates: the
histories of a machine with one (or two) steady neighbours, and a history measured quiet up to its middle and beside
the neighbour after it (``quiet, then a neighbour from halfway``: a load change must not pass for a step). Each
synthetic commit carries its invocation's recorded load, so the detector's load rule (a commit measured at a load
unlike the rest of its series is left out) acts as it does on a real history.

Nothing here is hard-coded: the report is generated from what this run measured (or the cached samples), on the
machine it names.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from rlbench.analysis.compare import RATE_OR_TIME_UNITS
from rlbench.analysis.steps import DEFAULTS, RANK_SEARCH, StepSettings, detect_steps
from rlbench.core.children import run_child
from rlbench.core.errors import Terminated, interrupt_exit_code
from rlbench.instrument.machine_load import LoadProbe
from rlbench.results.fingerprint import cpu_label, git_fingerprint, machine_fingerprint
from rlbench.results.history import Series, params_json
from rlbench.results.metrics import MACHINE_OTHER_CPU
from rlbench.results.store import read_records

ROOT = Path(__file__).resolve().parents[2]
GAE_SELECT = "numpy or numba"
HEADLINE = (("ppo-cartpole", {}, "sps"), ("gae", {"impl": "numpy", "size": "128x8"}, "time/call"))
"""The series the targets are judged on: ppo-cartpole's SPS and the gae micro group's NumPy GAE at T=128, N=8."""
QUIET = 0.1
"""An invocation is quiet when other processes used at most this share of the CPU (median over its repeats): the
gate's ``BUSY_DIFFERENCE``, a load that can by itself move a timing."""


def _run(cmd: list[str], timeout: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = run_child(cmd, timeout=timeout, env=env, cwd=str(ROOT))
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"measurement failed: {' '.join(cmd)} exited {done.returncode}: {tail[0]}")


def wait_quiet(threshold: float, max_wait_s: float, window_s: float = 3.0) -> float | None:
    """Wait until other processes use at most ``threshold`` of the CPU capacity over a ``window_s`` window, for at most
    ``max_wait_s``; the last window's share (``None`` where unreadable)."""
    deadline = time.monotonic() + max_wait_s
    while True:
        probe = LoadProbe()
        time.sleep(window_s)
        other = probe.stop().other_cpu
        if other is None or other <= threshold or time.monotonic() >= deadline:
            return other


def condition_of(neighbours: int, start: float) -> str:
    """The label of a measurement's load condition ('' when quiet): part of its series' keys and the report's rows."""
    if neighbours <= 0:
        return ""
    words = f"{neighbours} neighbour{'s' if neighbours > 1 else ''}"
    return words + (f" from {start:.0%} of the invocations" if start > 0 else "")


class Neighbours:
    """``n`` CPU-bound processes beside the measurement (``python -c "while True: pass"``), ended with this process."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def start(self) -> None:
        import subprocess

        from rlbench.core.children import die_with_parent

        if not self.procs:
            self.procs = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent) for _ in range(self.n)
            ]

    def stop(self) -> None:
        from rlbench.core.children import end_child

        for proc in self.procs:
            end_child(proc, grace_s=2.0)
        self.procs = []


def measure(args: argparse.Namespace, out: Path, command: str) -> dict[str, Any]:
    """Run the invocations (alternating ppo-cartpole and gae) and collect their timing samples per invocation, with
    the machine's load during each (median over its repeats of ``machine/other_cpu``).

    The samples are saved to ``out`` after every invocation (replaced whole), so an interrupted measurement keeps what
    it finished: ``--samples OUT`` analyses it.
    """
    series: dict[str, dict[str, Any]] = {}
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    commands = {
        "ppo": [
            *(sys.executable, "-m", "rlbench", "run", "ppo-cartpole"),
            *("--total-steps", str(args.ppo_steps), "--repeats", str(args.repeats)),
        ],
        "gae": [
            *(sys.executable, "-m", "rlbench", "run", "gae"),
            *("--select", GAE_SELECT, "--repeats", str(args.repeats)),
        ],
    }
    plan = []
    for i in range(max(args.ppo_runs, args.gae_runs)):
        plan += ["ppo"] if i < args.ppo_runs else []
        plan += ["gae"] if i < args.gae_runs else []
    done = {"ppo": 0, "gae": 0}
    data: dict[str, Any] = {
        "meta": {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "command": command,
            "machine": machine_fingerprint(),
            "git": git_fingerprint(),
            "ppo_runs": 0,
            "gae_runs": 0,
            "ppo_steps": args.ppo_steps,
            "repeats": args.repeats,
            "gae_select": GAE_SELECT,
            "wait_quiet": args.wait_quiet,
            "max_wait": args.max_wait,
            "neighbours": args.neighbours,
            "neighbour_from": args.neighbour_from,
            "cpu_s": 0.0,
            "wall_s": 0.0,
        },
        "series": series,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="rlbench-stepcal-"))
    condition = condition_of(args.neighbours, args.neighbour_from)
    hogs = Neighbours(args.neighbours)
    first_loaded = round(args.neighbour_from * len(plan))
    try:
        for n, kind in enumerate(plan):
            if args.wait_quiet is not None:
                wait_quiet(args.wait_quiet, args.max_wait)
            if args.neighbours and n == first_loaded:
                hogs.start()
            store = tmp / f"{kind}-{n}"
            cmd = [*commands[kind], "--store", str(store), "--report", str(tmp / "report.md"), "--quiet"]
            print(f"[{n + 1}/{len(plan)}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            _run(cmd, timeout=900)
            per: dict[str, list[list[float]]] = {}
            loads: list[float] = []
            for r in read_records(store):
                if r.metric == MACHINE_OTHER_CPU:
                    loads += [v for v in r.samples if math.isfinite(v)]
                if r.unit not in RATE_OR_TIME_UNITS or r.direction == "none":
                    continue
                key = f"{r.benchmark}|{params_json(r.params)}|{r.metric}" + (f"|{condition}" if condition else "")
                if key not in series:
                    series[key] = {
                        "benchmark": r.benchmark,
                        "params": r.params,
                        "metric": r.metric,
                        "unit": r.unit,
                        "direction": r.direction,
                        "invocations": [],
                        "loads": [],
                        **({"condition": condition} if condition else {}),
                    }
                per.setdefault(key, []).append([v for v in r.samples if math.isfinite(v)])
            load = float(np.median(loads)) if loads else None
            for key, reps in per.items():
                series[key]["invocations"].append(reps)
                series[key]["loads"].append(load)
            shutil.rmtree(store, ignore_errors=True)
            done[kind] += 1
            cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            data["meta"].update(
                ppo_runs=done["ppo"],
                gae_runs=done["gae"],
                cpu_s=(cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
                wall_s=time.perf_counter() - t0,
            )
            tmp_out = out.with_name(out.name + ".tmp")
            tmp_out.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp_out, out)
    finally:
        hogs.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return data


def _pooled(invocation: list[list[float]]) -> list[float]:
    return [v for rep in invocation for v in rep]


def noise_of(invocations: list[list[list[float]]]) -> tuple[float, float]:
    """Between-invocation standard deviation of the log median, and the median within-invocation standard error of
    the log median (from its own samples): what the history sees against what one process's samples suggest."""
    levels = [math.log(float(np.median(_pooled(inv)))) for inv in invocations]
    between = float(np.std(levels, ddof=1)) if len(levels) >= 2 else math.nan
    ses = []
    for inv in invocations:
        logs = np.log(np.asarray(_pooled(inv), dtype=float))
        if logs.size >= 2:
            ses.append(1.2533 * float(np.std(logs, ddof=1)) / math.sqrt(logs.size))
    return between, float(np.median(ses)) if ses else math.nan


LAYOUTS = ("one process", "separate processes")
"""How a synthetic commit's repeats are drawn: one invocation with all its repeats (a history that runs ``rlbench run
--repeats 3`` once per commit), or each repeat from its own invocation (a history that runs each repeat in its own
process)."""


def _commit_samples(
    invs: list[list[list[float]]], layout: str, rng: np.random.Generator, loads: list[float | None] | None = None
) -> tuple[list[float], float | None]:
    """One synthetic commit's samples, and the load its invocation(s) recorded (the median of them)."""
    if layout == LAYOUTS[0]:
        i = int(rng.integers(0, len(invs)))
        return _pooled(invs[i]), (loads[i] if loads else None)
    out: list[float] = []
    seen: list[float] = []
    for _ in range(len(invs[0])):
        i = int(rng.integers(0, len(invs)))
        inv = invs[i]
        out += inv[int(rng.integers(0, len(inv)))]
        if loads and loads[i] is not None:
            seen.append(loads[i])  # type: ignore[arg-type]
    return out, (float(np.median(seen)) if seen else None)


def calibrate_series(
    entry: dict[str, Any],
    invs: list[list[list[float]]],
    commits: int,
    trials: int,
    seed: int,
    settings: StepSettings,
    layout: str = LAYOUTS[0],
    loads: list[float | None] | None = None,
    later: tuple[list[list[list[float]]], list[float | None]] | None = None,
) -> dict[str, Any]:
    """False steps with nothing injected, and detection of +5% and +10% slowdowns, on synthetic histories drawn from
    the invocations ``invs`` (see :data:`LAYOUTS`), each commit with its invocation's load (``loads``). With ``later``
    (invocations and loads of a loaded condition), the second half of every history's commits is drawn from those: a
    neighbour that started halfway through the history."""
    key = f"{entry['benchmark']}|{params_json(entry['params'])}|{entry['metric']}|{layout}|{bool(later)}"
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    between, within = noise_of(invs)
    out: dict[str, Any] = {"entry": entry, "n_invocations": len(invs), "sigma_between": between, "se_within": within}
    names = [f"{i:040x}" for i in range(commits)]
    for label, size in (("none", 0.0), ("+5%", 0.05), ("+10%", 0.10)):
        false = with_false = found = 0
        for _ in range(trials):
            drawn = [
                _commit_samples(later[0], layout, rng, later[1])
                if later is not None and i >= commits // 2
                else _commit_samples(invs, layout, rng, loads)
                for i in range(commits)
            ]
            samples = [d[0] for d in drawn]
            at = int(rng.integers(1, commits)) if size else -1
            if size:  # slower from commit `at` on: a time grows, a rate shrinks
                factor = (1 + size) if entry["direction"] == "lower" else 1 / (1 + size)
                samples = [[v * factor for v in s] if i >= at else s for i, s in enumerate(samples)]
            series = Series(
                "calibration",
                entry["benchmark"],
                entry["params"],
                entry["metric"],
                entry["unit"],
                entry["direction"],
                False,
                names,
                samples,
                {},
                [d[1] for d in drawn],
            )
            steps = detect_steps(series, settings)
            hit = [st for st in steps if size and abs(st.index - at) <= 1 and st.worse]
            found += bool(hit)
            wrong = len(steps) - (1 if hit else 0)
            false += wrong
            with_false += wrong > 0
        out[label] = {
            "trials": trials,
            "found": found,
            "false_steps": false,
            "false_per_100": 100 * false / (trials * commits),
            "histories_with_false": with_false,
        }
    return out


CONDITIONS = {
    "quiet": ("quiet", LAYOUTS[0]),
    "quiet, separate processes": ("quiet", LAYOUTS[1]),
    "all": ("all", LAYOUTS[0]),
}
"""Conditions calibrated: which invocations (quiet ones, or all), and how a commit's repeats are drawn."""


class Progress:
    """Finished calibrations of one analysis, appended to a JSONL file as each finishes: an interrupted analysis run
    again with the same samples and settings picks up where it stopped (the file goes once the report is written)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    item = json.loads(line)
                    self.done[item["id"]] = item["result"]
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line

    def run(
        self,
        entry: dict[str, Any],
        invs: list[list[list[float]]],
        commits: int,
        trials: int,
        seed: int,
        settings: StepSettings,
        layout: str,
        loads: list[float | None] | None = None,
        later: tuple[list[list[list[float]]], list[float | None]] | None = None,
    ) -> dict[str, Any]:
        key = f"{entry['benchmark']}|{params_json(entry['params'])}|{entry['metric']}|{entry.get('condition', '')}"
        shape = [len(invs), len(later[0]) if later else 0, bool(loads)]
        ident = json.dumps([key, shape, commits, trials, seed, dataclasses.asdict(settings), layout])
        if ident in self.done:
            return {**self.done[ident], "entry": entry}
        r = calibrate_series(entry, invs, commits, trials, seed, settings, layout, loads, later)
        self.done[ident] = {k: v for k, v in r.items() if k != "entry"}
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"id": ident, "result": self.done[ident]}) + "\n")
        return r


def _is_headline(entry: dict[str, Any]) -> bool:
    return any(
        entry["benchmark"] == b and entry["metric"] == m and all(entry["params"].get(k) == v for k, v in ps.items())
        for b, ps, m in HEADLINE
    )


def calibrate(
    data: dict[str, Any],
    commits: int,
    trials: int,
    seed: int,
    settings: StepSettings = DEFAULTS,
    only: str | None = None,
    progress: Progress | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """:func:`calibrate_series` for every measured series, on all its invocations (``all``) and on the quiet ones
    (``quiet``: load at most :data:`QUIET`), each where there are at least 4; ``only``: a substring filter on the key."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CONDITIONS}

    def usable(entry: dict[str, Any], quiet_only: bool = False) -> tuple[list, list]:
        loads = entry.get("loads") or [None] * len(entry["invocations"])
        pairs = [
            (inv, load)
            for inv, load in zip(entry["invocations"], loads)
            if inv and all(rep for rep in inv) and (not quiet_only or (load is not None and load <= QUIET))
        ]
        return [inv for inv, _ in pairs], [load for _, load in pairs]

    for key in sorted(data["series"]):
        entry = data["series"][key]
        if only and only not in key:
            continue
        loaded = entry.get("condition")
        for name, (subset, layout) in CONDITIONS.items():
            if loaded and subset == "quiet":
                continue  # a loaded measurement's invocations are its condition, not quiet ones
            chosen, loads = usable(entry, quiet_only=subset == "quiet")
            if len(chosen) < 4 or (layout != LAYOUTS[0] and not all(len(inv) == len(chosen[0]) for inv in chosen)):
                continue
            label = loaded if loaded and subset == "all" else name
            r = (progress or Progress(None)).run(entry, chosen, commits, trials, seed, settings, layout, loads)
            results.setdefault(label, []).append(r)
            print(
                f"{label}: {_label(entry)}: {len(chosen)} invocations, sigma {_pct(r['sigma_between'])}, false/100 "
                f"{r['none']['false_per_100']:.2f}, +10% {r['+10%']['found']}/{trials}, +5% {r['+5%']['found']}/{trials}",
                file=sys.stderr,
                flush=True,
            )
        if loaded and " from " not in loaded:  # a steady load: also a history quiet up to its middle, loaded after it
            twin = data["series"].get(key[: -len(loaded) - 1])
            if twin is None:
                continue
            first, first_loads = usable(twin, quiet_only=True)
            second, second_loads = usable(entry)
            if len(first) < 4 or len(second) < 4:
                continue
            name = f"quiet, then {loaded} from halfway"
            r = (progress or Progress(None)).run(
                twin, first, commits, trials, seed, settings, LAYOUTS[0], first_loads, (second, second_loads)
            )
            results.setdefault(name, []).append(r)
            print(
                f"{name}: {_label(entry)}: {len(chosen)} invocations, sigma {_pct(r['sigma_between'])}, false/100 "
                f"{r['none']['false_per_100']:.2f}, +10% {r['+10%']['found']}/{trials}, +5% {r['+5%']['found']}/{trials}",
                file=sys.stderr,
                flush=True,
            )
    return results


SWEEP = {"penalty": (2.0, 3.0, 4.0, 6.0), "min_run": (1, 2, 3)}


def sweep_settings(
    data: dict[str, Any], commits: int, trials: int, seed: int, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """The headline series on quiet invocations, one process per commit, under each setting of :data:`SWEEP`."""
    rows = []
    for penalty in SWEEP["penalty"]:
        for min_run in SWEEP["min_run"]:
            settings = StepSettings(penalty=penalty, min_effect=DEFAULTS.min_effect, min_run=min_run)
            for entry in data["series"].values():
                if not _is_headline(entry):
                    continue
                loads = entry.get("loads") or [None] * len(entry["invocations"])
                invs = [
                    inv
                    for inv, load in zip(entry["invocations"], loads)
                    if inv and all(inv) and load is not None and load <= QUIET
                ]
                if len(invs) < 4:
                    continue
                r = (progress or Progress(None)).run(entry, invs, commits, trials, seed, settings, LAYOUTS[0])
                rows.append({"penalty": penalty, "min_run": min_run, **r})
                print(
                    f"sweep penalty {penalty} min_run {min_run} {_label(entry)}: false/100 "
                    f"{r['none']['false_per_100']:.2f}, +10% {r['+10%']['found']}/{trials}, +5% {r['+5%']['found']}/{trials}",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%" if math.isfinite(v) else "n/a"


def _label(entry: dict[str, Any]) -> str:
    params = entry["params"]
    shown = ", ".join(str(params[k]) for k in ("impl", "size") if k in params and isinstance(params[k], str))
    if "total_steps" in params:
        shown = f"{params['total_steps']:,} steps"
    return f"{entry['benchmark']}{f' {shown}' if shown else ''} `{entry['metric']}`"


def _table(results: list[dict[str, Any]], trials: int) -> list[str]:
    lines = [
        "| Series | Invocations | Sigma between | SE within | False steps / 100 commits | Histories with a false step "
        "| +10% found | +5% found | False steps / 100 commits beside a +10% step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["entry"]["benchmark"], r["sigma_between"])):
        lines.append(
            f"| {_label(r['entry'])} | {r['n_invocations']} | {_pct(r['sigma_between'])} | {_pct(r['se_within'])} | "
            f"{r['none']['false_per_100']:.2f} | {r['none']['histories_with_false']}/{trials} | "
            f"{_pct(r['+10%']['found'] / trials)} | {_pct(r['+5%']['found'] / trials)} | "
            f"{r['+10%']['false_per_100']:.2f} |"
        )
    return lines


def _summary(results: list[dict[str, Any]], trials: int) -> str:
    ok_false = sum(r["none"]["false_per_100"] <= 1.0 for r in results)
    ok_10 = sum(r["+10%"]["found"] / trials >= 0.95 for r in results)
    worst = max((r["none"]["false_per_100"] for r in results), default=math.nan)
    return (
        f"{ok_false} of {len(results)} series have at most 1 false step per 100 commits (worst {worst:.2f}); "
        f"{ok_10} of {len(results)} find a +10% step within +-1 commit in 95% of histories or more."
    )


def _loads(data: dict[str, Any]) -> list[float]:
    """The load of every invocation (each writes one ``startup_s`` record)."""
    return [x for e in data["series"].values() if e["metric"] == "startup_s" for x in e.get("loads", []) if x is not None]


def _without_samples(value: Any) -> Any:
    """The results without the raw samples they were computed from (those stay in the samples files)."""
    if isinstance(value, dict):
        return {k: _without_samples(v) for k, v in value.items() if k not in ("invocations", "loads") or "metas" in value}
    if isinstance(value, list):
        return [_without_samples(v) for v in value]
    return value


def render(
    data: dict[str, Any],
    results: dict[str, list[dict[str, Any]]],
    args: argparse.Namespace,
    settings: StepSettings,
    sweep: list[dict[str, Any]] | None = None,
) -> str:
    """The markdown report: what was measured, the method's settings, false steps and detection per series."""
    metas = data["metas"]
    meta = metas[0]
    machine, git = meta.get("machine", {}), meta.get("git", {})
    trials, commits, repeats = args.trials, args.commits, meta.get("repeats", 3)
    loads = data["loads"]
    n_quiet = sum(x <= QUIET for x in loads)
    files = " ".join(f"SAMPLES{i + 1}.json" for i in range(len(metas))) if len(metas) > 1 else "SAMPLES.json"
    analysis = (
        f"python -m rlbench.suites.scripts.step_calibration --samples {files} "
        f"--commits {commits} --trials {trials} --seed {args.seed}"
        + "".join(
            f" --{name.replace('_', '-')} {getattr(settings, name)}"
            for name in ("penalty", "min_effect", "min_run")
            if getattr(settings, name) != getattr(DEFAULTS, name)
        )
    )
    others = {m.get("machine", {}).get("id") for m in metas} - {machine.get("id")}
    lines = [
        "# History step detection: calibration on real noise",
        "",
        f"Generated by `python -m rlbench.suites.scripts.step_calibration` on {cpu_label(machine)}, "
        f"{machine.get('cores', '?')} cores (machine id `{machine.get('id', '?')}`), measured {meta.get('date', '?')} at "
        f"commit `{str(git.get('commit'))[:12]}`{' (dirty tree)' if git.get('dirty') else ''}"
        + (f" (and on machines {', '.join(map(str, others))})." if others else "."),
        "",
    ]
    for i, m in enumerate(metas):
        kinds = []
        if m.get("ppo_runs"):
            kinds.append(
                f"{m['ppo_runs']} invocations of `rlbench run ppo-cartpole --total-steps {m.get('ppo_steps')} "
                f"--repeats {m.get('repeats')}`"
            )
        if m.get("gae_runs"):
            kinds.append(f"{m['gae_runs']} of `rlbench run gae --select '{m.get('gae_select')}' --repeats {m.get('repeats')}`")
        lines.append(
            f"- Measurement{f' {i + 1}' if len(metas) > 1 else ''}: `{_public(m.get('command', '?'))}`: "
            + " and ".join(kinds)
            + (", alternating" if len(kinds) > 1 else "")
            + f", each a fresh process, all of one commit (`{str(m.get('git', {}).get('commit'))[:12]}`); "
            f"{m.get('cpu_s', math.nan) / 60:.1f} min of CPU over {m.get('wall_s', math.nan) / 60:.1f} min of wall time, "
            "under `nice -n 10`"
            + (
                ", each invocation started after waiting"
                + (f" (up to {m['max_wait']:.0f} s)" if m.get("max_wait") is not None else " (up to --max-wait)")
                + f" for other processes to use at most {m['wait_quiet']:.0%} of the CPU."
                if m.get("wait_quiet") is not None
                else "."
            )
        )
    lines += [
        f"- Analysis: `{analysis}{' --sweep' if sweep else ''}`.",
        f"- Machine state: this machine is shared. {n_quiet} of {len(loads)} invocations were quiet (other processes "
        f"used at most {QUIET:.0%} of the CPU, median over the invocation's repeats of `machine/other_cpu`); "
        + (
            f"the median invocation saw {_pct(float(np.median(loads)))} (range {_pct(min(loads))}–{_pct(max(loads))})."
            if loads
            else "no load was recorded."
        ),
        "",
        "## Method and settings",
        "",
        "`rlbench.analysis.steps.detect_steps` (details in `docs/history-steps.md`): each commit's level is the log of "
        "the median of its raw samples (repeats pooled); the noise sigma is the between-commit standard deviation of "
        "that level, from the differences of consecutive commits without the largest 2% of them (room for steps); "
        "candidates come from binary segmentation (`ruptures.Binseg`, least squares) on the levels' normal scores "
        f"(ranks; from {RANK_SEARCH} commits on, and in units of sigma for a level held by fewer than {settings.min_run} "
        f"commits at either end, or in a shorter history) with a penalty of `{settings.penalty} * log(n)` per change; "
        "each candidate is confirmed between its "
        f"neighbouring candidates by the {settings.confidence:.0%} t interval, from sigma, of the ratio of the segments' "
        "levels (20%-trimmed means of their commits' log levels): kept when it excludes 1, the change is at least "
        f"{settings.min_effect:.0%}, and the new level holds for {settings.min_run} commits or more (except at either "
        "end of the series); of the candidates that fail, the weakest is dropped and the rest tested again.",
        "",
        f"Synthetic histories: {commits} commits x {repeats} repeats, each commit one real invocation drawn at random "
        f"(with replacement) with its repeats' raw samples; {trials} histories per condition. A slowdown is injected at a "
        "random commit (samples from it on multiplied by 1+x for a time, divided by it for a rate); it is found when a "
        "step that goes the worse way has its first bad commit within +-1 of it. Every other step is false. Each series "
        "is calibrated three ways: on its quiet invocations with a commit's repeats in one process (what a history "
        "run once per commit on a quiet machine sees: the targets), on the same invocations with each repeat of a "
        "commit drawn from a different one (a random repeat of it: repeats in separate processes, each with that "
        "repeat's share of warm-up), and on all invocations, busy ones "
        "included (what this shared machine gave).",
        "",
        "## Targets",
        "",
        "| Series | Condition | Invocations | False steps per 100 commits (target <= 1) | +10% found within +-1 "
        "(target >= 95%) | +5% found within +-1 | Targets |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in results:
        for r in results[name]:
            if _is_headline(r["entry"]):
                misses = []
                if r["none"]["false_per_100"] > 1.0:
                    misses.append("too many false steps")
                if r["+10%"]["found"] / trials < 0.95:
                    misses.append("+10% found too rarely")
                lines.append(
                    f"| {_label(r['entry'])} | {name} | {r['n_invocations']} | **{r['none']['false_per_100']:.2f}** | "
                    f"**{_pct(r['+10%']['found'] / trials)}** | {_pct(r['+5%']['found'] / trials)} | "
                    f"{'met' if not misses else 'missed: ' + ', '.join(misses)} |"
                )
    titles = {
        "quiet": "quiet invocations, a commit's repeats in one process",
        "quiet, separate processes": "quiet invocations, each repeat of a commit from its own process",
        "all": "all invocations (busy ones included), a commit's repeats in one process",
    }
    for name in results:
        titles.setdefault(name, f"{name}, a commit's repeats in one process")
    for name, title in titles.items():
        if not results.get(name):
            continue
        lines += [
            "",
            f"## Every timing series: {title}",
            "",
            _summary(results[name], trials) + " Sigma between is the spread of a commit's log median from one process "
            "to the next (about the relative spread); SE within is what the samples of one process suggest for it.",
            "",
            *_table(results[name], trials),
        ]
    if sweep:
        lines += [
            "",
            "## Settings tried",
            "",
            "The headline series on quiet invocations, one process per commit, under other settings (the same seed "
            "for the synthetic histories).",
            "",
            "| penalty | min_run | Series | False steps / 100 commits | +10% found | +5% found |",
            "|---|---|---|---|---|---|",
        ]
        for r in sweep:
            lines.append(
                f"| {r['penalty']} | {r['min_run']} | {_label(r['entry'])} | {r['none']['false_per_100']:.2f} | "
                f"{_pct(r['+10%']['found'] / trials)} | {_pct(r['+5%']['found'] / trials)} |"
            )
    return "\n".join(lines) + "\n"


def _public(command: str) -> str:
    """A command line with file paths reduced to their names (a report never names this machine's directories)."""
    return " ".join(Path(w).name if "/" in w else w for w in command.split())


def main(argv: list[str] | None = None) -> int:
    """Measure (or read cached samples), calibrate, write the report."""
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.step_calibration", description=__doc__.split("\n")[0])
    p.add_argument("--ppo-runs", type=int, default=40, help="ppo-cartpole invocations to measure (default: 40)")
    p.add_argument("--gae-runs", type=int, default=20, help="gae invocations to measure (default: 20)")
    p.add_argument("--ppo-steps", type=int, default=16384, help="ppo-cartpole --total-steps (default: 16384)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per invocation = per commit (default: 3)")
    p.add_argument(
        "--wait-quiet",
        type=float,
        metavar="SHARE",
        help="before each invocation, wait until other processes use at most SHARE of the CPU (e.g. 0.1), for at most "
        "--max-wait seconds; the load of each invocation is recorded either way",
    )
    p.add_argument("--max-wait", type=float, default=300.0, help="seconds to wait for quiet (default: 300)")
    p.add_argument(
        "--neighbours",
        type=int,
        default=0,
        metavar="N",
        help="measure beside N CPU-bound processes (python -c 'while True: pass'); their series are kept apart as a "
        "loaded condition (default: 0, none)",
    )
    p.add_argument(
        "--neighbour-from",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="start the --neighbours this far through the invocations (0.5: halfway; default: 0, from the start)",
    )
    p.add_argument(
        "--render",
        metavar="JSON",
        help="compute nothing: write the report again from the results an earlier run saved beside it",
    )
    p.add_argument(
        "--samples", metavar="FILE", nargs="+", help="measure nothing: read the samples earlier runs saved (merged)"
    )
    p.add_argument("--save-samples", metavar="FILE", help="where to save the measured samples (default: beside --report)")
    p.add_argument("--measure-only", action="store_true", help="measure and save the samples, then stop")
    p.add_argument("--commits", type=int, default=100, help="commits per synthetic history (default: 100)")
    p.add_argument("--trials", type=int, default=200, help="synthetic histories per condition (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic histories (default: 0)")
    p.add_argument("--report", default="reports/history-steps-calibration.md", help="markdown report to write")
    p.add_argument(
        "--penalty", type=float, default=DEFAULTS.penalty, help=f"StepSettings.penalty (default: {DEFAULTS.penalty})"
    )
    p.add_argument(
        "--min-effect",
        type=float,
        default=DEFAULTS.min_effect,
        help=f"StepSettings.min_effect (default: {DEFAULTS.min_effect})",
    )
    p.add_argument("--min-run", type=int, default=DEFAULTS.min_run, help=f"StepSettings.min_run (default: {DEFAULTS.min_run})")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="also calibrate the headline series under a grid of --penalty and --min-run values (quiet invocations, "
        "one process per commit) and report it",
    )
    p.add_argument("--only", metavar="TEXT", help="calibrate only the series whose key contains TEXT")
    args = p.parse_args(argv)
    if min(args.ppo_runs, args.gae_runs) < 0 or min(args.ppo_steps, args.repeats, args.trials) < 1 or args.commits < 4:
        p.error("--ppo-runs and --gae-runs must be >= 0, --ppo-steps, --repeats and --trials >= 1, --commits >= 4")
    if args.neighbours < 0 or not 0.0 <= args.neighbour_from < 1.0:
        p.error("--neighbours must be >= 0 and --neighbour-from a share in [0, 1)")
    if args.neighbours and args.wait_quiet is not None:
        p.error("--wait-quiet waits for a quiet machine, which --neighbours makes busy: give one of them")
    report = Path(args.report)
    if args.render:
        try:
            saved = json.loads(Path(args.render).read_text(encoding="utf-8"))
            args.trials, args.commits, args.seed = saved["args"]["trials"], saved["args"]["commits"], saved["args"]["seed"]
            settings = StepSettings(**saved["settings"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"cannot read results file {args.render!r}: {exc}", file=sys.stderr)
            return 2
        report.write_text(render(saved, saved["results"], args, settings, saved["sweep"]), encoding="utf-8")
        print(f"report: {report}")
        return 0
    if args.samples:
        data = {"metas": [], "series": {}}
        for name in args.samples:
            try:
                one = json.loads(Path(name).read_text(encoding="utf-8"))
                data["metas"].append(one["meta"])
                data["series"].update(one["series"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                print(f"cannot read samples file {name!r}: {exc}", file=sys.stderr)
                return 2
    else:
        out = Path(args.save_samples) if args.save_samples else report.with_suffix(".samples.json")
        command = "python -m rlbench.suites.scripts.step_calibration " + " ".join(argv if argv is not None else sys.argv[1:])
        one = measure(args, out, command)
        data = {"metas": [one["meta"]], "series": one["series"]}
        print(f"samples: {out}", file=sys.stderr)
    if args.measure_only:
        return 0
    settings = StepSettings(penalty=args.penalty, min_effect=args.min_effect, min_run=args.min_run)
    report.parent.mkdir(parents=True, exist_ok=True)
    progress = Progress(report.with_suffix(".progress.jsonl"))
    sweep = sweep_settings(data, args.commits, args.trials, args.seed, progress) if args.sweep else []
    results = calibrate(data, args.commits, args.trials, args.seed, settings, args.only, progress)
    report.parent.mkdir(parents=True, exist_ok=True)
    saved = {
        "metas": [{**m, "command": _public(m.get("command", "?"))} for m in data["metas"]],
        "loads": _loads(data),
        "args": {"trials": args.trials, "commits": args.commits, "seed": args.seed},
        "settings": dataclasses.asdict(settings),
        "results": results,
        "sweep": sweep,
    }
    # compact: reports/ keeps to its size budget (tests/test_house.py)
    report.with_suffix(".json").write_text(json.dumps(_without_samples(saved), separators=(",", ":")), encoding="utf-8")
    report.write_text(render(saved, results, args, settings, sweep), encoding="utf-8")
    if progress.path is not None:
        progress.path.unlink(missing_ok=True)
    print(f"report: {report}")
    return 0


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)  # the temporary stores are removed and the child ended, as on Ctrl-C
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print("interrupted (a measurement keeps the samples of the invocations it finished)", file=sys.stderr)
        sys.exit(interrupt_exit_code(exc))

"""Bisect and history confirm beside a busy neighbour, measured end to end on throwaway repositories (issue 58).

``python -m rlbench.suites.scripts.loaded_calibration bisect [--trials 10] [--commits 16] [--neighbours 1]``
    Each trial builds a repository of ``--commits`` commits of a CPU-bound user benchmark (``spin``, a pure-Python
    loop of about ``--work-ms`` per call), one of them (drawn at random) ``--step`` slower, and runs ``rlbench bisect
    FIRST HEAD --fail wall_s:X% --repeats C -- run spin`` (X = ``--threshold``, C = ``--calls``) beside
    ``--neighbours`` CPU-bound processes (``python -c "while True: pass"``) for the whole bisect. Reported: how often
    it names the slow commit exactly, the rounds and seconds it used, and every trial's answer. Target (issue 58):
    with one steady neighbour, a +10% step in a 16-commit repository pinned in at least 9 of 10 trials.

``python -m rlbench.suites.scripts.loaded_calibration history [--commits 50] [--neighbours 1] [--step 0.10]``
    Two histories of ``--commits`` commits beside the neighbour(s): identical code at every commit (A/A), and the same
    with one commit ``--step`` slower. Each is measured with ``rlbench history run`` and its candidates measured again
    with ``rlbench history confirm --repeats C``. Reported: the candidates found, confirmed, dismissed and undecided,
    and whether the injected step was confirmed at its commit. Target: 0 confirmed regressions on the A/A history;
    the injected step confirmed at its commit.

Every number in the report comes from the commands' own ``--json`` output; the JSON of every trial is saved beside the
report (``--out``, default ``reports/loaded-calibration-<mode>.md``). Nothing else runs meanwhile: run it on an
otherwise quiet machine, the neighbours being the load under test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlbench.core.children import die_with_parent, end_child
from rlbench.core.errors import Terminated, interrupt_exit_code
from rlbench.results.fingerprint import cpu_label, machine_fingerprint

SPIN = '''"""spin: CPU-bound work, a pure-Python loop."""

import rlbench

N = N_VALUE


@rlbench.benchmark
def spin() -> None:
    """spin: pure-Python arithmetic"""
    total = 0
    for i in range(N):
        total += i * i
'''
LOOP_NS = 65.0
"""Nanoseconds per loop iteration of ``spin`` on the reference machine (2-vCPU AMD EPYC): ``--work-ms`` to a loop length."""
GIT = ["git", "-c", "user.email=a@b", "-c", "user.name=a", "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run([*GIT, *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout.strip()


def build(repo: Path, commits: int, slow_at: int | None, step: float, work_ms: float) -> list[str]:
    """``commits`` commits of ``spin`` (the one at index ``slow_at`` and after: ``1 + step`` times the work)."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text(".rlbench/\n__pycache__/\n", encoding="utf-8")
    (repo / "suites").mkdir()
    n = int(work_ms * 1e6 / LOOP_NS)
    shas = []
    for i in range(commits):
        slow = slow_at is not None and i >= slow_at
        (repo / "suites" / "spin_bench.py").write_text(SPIN.replace("N_VALUE", str(int(n * (1 + step)) if slow else n)))
        (repo / "README.md").write_text(f"commit {i}\n", encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"commit {i}{' (slower)' if slow_at == i else ''}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


class Neighbours:
    """``n`` CPU-bound processes, ended with this one."""

    def __init__(self, n: int) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with_parent) for _ in range(n)
        ]

    def __enter__(self) -> Neighbours:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            end_child(proc, grace_s=2.0)


def rlbench(args: list[str], cwd: Path, timeout: float) -> tuple[int, dict[str, Any] | None, str]:
    """``python -m rlbench ARGS --json`` in ``cwd``: exit code, its JSON (``None`` when it printed none), stderr's tail."""
    done = subprocess.run(
        [sys.executable, "-m", "rlbench", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    try:
        out = json.loads(done.stdout)
    except ValueError:
        out = None
    return done.returncode, out, (done.stderr.strip().splitlines() or [""])[-1]


def bisect_trials(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rng = random.Random(args.seed)
    trials = []
    for t in range(args.trials):
        slow_at = rng.randrange(2, args.commits)  # GOOD is commit 0; BAD the last
        repo = work / f"bisect-{t}"
        shas = build(repo, args.commits, slow_at, args.step, args.work_ms)
        command = ["bisect", shas[0], "HEAD", "--fail", f"wall_s:{args.threshold:g}%", "--max-rounds", str(args.max_rounds)]
        command += ["--repeats", str(args.calls)]
        t0 = time.perf_counter()
        with Neighbours(args.neighbours):
            code, out, last = rlbench([*command, "--json", "--", "run", "spin"], repo, timeout=args.timeout)
        wall = time.perf_counter() - t0
        found = out.get("first_bad") if out else None
        trial = {
            "trial": t,
            "slow_at": slow_at,
            "exit_code": code,
            "exact": found == shas[slow_at],
            "first_bad_index": shas.index(found) if found in shas else None,
            "rounds_run": out.get("rounds_run") if out else None,
            "tested": len(out.get("tested", [])) if out else None,
            "seconds": out.get("seconds") if out else None,
            "wall_s": wall,
            "message": out.get("message") if out else last,
            "skipped": [x["settle"] for x in out.get("tested", []) if x["verdict"] == "SKIP"] if out else [],
        }
        trials.append(trial)
        print(
            f"trial {t + 1}/{args.trials}: slow at {slow_at}, named {trial['first_bad_index']} "
            f"({'exact' if trial['exact'] else 'MISSED'}), {trial['rounds_run']} rounds, {wall:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        shutil.rmtree(repo, ignore_errors=True)
    return trials


def history_trials(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    rng = random.Random(args.seed)
    out = []
    for label, slow_at in (("A/A", None), (f"+{args.step:.0%} step", rng.randrange(args.commits // 4, args.commits - 2))):
        repo = work / ("aa" if slow_at is None else "step")
        shas = build(repo, args.commits, slow_at, args.step, args.work_ms)
        store = work / f"{repo.name}-history"
        t0 = time.perf_counter()
        with Neighbours(args.neighbours):
            span = ["history", "run", f"{shas[0]}..HEAD", "--repeats", str(args.repeats), "--store", str(store)]
            code_run, measured, last_run = rlbench([*span, "--json", "--", "run", "spin"], repo, timeout=args.timeout)
            confirm = ["history", "confirm", "--store", str(store), "--metric", "wall_s", "--max-rounds", str(args.max_rounds)]
            confirm += ["--repeats", str(args.calls)]
            code, confirmed, last = rlbench([*confirm, "--json"], repo, timeout=args.timeout)
        wall = time.perf_counter() - t0
        _, shown, _ = rlbench(["history", "show", "--store", str(store), "--metric", "wall_s", "--json"], repo, args.timeout)
        series = next((s for s in (shown or {}).get("series", []) if s.get("benchmark") == "spin"), {})
        recorded = (confirmed or {}).get("recorded", [])
        verdicts = [c["verdict"] for c in recorded]
        hit = [c for c in recorded if slow_at is not None and (c.get("pinned") or c["first_bad"]) == shas[slow_at]]
        trial = {
            "history": label,
            "slow_at": slow_at,
            "history_exit_code": code_run,
            "confirm_exit_code": code,
            "measured": len((measured or {}).get("measured", [])),
            "candidates": (confirmed or {}).get("candidates"),
            "confirmed": verdicts.count("confirmed"),
            "dismissed": verdicts.count("dismissed"),
            "undecided": verdicts.count("undecided"),
            "step_confirmed_at_its_commit": bool(hit) and hit[0]["verdict"] == "confirmed",
            "rounds": (confirmed or {}).get("rounds"),
            "wall_s": wall,
            "message": last if code else last_run if code_run else "",
            "recorded": recorded,
            "medians_s": series.get("medians"),  # per commit (from commit 1), as the detector saw them
            "at": [
                {
                    "first_bad": shas.index(c["first_bad"]) if c["first_bad"] in shas else None,
                    "pinned": shas.index(c["pinned"]) if c.get("pinned") in shas else None,
                    "verdict": c["verdict"],
                    "ratio": c["ratio"],
                    "ci": c["ci"],
                    "rounds": c["rounds"],
                }
                for c in recorded
            ],
        }
        out.append(trial)
        print(f"{label}: {trial['candidates']} candidate(s), verdicts {verdicts}, {wall:.0f} s", file=sys.stderr, flush=True)
        shutil.rmtree(repo, ignore_errors=True)
    return out


def render(mode: str, meta: dict[str, Any], trials: list[dict[str, Any]]) -> str:
    machine = meta["machine"]
    lines = [
        f"# {'Bisect' if mode == 'bisect' else 'History confirm'} beside a busy neighbour",
        "",
        f"Generated by `{meta['command']}` on {cpu_label(machine)}, {machine.get('cores')} cores (machine id "
        f"`{machine.get('id')}`), in {meta['wall_s'] / 60:.0f} minutes; {meta['neighbours']} CPU-bound neighbour(s) "
        '(`python -c "while True: pass"`) ran for the whole of every command.',
        "",
    ]
    if mode == "bisect":
        exact = sum(t["exact"] for t in trials)
        rounds = sorted(t["rounds_run"] for t in trials if t["rounds_run"] is not None)
        seconds = sorted(t["seconds"] for t in trials if t["seconds"] is not None)
        med = lambda xs: xs[len(xs) // 2] if xs else None
        lines += [
            f"Each trial: a repository of {meta['commits']} commits of `spin` (about {meta['work_ms']:g} ms of "
            f"pure-Python work a call), one commit {meta['step']:.0%} slower from there on, and `rlbench bisect FIRST HEAD "
            f"--fail wall_s:{meta['threshold']:g}% --max-rounds {meta['max_rounds']} --repeats {meta.get('calls', 1)} -- "
            "run spin`.",
            "",
            f"**The slow commit was named exactly in {exact} of {len(trials)} trials** (target: at least 9 of 10"
            f"{', met' if exact >= 0.9 * len(trials) else ', **not met**'}). Rounds against GOOD per bisect, median "
            f"{med(rounds)} (range {rounds[0] if rounds else '-'}-{rounds[-1] if rounds else '-'}); seconds measuring, "
            f"median {med(seconds) or 0:.0f} (range {seconds[0] if seconds else 0:.0f}-{seconds[-1] if seconds else 0:.0f}).",
            "",
            "| Trial | Slow commit | Named | Exact | Rounds | Tests | Seconds | Exit | Message |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for t in trials:
            lines.append(
                f"| {t['trial'] + 1} | {t['slow_at']} | {t['first_bad_index']} | {'yes' if t['exact'] else 'no'} | "
                f"{t['rounds_run']} | {t['tested']} | {t['seconds'] or 0:.0f} | {t['exit_code']} | {t['message']} |"
            )
    else:
        lines += [
            f"Each history: {meta['commits']} commits of `spin` (about {meta['work_ms']:g} ms a call) measured with "
            f"`rlbench history run --repeats {meta['repeats']}`, then `rlbench history confirm --metric wall_s "
            f"--max-rounds {meta['max_rounds']} --repeats {meta.get('calls', 1)}` on its candidate steps.",
            "",
            "| History | Candidates | Confirmed | Dismissed | Undecided | Injected step confirmed at its commit | Rounds | "
            "Minutes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for t in trials:
            injected = "n/a" if t["slow_at"] is None else "yes" if t["step_confirmed_at_its_commit"] else "**no**"
            lines.append(
                f"| {t['history']} | {t['candidates']} | {t['confirmed']} | {t['dismissed']} | {t['undecided']} | "
                f"{injected} | {t['rounds']} | {t['wall_s'] / 60:.1f} |"
            )
        lines += [
            "",
            "Every candidate measured again (commits numbered from 0; `confirm` measures the step's window, the commit "
            "before the last good one against the one after the first bad one, and pins a confirmed step to the first "
            "commit slower than the window's older end):",
            "",
            "| History | Injected at | Detected first bad | Verdict | Ratio across the window | Pinned to | Rounds |",
            "|---|---|---|---|---|---|---|",
        ]
        for t in trials:
            for c in t.get("at", []):
                ci = f" ({c['ci'][0]:.3f}-{c['ci'][1]:.3f})" if c.get("ci") and None not in c["ci"] else ""
                ratio = f"{c['ratio']:.3f}{ci}" if c.get("ratio") is not None else "n/a"
                lines.append(
                    f"| {t['history']} | {'n/a' if t['slow_at'] is None else t['slow_at']} | {c['first_bad']} | "
                    f"{c['verdict']} | {ratio} | {'n/a' if c['pinned'] is None else c['pinned']} | {c['rounds']} |"
                )
        aa = next((t for t in trials if t["slow_at"] is None), None)
        step = next((t for t in trials if t["slow_at"] is not None), None)
        if aa is not None and step is not None:
            lines += [
                "",
                f"Targets: 0 confirmed regressions on the A/A history ({aa['confirmed']}: "
                f"{'met' if aa['confirmed'] == 0 else '**not met**'}); the injected step confirmed at its commit "
                f"({'met' if step['step_confirmed_at_its_commit'] else '**not met**'}).",
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlbench.suites.scripts.loaded_calibration", description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("bisect", "history"))
    p.add_argument("--trials", type=int, default=10, help="bisect: repositories bisected (default: 10)")
    p.add_argument("--commits", type=int, default=None, help="commits per repository (default: 16 bisect, 50 history)")
    p.add_argument("--neighbours", type=int, default=1, help="CPU-bound processes beside every command (default: 1)")
    p.add_argument("--step", type=float, default=0.10, help="the injected slowdown, a fraction (default: 0.10)")
    p.add_argument("--threshold", type=float, default=5.0, help="bisect's --fail wall_s:X%% (default: 5)")
    p.add_argument("--work-ms", type=float, default=100.0, help="milliseconds of work per call of spin (default: 100)")
    p.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="history: repeats per commit (default: 20: about 2 s of spin per commit, longer than most of the slow "
        "spells of this VM, which last from one to tens of 23 ms ppo iterations)",
    )
    p.add_argument(
        "--calls",
        type=int,
        default=5,
        help="timed calls of spin per run of bisect and confirm (their --repeats; default: 5: one 40-100 ms call per "
        "process beside a neighbour put identical commits 25%% apart pair to pair)",
    )
    p.add_argument("--max-rounds", type=int, default=40, help="--max-rounds of bisect and confirm (default: 40)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds one command may take (default: 3600)")
    p.add_argument("--seed", type=int, default=0, help="seed of the slow commits' positions (default: 0)")
    p.add_argument("--out", default=None, help="markdown report (default: reports/loaded-calibration-MODE.md)")
    args = p.parse_args(argv)
    args.commits = args.commits or (16 if args.mode == "bisect" else 50)
    if args.commits < 4 or args.trials < 1 or args.neighbours < 0 or not 0 < args.step < 1 or args.work_ms <= 0:
        p.error("--commits must be >= 4, --trials >= 1, --neighbours >= 0, --step in (0, 1) and --work-ms > 0")
    out = Path(args.out or f"reports/loaded-calibration-{args.mode}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rlbench-loadedcal-"))
    t0 = time.perf_counter()
    try:
        trials = bisect_trials(args, work) if args.mode == "bisect" else history_trials(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fp = machine_fingerprint()
    meta = {
        "command": "python -m rlbench.suites.scripts.loaded_calibration "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {k: fp.get(k) for k in ("cpu", "cores", "id")},
        "wall_s": time.perf_counter() - t0,
        **{
            k: getattr(args, k)
            for k in ("commits", "neighbours", "step", "threshold", "work_ms", "repeats", "max_rounds", "calls")
        },
    }
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "trials": trials}, separators=(",", ":")), encoding="utf-8")
    out.write_text(render(args.mode, meta, trials), encoding="utf-8")
    print(f"report: {out}")
    return 0


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)  # the neighbours and the throwaway repositories go, as on Ctrl-C
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print("interrupted", file=sys.stderr)
        sys.exit(interrupt_exit_code(exc))

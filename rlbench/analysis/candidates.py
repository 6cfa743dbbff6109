"""A history's candidate regressions: the steps for the worse, their status, the command that measured them.

Pure functions over the history store and :mod:`rlbench.analysis.steps` (nothing here runs a benchmark):
``rlbench history confirm`` (:mod:`rlbench.analysis.confirm`) measures the candidates again, and ``history show`` and
the site (:mod:`rlbench.report.site`) tell confirmed regressions, dismissed candidates and unconfirmed ones apart with
:func:`status`.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from rlbench.analysis.gate import Threshold
from rlbench.analysis.steps import Step, detect_all
from rlbench.results.history import (
    UNCONFIRMED,
    UNDECIDED,
    Confirmation,
    HistoryStore,
    params_json,
    record_commit,
)
from rlbench.results.metrics import is_internal

# --- the command that measures a series ------------------------------------------------------------------------------
#: options of `rlbench run` that `rlbench ab`, `bisect` and `history confirm` set themselves (with their value count)
_MANAGED = {
    "--store": 1,
    "--report": 1,
    "--repeats": 1,
    "--seed": 1,
    "--json": 0,
    "--quiet": 0,
    "--pyinstrument": 0,
    "--profile": 0,  # --pyinstrument's old name on `rlbench run`
}


def run_argv_of(command: str | None, benchmark: str) -> list[str]:
    """The ``run BENCH ...`` (or ``profile ... -- script``) part of a recorded ``rlbench run ...`` command line, without
    the options ab and bisect manage (store, report, repeats, seed, json, quiet, pyinstrument). ``run BENCH`` when the
    record carries no command."""
    try:
        argv = shlex.split(command) if command else []
    except ValueError:
        argv = []
    if argv and Path(argv[0]).name == "rlbench":
        argv = argv[1:]
    if len(argv) < 2 or argv[0] not in ("run", "profile"):
        return ["run", benchmark]
    out: list[str] = []
    i = 0
    script = False
    while i < len(argv):
        a = argv[i]
        if a == "--" and argv[0] == "profile":
            script = True
        name = a.split("=", 1)[0]
        if not script and name in _MANAGED:
            i += 1 if "=" in a or _MANAGED[name] == 0 else 1 + _MANAGED[name]
            continue
        out.append(a)
        i += 1
    return out


def threshold_pct(st: Step) -> int:
    """The ``--fail METRIC:X%`` that confirms a step: 0% for an exact counter, else half the measured change, rounded
    down, at least 1% (a confirmation rules out a regression of half the size seen in the history)."""
    if st.series.exact:
        return 0
    if not math.isfinite(st.ratio):
        return 1
    return max(1, math.floor(round(abs(st.ratio - 1) * 100 / 2, 6)))


def recorded_commands(
    store: HistoryStore, machine: str, wanted: set[tuple[str, str]], order: dict[str, int]
) -> dict[tuple[str, str], str]:
    """(benchmark, params JSON) -> the command line of its latest record that carries one."""
    found: dict[tuple[str, str], tuple[int, str]] = {}
    if not wanted:
        return {}
    by_machine = {m: store.records(m) for m in store.machines()}  # each records file read once
    identity = store.identity([r for rs in by_machine.values() for r in rs])  # the parameters series are told apart by
    for r in by_machine[machine] if machine in by_machine else store.records(machine):
        key = (r.benchmark, params_json(identity(r)))
        cmd = r.meta.get("command") if isinstance(r.meta, dict) else None
        if key not in wanted or not isinstance(cmd, str):
            continue
        pos = order.get(record_commit(r) or "", -1)
        if key not in found or pos >= found[key][0]:
            found[key] = (pos, cmd)
    return {k: v[1] for k, v in found.items()}


# --- candidates and their status -------------------------------------------------------------------------------------
def step_key(st: Step) -> tuple[str, str, str, str, str]:
    """The :meth:`~rlbench.results.history.Confirmation.key` a confirmation of ``st`` carries."""
    s = st.series
    return s.benchmark, params_json(s.params), s.metric, st.last_good, st.first_bad


def status(st: Step, confirmations: dict[tuple[str, str, str, str, str], Confirmation]) -> str:
    """``confirmed``, ``dismissed``, ``undecided`` (measured again, no verdict) or ``unconfirmed`` (never measured)."""
    c = confirmations.get(step_key(st))
    return c.verdict if c is not None else UNCONFIRMED


@dataclass
class Candidate:
    """Candidate regressions of one benchmark and parameters at one pair of commits: measured together.

    Attributes:
        steps: The steps (one per metric), each for the worse.
        run_argv: The command that measured the series (from its records), without the options ab manages.
    """

    steps: list[Step]
    run_argv: list[str]

    @property
    def last_good(self) -> str:
        return self.steps[0].last_good

    @property
    def first_bad(self) -> str:
        return self.steps[0].first_bad

    @property
    def benchmark(self) -> str:
        return self.steps[0].series.benchmark

    @property
    def exact(self) -> bool:
        """Every metric is a noise-free counter: one round decides."""
        return all(st.series.exact for st in self.steps)

    def window(self) -> list[str]:
        """The commits ``confirm`` measures, oldest first: the step's last good and first bad commits and, for a noisy
        series, the series' commit on either side of them (where it has one). The detector places a noisy step within
        one commit of where it is (one commit measured at the other level's speed moves it; the step calibration
        counts a step found within +-1 as found): ``confirm`` judges the window's ends and then pins the commit. A
        counter's step is where its count changed."""
        if self.exact:
            return [self.last_good, self.first_bad]
        st = self.steps[0]
        commits = st.series.commits
        return list(commits[max(0, st.index - 2) : min(len(commits), st.index + 2)])

    def thresholds(self) -> list[Threshold]:
        """One ``--fail METRIC:X%`` per step (:func:`threshold_pct`)."""
        return [Threshold(st.series.metric, threshold_pct(st) / 100.0) for st in self.steps]

    def label(self) -> str:
        metrics = ", ".join(st.series.metric for st in self.steps)
        return f"{self.benchmark} {metrics} at {self.last_good[:12]}..{self.first_bad[:12]}"


def candidates(
    store: HistoryStore,
    machine: str,
    repo: Path | None,
    *,
    metrics: list[str] | None = None,
    commit: str | None = None,
    retry: bool = False,
) -> list[Candidate]:
    """The candidate regressions of ``machine``'s series still to confirm, newest first.

    A candidate is a step for the worse (:func:`rlbench.analysis.steps.detect_all`, over the metrics a site shows)
    that no confirmation decided yet (none, or ``undecided``; with ``retry`` also decided ones).

    Args:
        store: The history.
        machine: The machine whose series are searched (confirm measures on this machine).
        repo: The repository that orders the commits.
        metrics: Only these metrics.
        commit: Only the steps whose first bad commit is this full sha.
        retry: Measure again candidates already confirmed or dismissed.
    """
    series = [s for s in store.series(machine=machine, repo=repo) if not is_internal(s.metric)]
    if metrics:
        series = [s for s in series if s.metric in metrics]
    done = store.confirmations(machine)
    steps = [
        st
        for st in detect_all(series)
        if st.worse and (retry or status(st, done) in (UNCONFIRMED, UNDECIDED)) and (commit is None or st.first_bad == commit)
    ]
    groups: dict[tuple[str, str, str, str], list[Step]] = {}
    for st in steps:
        key = (st.series.benchmark, params_json(st.series.params), st.last_good, st.first_bad)
        groups.setdefault(key, []).append(st)
    order = {sha: i for i, sha in enumerate(store.order(repo))}
    commands = recorded_commands(store, machine, {(b, p) for b, p, _, _ in groups}, order)
    out = [Candidate(group, run_argv_of(commands.get((b, p)), b)) for (b, p, _, _), group in groups.items()]
    return sorted(out, key=lambda c: (-order.get(c.first_bad, -1), c.benchmark, c.last_good))

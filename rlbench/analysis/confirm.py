"""``rlbench history confirm``: measure a history's candidate regressions again, side by side, and record the verdicts.

A step the detector finds in a history (:mod:`rlbench.analysis.steps`) is a *candidate*: the history measured each
commit once, in its own process, at whatever load the machine had then, and one commit measured at the other level's
speed moves the step by one. ``confirm`` therefore measures the step's *window* (:meth:`Candidate.window`): the series'
commit before the last good one against the one after the first bad one (fewer at either end of the series; a counter's
step is its two commits), each in a ``git worktree`` as ``rlbench ab`` does, in interleaved rounds with ``--rounds
auto`` (looks at 10, 20, 40, ... up to ``--max-rounds``; :class:`rlbench.analysis.gate.AutoRounds`), and gates the
newer end against the older with ``--fail METRIC:X%``, ``X`` half the step's size (0% for an exact counter, one
round), as the site's suggested commands do (:func:`rlbench.analysis.candidates.threshold_pct`). When that FAILs, it
*pins* the regression: the window's commits in between are measured against its older end in the same way, the
detected first bad one first, and the first one slower by more than ``X`` is the commit the confirmation names
(``pinned``). The verdict is recorded in the history store (:class:`rlbench.results.history.Confirmation`), under the
step the detector found:

* **confirmed**: the gate FAILed: worse by more than half the step across the window, and significantly so;
* **dismissed**: it PASSed: the interval rules out a regression that large (the step was noise or load);
* **undecided**: INCONCLUSIVE after ``--max-rounds`` (or a verdict the load could explain was refused); the reason says
  what would settle it. An undecided candidate is tried again by the next ``confirm``.

Steps of several metrics of one benchmark at the same two commits (``sps`` and ``time/update``) are measured once,
with one threshold each. Each candidate's confirmations are written as soon as it is decided, so Ctrl-C loses at most
the candidate in flight, and the worktrees are removed on the way out (:class:`rlbench.analysis.ab.Worktrees`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlbench.analysis.ab import (
    Checkout,
    SideFailed,
    Worktrees,
    interleave,
    repo_top,
    resolve_commit,
    split_run_args,
    warmup_for,
)
from rlbench.analysis.candidates import Candidate
from rlbench.analysis.gate import (
    DEFAULT_MAX_ROUNDS,
    FAIL,
    INCONCLUSIVE,
    PASS,
    AutoRounds,
    GateOutcome,
    check_max_rounds,
    evaluate,
    gate_look,
)
from rlbench.core.errors import DataError, UsageError
from rlbench.results.history import CONFIRMED, DISMISSED, UNDECIDED, Confirmation, HistoryStore


# --- measuring them --------------------------------------------------------------------------------------------------
@dataclass
class Failed:
    """A candidate that could not be measured: its commits are gone, its checkout or its run failed."""

    candidate: Candidate
    message: str
    exit_code: int = 2


@dataclass
class ConfirmRun:
    """What :func:`confirm` did.

    Attributes:
        recorded: Every confirmation written, in order.
        failed: Candidates not measured (their commits gone, a failed build), with why.
        rounds: Interleaved rounds run, over every candidate.
        seconds: Wall time of every candidate's checkouts and rounds.
        warmup: Untimed repeats each run made first.
        repeats: Timed repeats per run (a round's median on each side).
    """

    recorded: list[Confirmation] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    warmup: int = 0
    repeats: int = 1


def _verdict(gate_verdict: str) -> str:
    return {FAIL: CONFIRMED, PASS: DISMISSED}.get(gate_verdict, UNDECIDED)


def confirm(
    found: list[Candidate],
    store: HistoryStore,
    machine: str,
    repo: Path,
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    warmup: int | None = None,
    repeats: int = 1,
    allow_busy: bool = False,
    on_run: Callable[[int, Candidate, int, str], None] | None = None,
    on_done: Callable[[int, Candidate, list[Confirmation] | None, str], None] | None = None,
) -> ConfirmRun:
    """Measure each candidate's two commits in interleaved rounds and record the verdicts in ``store``.

    Args:
        found: From :func:`candidates`.
        store: The history (confirmations are appended as each candidate is decided).
        machine: This machine's id (the series' machine).
        repo: A directory inside the repository (the runs start from its counterpart in each checkout).
        max_rounds: The most rounds per candidate (``--rounds auto``).
        warmup: Untimed repeats per run (``None``: :func:`rlbench.analysis.ab.warmup_for`'s default).
        repeats: Timed repeats per run, as ``rlbench ab --repeats`` (several calls of a short benchmark per process
            steady a round beside a busy neighbour).
        allow_busy: Judge timings even when the load differed between the sides.
        on_run: Called with (candidate number, candidate, round, side) before each run (progress display).
        on_done: Called with (candidate number, candidate, its confirmations or ``None``, a note) after each.

    Raises:
        UsageError: ``max_rounds`` below the first look, a command ab cannot run. KeyboardInterrupt: Ctrl-C or SIGTERM
            (what was recorded before stays; no worktree is left).
    """
    check_max_rounds(max_rounds)
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}")
    top = repo_top(repo)
    design = AutoRounds.plan(max_rounds)
    result = ConfirmRun(repeats=repeats)
    store.check_writable(machine)  # a link or FIFO where a store file belongs: refused before anything is measured
    with Worktrees(repo, "history") as wt:
        assert wt.work is not None
        for number, cand in enumerate(found, 1):
            t0 = time.monotonic()
            window = cand.window()
            try:
                shas = {sha: resolve_commit(top, sha) for sha in window}
            except UsageError:
                gone = [sha for sha in window if not _exists(top, sha)]
                why = (
                    f"{cand.label()}: commit {gone[0] if gone else cand.first_bad} no longer exists in the repository "
                    "(history rewritten, or a branch deleted?): it cannot be measured again"
                )
                result.failed.append(Failed(cand, why))
                if on_done:
                    on_done(number, cand, None, why)
                continue
            args, seed = split_run_args(cand.run_argv, "history confirm")
            warm = warmup_for(args, warmup)
            result.warmup = warm
            measure = _Measure(wt, number, cand, shas, args, seed, design, repeats, warm, allow_busy, on_run)
            try:
                outcome, refused = measure(window[0], window[-1])
                pinned = _pin(cand, window, outcome, measure)
            except SideFailed as exc:
                from rlbench.analysis.history_run import failure_line

                sha = getattr(exc, "commit", cand.first_bad)
                role = {cand.last_good: "last good", cand.first_bad: "first bad"}.get(sha, "neighbouring")
                why = f"{cand.label()}: the {role} commit {sha[:12]} failed to run ({failure_line(exc)})"
                result.failed.append(Failed(cand, why, exc.exit_code))
                if on_done:
                    on_done(number, cand, None, why)
                continue
            except UsageError as exc:  # a checkout failed (submodules), or the run's directory is missing there
                why = f"{cand.label()}: {exc}"
                result.failed.append(Failed(cand, why))
                if on_done:
                    on_done(number, cand, None, why)
                continue
            finally:
                measure.close()
                result.rounds += measure.rounds
                result.seconds += time.monotonic() - t0
            recorded = _record(cand, window, outcome, refused, measure.rounds, machine, pinned)
            for c in recorded:
                store.add_confirmation(c)
            result.recorded += recorded
            if on_done:
                on_done(number, cand, recorded, "")
    return result


class _Measure:
    """One candidate's measurements: a commit of its window against another, in interleaved rounds with ``--rounds
    auto`` (one round for counters), each commit checked out once (:meth:`close` removes the worktrees)."""

    def __init__(
        self,
        wt: Worktrees,
        number: int,
        cand: Candidate,
        shas: dict[str, str],
        args: list[str],
        seed: int,
        design: AutoRounds,
        repeats: int,
        warmup: int,
        allow_busy: bool,
        on_run: Callable[[int, Candidate, int, str], None] | None,
    ) -> None:
        self.wt, self.number, self.cand = wt, number, cand
        self.shas = shas  # the window's commits, oldest first, to what each resolves to
        self.args, self.seed, self.repeats, self.warmup = args, seed, repeats, warmup
        self.allow_busy, self.on_run = allow_busy, on_run
        self.looks, self.confidence = ([1], 0.95) if cand.exact else (list(design.looks), design.confidence)
        self.thresholds = cand.thresholds()
        self.checkouts: dict[str, tuple[str, Checkout]] = {}  # sha -> its worktree's name and checkout
        self.rounds = self.tests = 0

    def gate(self, base: list, head: list) -> GateOutcome:
        return evaluate(
            base,
            head,
            self.thresholds,
            learning_drop=None,
            confidence=self.confidence,
            allow_busy=self.allow_busy,
            interleaved=True,
            more="give a larger --max-rounds",
        )

    def checkout(self, sha: str) -> Checkout:
        if sha not in self.checkouts:
            name = f"c{self.number}-w{list(self.shas).index(sha)}"
            self.checkouts[sha] = (name, self.wt.add(name, self.shas[sha], sha[:12]))
        return self.checkouts[sha][1]

    def progress(self, k: int, side: str) -> None:
        if self.on_run:
            self.on_run(self.number, self.cand, k, side)

    def __call__(self, good: str, bad: str) -> tuple[GateOutcome | None, str]:
        """``bad`` against ``good``: the gate's outcome at the look that decided (or the last), or why there is none.

        Raises:
            SideFailed: A run failed (its ``commit`` attribute names the commit).
        """
        assert self.wt.work is not None
        self.tests += 1
        stores = {side: self.wt.work / f"c{self.number}-t{self.tests}-{side}" for side in ("base", "head")}
        sides = {"base": self.checkout(good), "head": self.checkout(bad)}
        done, outcome, base, head = 0, None, [], []
        try:
            for target in self.looks:
                base, head = interleave(
                    sides,
                    self.args,
                    self.seed,
                    target - done,
                    stores,
                    repeats=self.repeats,
                    warmup=self.warmup,
                    on_run=self.progress,
                    start=done,
                )
                done = target
                outcome, stop = gate_look(lambda b=base, h=head: self.gate(b, h))
                if stop:
                    break
        except SideFailed as exc:
            exc.commit = good if exc.store == stores["base"] else bad  # type: ignore[attr-defined]
            raise
        finally:
            self.rounds += done
        if outcome is not None:
            return outcome, ""
        try:  # the last look gave no outcome: ask once more for the reason
            return self.gate(base, head), ""
        except DataError as exc:
            return None, str(exc)

    def close(self) -> None:
        for name, _ in self.checkouts.values():
            self.wt.remove(name)


def _gate_verdict(outcome: GateOutcome | None) -> str:
    """The outcome's FAIL, PASS or INCONCLUSIVE (no outcome: INCONCLUSIVE)."""
    return outcome.verdict if outcome is not None else INCONCLUSIVE


def _pin(
    cand: Candidate,
    window: list[str],
    outcome: GateOutcome | None,
    measure: Callable[[str, str], tuple[GateOutcome | None, str]],
) -> str | None:
    """The first commit of a confirmed window measured slower than its good end (``None``: not confirmed, or a commit
    in between could not be decided). The detected first bad commit is tested first, then its neighbour on the side the
    verdict points to."""
    if _gate_verdict(outcome) != FAIL:
        return None
    if len(window) == 2:
        return window[1]
    good = window[0]
    lo, hi = 1, len(window) - 1  # the first bad is one of window[lo..hi]; window[hi] is known bad
    probe = window.index(cand.first_bad) if cand.first_bad in window[lo:hi] else lo
    while lo < hi:
        try:
            verdict, _ = measure(good, window[probe])
        except SideFailed:  # a commit inside the window fails to run: the window's verdict stands, unpinned
            return None
        if _gate_verdict(verdict) == FAIL:
            hi, probe = probe, probe - 1  # slower already: is the one before it too?
        elif _gate_verdict(verdict) == PASS:
            lo = probe = probe + 1
        else:
            return None  # a commit in between the gate could not decide
    return window[hi]


def _record(
    cand: Candidate,
    window: list[str],
    outcome: GateOutcome | None,
    refused: str,
    rounds: int,
    machine: str,
    pinned: str | None,
) -> list[Confirmation]:
    """One confirmation per step of the candidate, from the gate's outcome on the window's ends (or its refusal)."""
    span = ""
    if window != [cand.last_good, cand.first_bad]:
        span = f"{window[-1][:12]} against {window[0][:12]} (the step's commits and one on either side): "
    where = ""
    if _gate_verdict(outcome) == FAIL:
        where = f"; first slower at {pinned[:12]}" if pinned else "; the window's first slower commit was not decided"
    checks = {c.threshold.metric: c for c in outcome.checks} if outcome is not None else {}
    out = []
    now = int(time.time())
    for st, t in zip(cand.steps, cand.thresholds()):
        s = st.series
        c = checks.get(s.metric)
        if c is None:
            reason = f"no verdict after {rounds} round(s): {refused or 'the metric was not measured'}"
            out.append(
                Confirmation(
                    machine,
                    s.benchmark,
                    dict(s.params),
                    s.metric,
                    st.last_good,
                    st.first_bad,
                    UNDECIDED,
                    t.fraction,
                    None,
                    None,
                    rounds,
                    reason,
                    now,
                )  # fmt: skip
            )
            continue
        r = c.result
        reason = c.reason if c.verdict != INCONCLUSIVE else f"INCONCLUSIVE after {rounds} round(s): {c.advice or c.reason}"
        reason = span + reason + (where if c.verdict == FAIL else "")
        out.append(
            Confirmation(
                machine,
                s.benchmark,
                dict(s.params),
                s.metric,
                st.last_good,
                st.first_bad,
                _verdict(c.verdict),
                t.fraction,
                _num(r.ratio),
                [_num(r.ci_low), _num(r.ci_high)],
                rounds,
                reason,
                now,
                pinned if c.verdict == FAIL else None,
            )  # fmt: skip
        )
    return out


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _exists(top: Path, sha: str) -> bool:
    try:
        resolve_commit(top, sha)
    except UsageError:
        return False
    return True


def confirmation_dict(c: Confirmation) -> dict:
    """A confirmation as JSON (``history show --json``, ``history confirm --json``)."""
    return json.loads(json.dumps(c.__dict__, default=str))

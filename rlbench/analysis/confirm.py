"""``rlbench history confirm``: measure a history's candidate regressions again, side by side, and record the verdicts.

A step the detector finds in a history (:mod:`rlbench.analysis.steps`) is a *candidate*: the history measured each
commit once, in its own process, at whatever load the machine had then. ``confirm`` measures the candidate's last good
and first bad commits again, each in a ``git worktree`` as ``rlbench ab`` does, in interleaved rounds with
``--rounds auto`` (looks at 10, 20, 40, ... up to ``--max-rounds``; :class:`rlbench.analysis.gate.AutoRounds`), and
gates the first bad against the last good with ``--fail METRIC:X%``, ``X`` half the step's size (0% for an exact
counter, one round), as the site's suggested commands do (:func:`rlbench.analysis.candidates.threshold_pct`). The
verdict is recorded in the history store (:class:`rlbench.results.history.Confirmation`):

* **confirmed**: the gate FAILed: worse by more than half the step, and significantly so;
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

from rlbench.analysis.ab import SideFailed, Worktrees, interleave, repo_top, resolve_commit, split_run_args, warmup_for
from rlbench.analysis.candidates import Candidate
from rlbench.analysis.gate import (
    DEFAULT_MAX_ROUNDS,
    FAIL,
    INCONCLUSIVE,
    PASS,
    AutoRounds,
    GateOutcome,
    Threshold,
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
            try:
                shas = [resolve_commit(top, sha) for sha in (cand.last_good, cand.first_bad)]
            except UsageError:
                gone = [sha for sha in (cand.last_good, cand.first_bad) if not _exists(top, sha)]
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
            looks, confidence = ([1], 0.95) if cand.exact else (list(design.looks), design.confidence)
            thresholds = cand.thresholds()
            stores = {"base": wt.work / f"c{number}-base", "head": wt.work / f"c{number}-head"}
            names = (f"c{number}-good", f"c{number}-bad")

            def gate(base: list, head: list, thresholds: list[Threshold] = thresholds, confidence: float = confidence):
                return evaluate(
                    base,
                    head,
                    thresholds,
                    learning_drop=None,
                    confidence=confidence,
                    allow_busy=allow_busy,
                    interleaved=True,
                    more="give a larger --max-rounds",
                )

            done = 0
            outcome: GateOutcome | None = None
            try:
                sides = {
                    "base": wt.add(names[0], shas[0], cand.last_good[:12]),
                    "head": wt.add(names[1], shas[1], cand.first_bad[:12]),
                }
                for target in looks:

                    def progress(k: int, side: str, number: int = number, cand: Candidate = cand) -> None:
                        if on_run:
                            on_run(number, cand, k, side)

                    base, head = interleave(
                        sides, args, seed, target - done, stores, repeats=repeats, warmup=warm, on_run=progress, start=done
                    )
                    done = target
                    outcome, stop = gate_look(lambda b=base, h=head: gate(b, h))
                    if stop:
                        break
            except SideFailed as exc:
                from rlbench.analysis.history_run import failure_line

                side = "last good" if exc.store == stores["base"] else "first bad"
                why = f"{cand.label()}: the {side} commit failed to run ({failure_line(exc)})"
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
                for name in names:
                    wt.remove(name)
                result.rounds += done
                result.seconds += time.monotonic() - t0
            refused = ""
            if outcome is None:  # the last look gave no outcome: ask once more for the reason
                try:
                    outcome = gate(base, head)
                except DataError as exc:
                    refused = str(exc)
            recorded = _record(cand, outcome, refused, done, machine)
            for c in recorded:
                store.add_confirmation(c)
            result.recorded += recorded
            if on_done:
                on_done(number, cand, recorded, "")
    return result


def _record(cand: Candidate, outcome: GateOutcome | None, refused: str, rounds: int, machine: str) -> list[Confirmation]:
    """One confirmation per step of the candidate, from the gate's outcome (or its refusal)."""
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

"""``rlbench bisect GOOD BAD --fail METRIC:X% -- run BENCH``: the first commit that regressed, found in worktrees.

Like ``git bisect``, but every verdict is measured: each tested commit runs against GOOD with interleaved rounds, as
``rlbench ab`` runs its two sides (:func:`rlbench.analysis.ab.interleave`), and the gate judges it
(:func:`rlbench.analysis.gate.evaluate`): FAIL makes it bad, PASS good. The user's checkout is never touched.

**Rounds.** By default a timing is decided as ``ab --rounds auto`` decides it: looks after rounds 10, 20, 40, ... up
to ``--max-rounds`` (:class:`rlbench.analysis.gate.AutoRounds`), stopping at the first look where every threshold is
PASS or FAIL (:func:`rlbench.analysis.gate.gate_look`). A steady neighbour on the machine widens the interval, and the
looks add rounds until it is narrow enough; the load is judged per round pair, so it refuses a verdict only when it
differed between the sides. Counters (``ops/``, ``syncs/``, ``copies/``, ``flops/``) are exact: one round judges them.
``--rounds N`` runs exactly N rounds per commit instead.

**Skips.** A commit is *skipped*, as ``git bisect skip`` does, only when its run fails (a broken build) or when the
rounds up to ``--max-rounds`` could not decide it (or a verdict the load could explain was refused); the search then
tries the next best commit. The result says, for each undecided commit, what would settle it (the rounds the measured
noise needs, a steadier machine).

BAD is measured first: bisecting needs a regression between GOOD and BAD, so a BAD that passes (or cannot be judged)
ends the search with no answer. The search runs over the commit graph of ``GOOD..BAD`` as ``git bisect`` does
(:func:`search_graph`): it assumes, as git bisect does, that the commits that descend from the first bad one stay bad,
and the others good, so a merged side branch that never had the regression does not lead it to the merge.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlbench.analysis.ab import (
    SideFailed,
    Worktrees,
    _git,
    interleave,
    repo_top,
    resolve_commit,
    split_run_args,
    warmup_for,
)
from rlbench.analysis.gate import (
    DEFAULT_MAX_ROUNDS,
    FAIL,
    INCONCLUSIVE,
    PASS,
    AutoRounds,
    Check,
    GateOutcome,
    MachineBusy,
    Threshold,
    check_max_rounds,
    evaluate,
    gate_look,
    rounds_needed,
)
from rlbench.core.errors import DataError, RlbenchError, UsageError
from rlbench.results.history import CommitInfo
from rlbench.results.metrics import COUNTERS

SKIP = "SKIP"


def exact_threshold(t: Threshold) -> bool:
    """Whether a threshold's metric is a noise-free counter (one round judges it)."""
    return t.metric.split("/", 1)[0] in COUNTERS


def default_rounds(thresholds: list[Threshold]) -> int | None:
    """1 when every threshold is on a counter (exact: one round judges it), else ``None``: ``--rounds auto``."""
    return 1 if thresholds and all(exact_threshold(t) for t in thresholds) else None


@dataclass
class Tested:
    """One tested commit and what the gate said of it against GOOD.

    Attributes:
        sha: The commit.
        subject: Its subject line.
        verdict: ``PASS`` (good), ``FAIL`` (bad) or ``SKIP`` (could not be judged).
        reason: The gate's words for the deciding check, or why it was skipped.
        metric: The deciding check's metric.
        ratio: Candidate over GOOD (medians; ``None`` when skipped before measuring).
        ci: The interval of the ratio (at the last look's level).
        exact: The metric is a noise-free counter.
        rounds: Interleaved rounds run against GOOD.
        seconds: Wall time of its checkout and rounds.
        settle: For a skipped commit: what would decide it (more rounds, a steadier machine, a build that runs).
        dropped: Round pairs left out of the timings because their halves saw very different load.
    """

    sha: str
    subject: str | None
    verdict: str
    reason: str
    metric: str | None = None
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    exact: bool = False
    rounds: int = 0
    seconds: float = 0.0
    settle: str = ""
    dropped: int = 0

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "commit": self.sha,
            "subject": self.subject,
            "verdict": self.verdict,
            "reason": self.reason,
            "metric": self.metric,
            "ratio": self.ratio,
            "ci": list(self.ci) if self.ci else None,
            "exact": self.exact,
            "rounds": self.rounds,
            "seconds": round(self.seconds, 3),
            "settle": self.settle or None,
            "pairs_dropped": self.dropped,
        }


@dataclass
class BisectResult:
    """The answer: the first bad commit, or the commits it could be when skips left it open.

    Attributes:
        good: GOOD's sha.
        bad: BAD's sha.
        first_bad: The first bad commit, or ``None`` when undecided.
        last_good: Its first parent: good (GOOD, an ancestor of GOOD, a tested PASS or an ancestor of one).
        candidates: When undecided: the commits the first bad one is among, oldest first.
        tested: Every tested commit in the order tested.
        message: One line: the answer, or why there is none.
        searched: How many commits lay between GOOD (excluded) and BAD (included).
        rounds: Interleaved rounds per tested commit: a number, or ``"auto"`` (looks up to ``max_rounds``).
        repeats: Compared repeats per run.
        warmup: Repeats per run left out.
        max_rounds: With ``rounds="auto"``, the most rounds per tested commit.
    """

    good: str
    bad: str
    first_bad: str | None
    last_good: str | None
    candidates: list[str]
    tested: list[Tested] = field(default_factory=list)
    message: str = ""
    searched: int = 0
    rounds: int | str = 1
    repeats: int = 1
    warmup: int = 0
    max_rounds: int | None = None

    @property
    def rounds_run(self) -> int:
        """Rounds run against GOOD, over every tested commit."""
        return sum(t.rounds for t in self.tested)

    @property
    def seconds(self) -> float:
        """Wall time of every tested commit's checkout and rounds."""
        return sum(t.seconds for t in self.tested)

    @property
    def found(self) -> bool:
        """Whether the first bad commit was pinned."""
        return self.first_bad is not None

    def tested_of(self, sha: str) -> Tested | None:
        """The test of ``sha``, if it was tested."""
        return next((t for t in self.tested if t.sha == sha), None)


def _deciding(checks: list[Check]) -> Check:
    """The check that decides the verdict: a failing one, else an inconclusive one, else the first."""
    for verdict in (FAIL, INCONCLUSIVE):
        for c in checks:
            if c.verdict == verdict:
                return c
    return checks[0]


def search_graph(parents: list[list[int]], judge: Callable[[int], str]) -> list[int] | None:
    """``git bisect`` over a commit graph, with skips: the first bad commit, or the commits it is among.

    The commits are ``0..n-1`` in topological order (parents first), the last one BAD; ``parents[i]`` are the indices
    of commit ``i``'s parents inside the range (a parent outside it, GOOD or older, is good). As git does, a commit
    is taken to be bad when it descends from the first bad one, and good otherwise: a side branch that never merged
    the regression stays good even where it sorts after it. ``judge(i)`` measures commit ``i`` and returns ``PASS``,
    ``FAIL`` or ``SKIP``. BAD is judged first: when it does not FAIL there is nothing to search and ``None`` is
    returned. Then each step judges the commit that best halves the commits the first bad one can still be
    (``min(ancestors, rest)`` largest, as ``git rev-list --bisect``; ties to the oldest), skipping the skipped ones:
    a FAIL keeps only its ancestors, a PASS removes its ancestors.

    Returns:
        The candidates, oldest first, the last one bad: one commit when the answer is exact, else the skipped commits
        that could be the first bad one and the oldest commit known bad.
    """
    n = len(parents)
    if judge(n - 1) != FAIL:
        return None
    ancestors: list[int] = []  # bit j of ancestors[i]: commit j is commit i or one of its ancestors in the range
    for i, ps in enumerate(parents):
        bits = 1 << i
        for p in ps:
            bits |= ancestors[p]
        ancestors.append(bits)
    left, bad, skipped = ancestors[n - 1], n - 1, 0  # bitsets: where the first bad commit can be; skipped commits
    while True:
        testable = left & ~skipped & ~(1 << bad)
        if not testable:
            break
        total = left.bit_count()
        best, score = -1, -1
        for i in range(n):
            if testable >> i & 1:
                weight = (ancestors[i] & left).bit_count()
                if min(weight, total - weight) > score:
                    best, score = i, min(weight, total - weight)
        verdict = judge(best)
        if verdict == PASS:
            left &= ~ancestors[best]
        elif verdict == FAIL:
            bad, left = best, left & ancestors[best]
        else:
            skipped |= 1 << best
    return [i for i in range(n) if left >> i & 1]


def search(n: int, judge: Callable[[int], str]) -> tuple[int, int] | None:
    """:func:`search_graph` over a line of commits ``0..n-1`` after GOOD, the last one being BAD.

    Returns:
        ``(lo, hi)``: ``lo`` the last good index (-1 for GOOD itself), ``hi`` the first bad index; the commits
        strictly between them were all skipped (none when the answer is exact).
    """
    found = search_graph([[i - 1] if i else [] for i in range(n)], judge)
    return None if found is None else (found[0] - 1, found[-1])


def settle_words(outcome: GateOutcome | None, thresholds: list[Threshold], max_rounds: int | None) -> str:
    """What would decide a commit the rounds left undecided: the rounds its measured noise needs (``--max-rounds``), or
    a machine whose load does not differ between the sides, or what the gate refused."""
    if outcome is None:
        return ""
    open_ = [c for c in outcome.checks if c.verdict == INCONCLUSIVE]
    if not open_:
        return ""
    c = open_[0]
    if c.busy:
        return "a machine whose load is the same during both sides' runs (the load differed between them)"
    n = rounds_needed(c.result, c.threshold.fraction)
    if n is not None:
        more = f"about {n} paired rounds" + (f" (--max-rounds {max(n, (max_rounds or 0) + 1)})" if max_rounds else "")
        return f"{more} at this noise would rule out {100 * c.threshold.fraction:g}% for {c.threshold.metric}"
    return (
        f"no number of rounds: its estimate of {c.threshold.metric} sits at the limit; a noise-free counter, or a larger limit"
    )


def bisect(
    good: str,
    bad: str,
    thresholds: list[Threshold],
    run_argv: list[str],
    repo: Path,
    *,
    rounds: int | None = None,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    repeats: int = 1,
    warmup: int | None = None,
    allow_busy: bool = False,
    on_test: Callable[[int, CommitInfo, int, str], None] | None = None,
    on_look: Callable[[int, CommitInfo, int, GateOutcome | None], None] | None = None,
) -> BisectResult:
    """Find the first commit after ``good`` up to ``bad`` where the thresholds fail against ``good``.

    Args:
        good: A revision where the code is fast enough.
        bad: A later revision (a descendant of ``good``) where it is not.
        thresholds: ``--fail`` thresholds (at least one).
        run_argv: ``["run", BENCH, ...]`` or ``["profile", ..., "--", "python", "x.py"]``.
        repo: A directory inside the repository.
        rounds: Interleaved rounds per tested commit; ``None``: 1 when every threshold is a counter, else
            ``--rounds auto`` (looks at 10, 20, 40, ... up to ``max_rounds``).
        max_rounds: The most rounds per tested commit with ``--rounds auto``.
        repeats: Repeats per run that are compared (the same seeds on both sides).
        warmup: Repeats per run made first and left out (``None``: :func:`rlbench.analysis.ab.warmup_for`'s default, 1
            for ``run``).
        allow_busy: Judge timings even when the load differed between the sides.
        on_test: Called with (test number, commit, round, side) before each run (progress display).
        on_look: Called with (test number, commit, rounds so far, outcome) after each look of ``--rounds auto``.

    Raises:
        UsageError: Bad revisions, GOOD not an ancestor of BAD, no threshold, bad rounds or repeats, a ``max_rounds``
            below the first look, too few samples for a timing threshold. KeyboardInterrupt: Ctrl-C or SIGTERM (no
            worktree is left).
    """
    if not thresholds:
        raise UsageError("rlbench bisect needs at least one --fail METRIC:PCT% (what makes a commit bad)")
    rounds = default_rounds(thresholds) if rounds is None else rounds
    if (rounds is not None and rounds < 1) or repeats < 1 or (warmup is not None and warmup < 0):
        raise UsageError(
            f"--rounds and --repeats must be at least 1 and --warmup at least 0, got {rounds}, {repeats} and {warmup}"
        )
    auto = rounds is None
    if auto:
        check_max_rounds(max_rounds)
        design = AutoRounds.plan(max_rounds)
        looks, confidence = list(design.looks), design.confidence
    else:
        looks, confidence = [rounds], 0.95
    args, seed = split_run_args(run_argv, "bisect")
    warm = warmup_for(args, warmup)
    top = repo_top(repo)
    g, b = resolve_commit(top, good), resolve_commit(top, bad)
    if g == b:
        raise UsageError(f"GOOD and BAD are the same commit ({g[:12]}): nothing to bisect")
    try:
        _git(["merge-base", "--is-ancestor", g, b], top)
    except UsageError:
        raise UsageError(f"GOOD {good!r} is not an ancestor of BAD {bad!r}: bisect needs GOOD before BAD") from None
    graph = [
        line.split() for line in _git(["rev-list", "--reverse", "--topo-order", "--parents", f"{g}..{b}"], top).splitlines()
    ]
    order = [line[0] for line in graph]  # parents first: what git bisect searches, BAD last
    index = {sha: i for i, sha in enumerate(order)}
    parents = [[index[p] for p in line[1:] if p in index] for line in graph]
    from rlbench.analysis.history_run import commit_infos, failure_line

    infos = commit_infos([g, *order], top)
    result = BisectResult(
        g,
        b,
        None,
        None,
        [],
        searched=len(order),
        rounds="auto" if auto else rounds,  # type: ignore[arg-type]
        repeats=repeats,
        warmup=warm,
        max_rounds=max_rounds if auto else None,
    )
    with Worktrees(repo, "bisect") as wt:
        assert wt.work is not None
        base = wt.add("good", g, good)

        def gate(base_recs: list, head_recs: list) -> GateOutcome:
            return evaluate(
                base_recs,
                head_recs,
                thresholds,
                learning_drop=None,
                confidence=confidence,
                allow_busy=allow_busy,
                interleaved=True,
            )

        def test(index: int) -> Tested:
            sha = order[index]
            info = infos.get(sha) or CommitInfo(sha, None, None)
            number = len(result.tested) + 1
            name = f"test-{number}"
            stores = {"base": wt.work / f"{name}-base", "head": wt.work / f"{name}-head"}
            t0 = time.monotonic()
            done = 0
            outcome: GateOutcome | None = None
            try:
                head = wt.add(name, sha)

                def progress(k: int, side: str) -> None:
                    if on_test:
                        on_test(number, info, k, side)

                for target in looks:
                    base_recs, head_recs = interleave(
                        {"base": base, "head": head},
                        args,
                        seed,
                        target - done,
                        stores,
                        repeats=repeats,
                        warmup=warm,
                        on_run=progress,
                        start=done,
                    )
                    done = target
                    if not auto:
                        break
                    outcome, stop = gate_look(lambda b=base_recs, h=head_recs: gate(b, h))
                    if on_look:
                        on_look(number, info, done, outcome)
                    if stop:
                        break
            except SideFailed as exc:
                if exc.store == stores["base"]:
                    raise RlbenchError(
                        f"GOOD {good!r} failed to run, so nothing can be judged against it: {exc.message}"
                    ) from None
                why = failure_line(exc)
                return Tested(
                    sha, info.subject, SKIP, f"run failed: {why}", rounds=done, seconds=time.monotonic() - t0,
                    settle=f"a build that runs (it {why})",
                )  # fmt: skip
            except UsageError as exc:  # the checkout failed
                return Tested(
                    sha, info.subject, SKIP, f"checkout failed: {exc}", seconds=time.monotonic() - t0,
                    settle="a checkout that works",
                )  # fmt: skip
            finally:
                wt.remove(name)
            seconds = time.monotonic() - t0
            try:
                outcome = gate(base_recs, head_recs)
            except DataError as exc:
                if not auto and "too few samples" in str(exc):
                    raise UsageError(
                        f"{exc}; bisect: pass --rounds or --repeats so that rounds x repeats >= 5 for a timing "
                        "threshold (a counter needs 1), or leave --rounds out (auto)"
                    ) from None
                settle = (
                    "a machine whose load is the same during both sides' runs (the load differed between them)"
                    if isinstance(exc, MachineBusy)
                    else ""  # a metric it does not record: no number of rounds gives one
                )
                return Tested(
                    sha, info.subject, SKIP, f"no verdict after {done} round(s): {exc}", rounds=done, seconds=seconds,
                    settle=settle,
                )  # fmt: skip
            c = _deciding(outcome.checks)
            r = c.result
            verdict = {PASS: PASS, FAIL: FAIL}.get(outcome.verdict, SKIP)
            reason = c.reason if verdict != SKIP else f"INCONCLUSIVE after {done} round(s): {c.advice or c.reason}"
            dropped = len(outcome.load.dropped) if outcome.load is not None else 0
            return Tested(
                sha, info.subject, verdict, reason, c.threshold.metric, r.ratio, (r.ci_low, r.ci_high), r.exact,
                rounds=done, seconds=seconds, dropped=dropped,
                settle=settle_words(outcome, thresholds, max_rounds if auto else None) if verdict == SKIP else "",
            )  # fmt: skip

        def judge(index: int) -> str:
            t = test(index)
            result.tested.append(t)
            return t.verdict

        found = search_graph(parents, judge)
        if found is None:
            first = result.tested[0]
            said = "passes" if first.verdict == PASS else "cannot be judged"
            settle = f"; what would decide it: {first.settle}" if first.settle else ""
            result.message = (
                f"BAD {bad!r} ({b[:12]}) {said} against GOOD {good!r} ({first.reason}): no regression to bisect{settle}"
            )
            return result
        hi = found[-1]
        if len(found) > 1:  # all but the last were skipped
            result.candidates = [order[i] for i in found]
            open_ = [t for t in (result.tested_of(order[i]) for i in found[:-1]) if t is not None and t.settle]
            settle = "; ".join(f"{t.sha[:12]}: {t.settle}" for t in open_[:3])
            result.message = (
                f"cannot decide: the first bad commit is one of {len(result.candidates)} "
                f"({', '.join(s[:12] for s in result.candidates)}); the commits before {order[hi][:12]} could not be judged"
                + (f"; what would decide them: {settle}" if settle else "")
            )
            return result
        result.first_bad = order[hi]
        result.last_good = _first_parent(top, order[hi]) or g
        result.candidates = [order[hi]]
        t = result.tested_of(order[hi])
        assert t is not None
        result.message = f"first bad commit: {order[hi][:12]} {infos.get(order[hi], CommitInfo('', None, '')).subject or ''}"
        return result


def _first_parent(top: Path, sha: str) -> str | None:
    """The first parent of ``sha`` (``None`` for a root commit)."""
    try:
        return _git(["rev-parse", "--verify", "--quiet", f"{sha}^1"], top) or None
    except UsageError:
        return None

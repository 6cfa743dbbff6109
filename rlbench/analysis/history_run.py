"""``rlbench history run``: measure every commit of a git range, each in its own worktree, into a history store.

Each commit is checked out as ``rlbench ab`` checks out its two sides (:class:`rlbench.analysis.ab.Worktrees`): in
rlbench's own repository each commit runs its own rlbench; in a user's repository the installed rlbench runs the
commit's ``./suites/`` or script. The records of a commit go to the :class:`~rlbench.results.history.HistoryStore`
as soon as it is measured, so Ctrl-C, SIGTERM or a crash loses at most the commit in flight, and the next run skips
every (commit, machine, benchmark, parameters) the store already holds.

A commit where the benchmark does not exist yet (an unknown benchmark, a script that is not there) or where its run
fails becomes a :class:`~rlbench.results.history.Gap` (``absent`` or ``failed``), not an abort: a history crosses
commits that broke the build.

The records of a commit carry that commit: their ``fingerprint["git"]`` is set to the measured sha (the benchmark ran
from a clean checkout of it), and their ``fingerprint["machine"]`` to this machine's (an old revision of rlbench may
compute machine ids another way; it ran here all the same). What the run had recorded there, if different, is kept
under ``fingerprint["recorded_git"]`` / ``fingerprint["recorded_machine"]``.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbench.analysis.ab import (
    Checkout,
    SideFailed,
    Worktrees,
    _git,
    repo_top,
    resolve_commit,
    run_side,
    split_run_args,
    warmup_for,
)
from rlbench.core.errors import DataError, StoreError, UsageError
from rlbench.results.history import CommitInfo, Gap, HistoryStore
from rlbench.results.records import Record
from rlbench.results.store import read_text


def resolve_commits(spec: str | None, repo: Path, *, steps: int = 1, commits_file: str | Path | None = None) -> list[str]:
    """The full shas to measure, oldest first.

    Args:
        spec: ``A..B`` (the commits ``git rev-list --reverse --topo-order A..B`` lists: reachable from B, not from A),
            or one revision (that commit alone). ``None`` with ``commits_file``.
        repo: A directory inside the repository.
        steps: Keep every ``steps``-th commit, counted from the oldest, and always the newest.
        commits_file: A file with one revision per line (blank lines and ``#`` comments skipped), in that order.

    Raises:
        UsageError: No range and no file (or both), an unknown revision, a range with no commits, ``steps < 1``.
    """
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    if (spec is None) == (commits_file is None):
        raise UsageError("give a range (e.g. main~20..main) or --commits FILE, one of them")
    top = repo_top(repo)
    if commits_file is not None:
        path = Path(commits_file)
        try:  # a regular file only: a FIFO would block, /dev/zero never end
            lines = read_text(path).splitlines()
        except DataError as exc:
            why = str(exc).replace(f"cannot read {str(path)!r}", "").lstrip(": ")
            why = why[1:-1] if why.startswith("(") and why.endswith(")") else why
            raise UsageError(
                f"--commits {str(path)!r} cannot be read: {why}; give a text file, one revision per line"
            ) from None
        revs = [line.split("#", 1)[0].strip() for line in lines]
        shas = [resolve_commit(top, rev) for rev in revs if rev]
        if not shas:
            raise UsageError(f"--commits {str(path)!r} lists no revision")
        shas = list(dict.fromkeys(shas))
    else:
        assert spec is not None
        if "..." in spec:
            raise UsageError(f"range {spec!r}: use A..B (the commits after A up to B), not A...B")
        if ".." in spec:
            start, _, end = spec.partition("..")
            a, b = resolve_commit(top, start or "HEAD"), resolve_commit(top, end or "HEAD")
            out = _git(["rev-list", "--reverse", "--topo-order", f"{a}..{b}"], top)
            shas = out.split()
            if not shas:
                raise UsageError(f"range {spec!r} holds no commits ({end or 'HEAD'} has no commit that {start} lacks)")
        else:
            shas = [resolve_commit(top, spec)]
    if steps > 1:
        picked = shas[::steps]
        if picked[-1] != shas[-1]:
            picked.append(shas[-1])
        shas = picked
    return shas


def commit_infos(shas: list[str], repo: Path) -> dict[str, CommitInfo]:
    """Committer time and subject of each commit (one ``git show`` per 200 commits)."""
    top = repo_top(repo)
    out: dict[str, CommitInfo] = {}
    for i in range(0, len(shas), 200):
        chunk = shas[i : i + 200]
        text = _git(["show", "-s", "--format=%H%x1f%ct%x1f%s%x1e", *chunk], top)
        for entry in text.split("\x1e"):
            parts = entry.strip().split("\x1f")
            if len(parts) == 3:
                sha, time, subject = parts
                out[sha] = CommitInfo(sha=sha, time=int(time) if time.isdigit() else None, subject=subject)
    return out


@dataclass(frozen=True)
class Measured:
    """What one run command measures: its benchmark's name and the parameters the command sets.

    ``params`` holds only what the command line sets; a record's parameters also hold every default, so a record
    belongs to this command when it agrees on each key both have (:meth:`matches`).
    """

    benchmark: str
    params: dict[str, Any]
    script: str | None = None  # ``profile``: the script's path (relative to the run's directory), to tell it absent

    def absent_in(self, message: str) -> bool:
        """Whether a failed run's message says the benchmark (or the profiled module) does not exist at that commit.

        An unknown benchmark while a suite failed to load (a syntax error, a failing import) is a failure: the
        benchmark may well be in the suite that broke.
        """
        if self.benchmark.startswith("-m "):
            return f"No module named '{self.benchmark[3:]}'" in message
        return f"unknown benchmark {self.benchmark!r}" in message and "failed to load" not in message

    def matches(self, benchmark: str, params: dict[str, Any]) -> bool:
        """Whether a record of ``benchmark`` with ``params`` was made by this command."""
        if benchmark != self.benchmark:
            return False
        return all(_same(params[k], v) for k, v in self.params.items() if k in params)


def _same(recorded: Any, given: Any) -> bool:
    if isinstance(given, bool) or isinstance(recorded, bool):
        return str(recorded).lower() == str(given).lower()
    if str(recorded) == str(given):
        return True
    try:
        return float(recorded) == float(given)
    except (TypeError, ValueError):
        return False


def _typed(text: str) -> Any:
    """A command-line value as a record's parameter holds it: an int, a float, a bool, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def measured_by(args: list[str]) -> Measured:
    """The benchmark and parameters of ``args`` (a command from :func:`split_run_args`, seed taken out)."""
    command, rest = args[0], args[1:]
    if command == "profile":
        cut = rest.index("--") if "--" in rest else len(rest)
        opts, script = rest[:cut], rest[cut + 1 :]
        seed_arg = ""
        for i, a in enumerate(opts):
            if a == "--seed-arg" and i + 1 < len(opts):
                seed_arg = opts[i + 1]
            elif a.startswith("--seed-arg="):
                seed_arg = a.split("=", 1)[1]
        if script and Path(script[0]).name.startswith("python"):
            script = script[1:]
        if script[:1] == ["-m"] and len(script) > 1:
            name, target_args, path = f"-m {script[1]}", script[2:], None
        else:
            name, target_args, path = (script[0], script[1:], script[0]) if script else ("", [], None)
        return Measured(name, {"command": shlex.join([name, *target_args]), "seed_arg": seed_arg}, path)
    bench, params = (rest[0] if rest else ""), {}
    i = 1
    while i < len(rest):
        a = rest[i]
        if a.startswith("--"):
            key, eq, value = a[2:].partition("=")
            if eq:
                params[key.replace("-", "_")] = _typed(value)
            elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                params[key.replace("-", "_")] = _typed(rest[i + 1])
                i += 1
            else:
                params[key.replace("-", "_")] = True
        i += 1
    if ":" in bench:  # FILE.py:function: its records carry the function's benchmark name
        bench = bench.rsplit(":", 1)[1].replace("_", "-").strip("-")
    return Measured(bench, params)


@dataclass
class HistoryRun:
    """What :func:`run_history` did.

    Attributes:
        commits: Every commit planned, oldest first.
        measured: Commits measured now.
        skipped: Commits the store already held (measured, or a gap) for this machine, benchmark and parameters.
        gaps: Gaps recorded now.
        records: Records added now.
        machine: This machine's id.
        warmup: Untimed repeats each commit's run made first (left out of the history).
    """

    commits: list[str]
    machine: str
    warmup: int = 0
    measured: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    records: int = 0


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def failure_line(exc: SideFailed) -> str:
    """What a failed run said, in one line, without the paths of its (removed) temporary store."""
    last = exc.last.removeprefix("rlbench: error: ")
    last = re.sub(r"[;,]? *(traceback|records?|report) (in|kept in|at) /\S+", "", last)
    return _one_line(f"exited {exc.returncode}: {last}")


def _stamp(records: list[Record], info: CommitInfo, machine: dict[str, Any], repo_name: str) -> list[Record]:
    """Make each record say the commit it measured and the machine it ran on (see the module's docstring)."""
    for r in records:
        fp = dict(r.fingerprint or {})
        git = dict(fp.get("git") or {})
        if git.get("commit") != info.sha:
            if git.get("commit"):
                fp["recorded_git"] = git
            git = {"commit": info.sha, "dirty": False, "repo": repo_name}
        git.update({"time": info.time, "subject": info.subject, "dirty": False})
        fp["git"] = git
        recorded = fp.get("machine") or {}
        if recorded.get("id") != machine.get("id"):
            if recorded:
                fp["recorded_machine"] = recorded
            fp["machine"] = machine
        r.fingerprint = fp
    return records


def run_history(
    commits: list[str],
    run_argv: list[str],
    store: HistoryStore,
    repo: Path,
    *,
    repeats: int = 3,
    retry_gaps: bool = False,
    on_commit: Callable[[int, CommitInfo, str], None] | None = None,
    warmup: int | None = None,
) -> HistoryRun:
    """Measure ``run_argv`` at each of ``commits`` (from :func:`resolve_commits`), oldest first, into ``store``.

    Args:
        commits: Full shas.
        run_argv: ``["run", BENCH, options...]`` or ``["profile", options..., "--", "python", "x.py", ...]``.
        store: The history.
        repo: A directory inside the repository (the runs start from its counterpart in each checkout).
        repeats: Repeats per commit.
        retry_gaps: Measure again the commits the store holds as gaps (a fixed flaky failure); else they are skipped.
        on_commit: Called with (index, commit, event), event ``measuring``, ``measured``, ``skipped``, ``absent``
            or ``failed`` (progress display).
        warmup: Untimed repeats each run makes first, in the same process, left out of the history (``None``:
            :func:`rlbench.analysis.ab.warmup_for`'s default, 1 for ``run``, 0 for ``profile``).

    Raises:
        UsageError: A bad command or ``repeats``. KeyboardInterrupt: Ctrl-C or SIGTERM (finished commits are in the
        store; the worktrees are gone).
    """
    from rlbench.results.fingerprint import machine_fingerprint
    from rlbench.results.store import read_records

    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}")
    args, seed = split_run_args(run_argv, "history run")
    warm = warmup_for(args, warmup)
    what = measured_by(args)
    if not what.benchmark:
        raise UsageError("the command after `--` names no benchmark or script")
    machine = machine_fingerprint()
    mid = str(machine.get("id"))
    top = repo_top(repo)
    store.check_writable(mid)  # a link or FIFO where a store file belongs: refused before anything is measured
    infos = commit_infos(commits, top)
    done = {r.fingerprint.get("git", {}).get("commit") for r in store.records(mid) if what.matches(r.benchmark, r.params)}
    if not retry_gaps:
        done |= {g.commit for g in store.gaps(mid) if what.matches(g.benchmark, g.params)}
    result = HistoryRun(list(commits), mid, warm)
    with Worktrees(repo, "history") as wt:
        assert wt.work is not None
        for i, sha in enumerate(commits):
            info = infos.get(sha) or CommitInfo(sha=sha, time=None, subject=None)
            if sha in done:
                result.skipped.append(sha)
                if on_commit:
                    on_commit(i, info, "skipped")
                continue
            if on_commit:
                on_commit(i, info, "measuring")
            name = sha[:12]
            gap: Gap | None = None
            out = wt.work / f"store-{name}"
            try:
                checkout = wt.add(name, sha)
                gap = _absent(checkout, what, mid)
                if gap is None:
                    run_side(checkout, args, seed, out, repeats=warm + repeats)
                    timed = [r for r in read_records(out) if r.repeat >= warm]  # the warm-up repeats stay out
                    records = _stamp(timed, info, machine, top.name)
            except SideFailed as exc:
                status = "absent" if what.absent_in(exc.message) else "failed"
                gap = Gap(mid, sha, what.benchmark, dict(what.params), status, failure_line(exc))
            except UsageError as exc:  # the checkout itself failed (submodules), or the run's directory is missing
                status = "absent" if "has no directory" in str(exc) else "failed"
                gap = Gap(mid, sha, what.benchmark, dict(what.params), status, _one_line(str(exc)))
            finally:
                wt.remove(name)
            try:
                if gap is not None:
                    store.add_gap(gap)
                    result.gaps.append(gap)
                else:
                    added = store.add_records(records)
                    result.measured.append(sha)
                    result.records += int(getattr(added, "added", len(records)))
                store.add_commits([info])
            except StoreError as exc:  # a full disk, a read-only store: say what this run saved before it
                kept = _keep_unsaved(out, name) if gap is None and sha not in result.measured else ""
                raise StoreError(f"{exc}; {saved_so_far(result)}{kept}") from None
            finally:
                shutil.rmtree(out, ignore_errors=True)  # in the history now (or never): TMPDIR holds one commit at most
            if on_commit:
                on_commit(i, info, gap.status if gap is not None else "measured")
    return result


def saved_so_far(result: HistoryRun) -> str:
    """What a history run that stops now has saved, naming the commits (for its one-line error)."""

    def named(shas: list[str]) -> str:
        shown = ", ".join(s[:12] for s in shas[:5])
        return shown + (f" and {len(shas) - 5} more" if len(shas) > 5 else "")

    gaps = [g.commit for g in result.gaps]
    if not result.measured and not gaps:
        return "this run saved no commit before it (the store holds what it held)"
    parts = [f"{len(result.measured)} commit(s) measured ({named(result.measured)})"] if result.measured else []
    parts += [f"{len(gaps)} gap(s) ({named(gaps)})"] if gaps else []
    return f"this run saved {' and '.join(parts)} before it; the same command resumes after them"


def _keep_unsaved(out: Path, name: str) -> str:
    """Move the records of a commit the history could not take out of the work directory (removed on exit), to
    ``.rlbench/history-unsaved-<commit>`` in the current directory; the end of the error message saying where."""
    dest = Path.cwd() / ".rlbench" / f"history-unsaved-{name}"
    n = 0
    while dest.exists():
        n += 1
        dest = dest.with_name(f"history-unsaved-{name}-{n}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), str(dest))
    except OSError:
        shutil.rmtree(dest, ignore_errors=True)
        return f"; the records of {name} could not be kept either"
    return f"; the records of {name} are kept in {dest} (`rlbench history add {dest}` adds them)"


def _absent(checkout: Checkout, what: Measured, machine: str) -> Gap | None:
    """A gap when the profiled script is not in this commit (a run's unknown benchmark is told by its message)."""
    if what.script is None:
        return None
    if (checkout.cwd / what.script).is_file():
        return None
    return Gap(
        machine,
        checkout.sha,
        what.benchmark,
        dict(what.params),
        "absent",
        f"{what.script} does not exist at {checkout.sha[:12]}",
    )

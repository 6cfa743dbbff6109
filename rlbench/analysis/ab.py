"""``rlbench ab``: run two git revisions' own code, interleaved, on the same machine, then compare.

Each revision is checked out in a temporary ``git worktree`` and run with that worktree first on
``PYTHONPATH``. In rlbench's own repository, ``python -m rlbench`` then imports the revision's rlbench (using the
current environment's dependencies). In a user's repository (no ``rlbench/`` package at its top), the installed
rlbench runs the revision's code from the worktree, in the directory ``ab`` was started from: ``-- profile -- python
train.py`` profiles that revision's ``train.py``, and ``-- run my-bench`` finds that revision's ``./suites/``.

Rounds interleave the sides, alternating which goes first
(A B, B A, A B, ...), and round ``k`` runs both sides with seed ``seed + k``: comparisons are paired
by seed, so slow drifts of a shared machine cancel out instead of passing for regressions.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rlbench.core.children import pid_alive, remove_orphan_dirs, run_child, signals_deferred
from rlbench.core.errors import RlbenchError, UsageError
from rlbench.results.records import Record

_MANAGED = ("--store", "--report", "--repeats", "--json", "--quiet", "--pyinstrument", "--profile")  # --profile: its old name


def _git(args: list[str], cwd: Path) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    except OSError as exc:
        raise UsageError(f"git is needed for rlbench ab ({exc})") from None
    if out.returncode != 0:
        said = ((out.stderr or out.stdout).strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise UsageError(f"git {' '.join(args)} failed: {said}")
    return out.stdout.strip()


def split_run_args(run_argv: list[str], what: str = "ab") -> tuple[list[str], int]:
    """Validate ``run BENCH [options]`` or ``profile [options] -- python train.py ...`` and take its ``--seed`` out.

    Rounds use ``seed + k`` (for ``profile``, the seed its ``--seed-arg`` template fills in). ``what`` names the
    command in messages (``ab``, ``history run``, ``bisect``).

    Raises:
        UsageError: If it is neither command, or sets an option ab manages itself.
    """
    if not run_argv or run_argv[0] not in ("run", "profile") or len(run_argv) < 2:
        example = "rlbench ab main" if what == "ab" else f"rlbench {what} ..."
        raise UsageError(
            f"rlbench {what} needs the command to {'compare' if what == 'ab' else 'measure'} after `--`, e.g. "
            f"`{example} -- run ppo-cartpole` or `{example} -- profile -- python train.py`"
        )
    command = run_argv[0]
    rest = run_argv[1:]
    tail: list[str] = []
    if command == "profile":  # options of profile first; the script's own arguments are not ours
        from rlbench.profiling.launcher import split_command

        rest, script = split_command(rest)
        tail = ["--", *script]
    args, seed, i = [command], 0, 0
    while i < len(rest):
        a = rest[i]
        if a in _MANAGED or a.split("=")[0] in _MANAGED:
            raise UsageError(f"`{a}` is set by rlbench {what} itself; leave it out of the {command} command")
        if a == "--seed" or a.startswith("--seed="):
            value = a.split("=", 1)[1] if "=" in a else (rest[i + 1] if i + 1 < len(rest) else "")
            try:
                seed = int(value)
            except ValueError:
                raise UsageError(f"--seed expects an integer, got {value!r}") from None
            i += 1 if "=" in a else 2
            continue
        args.append(a)
        i += 1
    return [*args, *tail], seed


def warmup_for(args: list[str], warmup: int | None) -> int:
    """The untimed repeats each run makes before its timed ones (``--warmup``; ``None``: the default).

    By default 1 for ``run``: its repeats share one process, and the first call of a benchmark in a fresh process pays
    one-time costs (imports, caches, the scheduler placing it), 10-30% of a short benchmark beside a busy neighbour. 0
    for ``profile``: it runs every repeat in a fresh process, which a warm-up repeat would not warm.

    Raises:
        UsageError: A negative ``warmup``.
    """
    if warmup is None:
        return 0 if args[0] == "profile" else 1
    if warmup < 0:
        raise UsageError(f"--warmup must be at least 0, got {warmup}")
    return warmup


def warmup_note(args: list[str], warmup: int) -> str:
    """One line saying how each run was warmed before its timed repeats (for the output's notes)."""
    if warmup:
        return (
            f"warm-up: each run made {warmup} untimed repeat(s) of the same command first, in the same process, left out "
            "of the comparison (--warmup 0 turns this off)"
        )
    if args[0] == "profile":
        return "warm-up: none (`profile` runs every repeat in a fresh process, which a warm-up repeat would not warm)"
    return "warm-up: none (--warmup 0): each run's first timed repeat paid its process's one-time costs"


def uncommitted_changes(repo: Path) -> list[str]:
    """Tracked files with uncommitted changes in the checkout around ``repo`` (``ab`` measures commits, not these)."""
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], repo))
        out = _git(["status", "--porcelain", "--untracked-files=no", "--ignore-submodules=dirty"], top)
    except UsageError:
        return []
    return [line.split(maxsplit=1)[1] for line in out.splitlines() if len(line.split(maxsplit=1)) == 2]


def _init_submodules(tree: Path, top: Path, rev: str) -> None:
    """Check out the submodules of the revision in ``tree`` (a worktree has none until asked).

    Each submodule that the user's checkout already holds is cloned from there (no network); the others from their
    configured URL. Nothing is written to the repository's shared config: the URLs are given per command.

    Raises:
        UsageError: A submodule could not be checked out (its message says how to fetch it).
    """
    if not (tree / ".gitmodules").is_file():
        return
    try:
        listing = _git(["config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"], tree)
    except UsageError:
        return  # a .gitmodules without submodules
    overrides: list[str] = ["-c", "protocol.file.allow=always"]
    for line in listing.splitlines():
        key, _, path = line.partition(" ")
        name = key[len("submodule.") : -len(".path")]
        local = top / path
        if (local / ".git").exists():
            overrides += ["-c", f"submodule.{name}.url={local.resolve()}"]
    try:
        _git([*overrides, "submodule", "update", "--init", "--recursive"], tree)
    except UsageError as exc:
        raise UsageError(
            f"rlbench ab could not check out the submodules of {rev!r} in its worktree ({exc}); run "
            "`git submodule update --init --recursive` in your checkout (or fetch them) and try again"
        ) from None


def repo_top(repo: Path) -> Path:
    """The top directory of the git repository around ``repo``.

    Raises:
        UsageError: Not inside a git repository, or no git.
    """
    try:
        return Path(_git(["rev-parse", "--show-toplevel"], repo))
    except UsageError as exc:
        if "not a git repository" not in str(exc):
            raise
        raise UsageError(
            f"{str(repo)!r} is not inside a git repository: run rlbench from a checkout of the repository"
        ) from None


def resolve_commit(top: Path, rev: str) -> str:
    """The full sha of the commit ``rev`` names.

    Raises:
        UsageError: ``rev`` names no commit.
    """
    try:
        return _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], top)
    except UsageError:
        raise UsageError(f"unknown revision {rev!r}: git rev-parse finds no commit of that name") from None


@dataclass
class Checkout:
    """One revision checked out in its own worktree, and how to run rlbench on it.

    Attributes:
        rev: The revision as the user gave it (for messages).
        sha: Its full commit sha.
        tree: The worktree.
        path: ``PYTHONPATH`` entries that make ``python -m rlbench`` run that revision's code.
        cwd: Where the run starts (the worktree's copy of the directory the command was started from).
    """

    rev: str
    sha: str
    tree: Path
    path: str
    cwd: Path


_PREFIX = re.compile(r"rlbench-(?:ab|history|bisect)-(\d+)-")


class Worktrees:
    """Temporary ``git worktree`` checkouts of revisions of the repository around ``repo``, removed on exit.

    ``with Worktrees(repo) as wt: co = wt.add("base", sha, "main")``. Every worktree lives under one temporary
    directory named ``rlbench-<kind>-<pid>-*``; on exit (an error, Ctrl-C and SIGTERM included) the worktrees are
    unregistered from the user's repository and the directory removed, with both signals held until that is done. A
    run killed with SIGKILL leaves its directory behind: the next ``Worktrees`` of any kind removes it.

    Args:
        repo: A directory inside the git repository; ``run``'s working directory inside each checkout is the same
            path relative to the repository's top.
        kind: ``ab``, ``history`` or ``bisect`` (part of the temporary directory's name).
    """

    def __init__(self, repo: Path, kind: str = "ab") -> None:
        self.repo = Path(repo)
        self.kind = kind
        self.top = repo_top(self.repo)
        self.work: Path | None = None
        self._trees: dict[str, Path] = {}

    def __enter__(self) -> Worktrees:
        with worktree_lock(self.top):
            _remove_orphans(self.top)
        self.work = Path(tempfile.mkdtemp(prefix=f"rlbench-{self.kind}-{os.getpid()}-"))
        return self

    def __exit__(self, *exc: object) -> None:
        with signals_deferred(), worktree_lock(self.top):  # a second Ctrl-C or SIGTERM must not leave worktrees registered
            for tree in self._trees.values():
                if tree.exists():
                    _remove_tree(self.top, tree)
            subprocess.run(["git", "worktree", "prune"], cwd=self.top, capture_output=True, check=False)
            if self.work is not None:
                shutil.rmtree(self.work, ignore_errors=True)

    def add(self, name: str, sha: str, rev: str | None = None) -> Checkout:
        """Check out ``sha`` (with its submodules) as ``<work>/<name>``.

        Raises:
            UsageError: The checkout or its submodules failed, or the revision lacks the directory the command was
                started from (in a user's repository).
        """
        assert self.work is not None, "use Worktrees as a context manager"
        rev = rev or sha[:12]
        tree = self.work / name
        self._trees[name] = tree
        with worktree_lock(self.top):
            _git(["worktree", "add", "--detach", str(tree), sha], self.top)
        _init_submodules(tree, self.top, rev)
        if (tree / "rlbench" / "__init__.py").is_file():  # rlbench's own repository: run that revision's rlbench
            return Checkout(rev, sha, tree, _import_path(tree, self.work / f"meta-{name}"), self.work)
        # the user's repository: the installed rlbench runs that revision's code, from where the command was started
        top, here = self.top.resolve(), self.repo.resolve()
        where = here.relative_to(top) if here != top else Path()
        cwd = tree / where
        if not cwd.is_dir():
            raise UsageError(f"revision {rev!r} has no directory {str(where)!r} (where rlbench {self.kind} was started)")
        return Checkout(rev, sha, tree, str(tree), cwd)

    def remove(self, name: str) -> None:
        """Remove one worktree now (a history measures many commits: one checkout at a time on disk)."""
        tree = self._trees.pop(name, None)
        if tree is None:
            return
        with signals_deferred():
            with worktree_lock(self.top):
                _remove_tree(self.top, tree)
            shutil.rmtree(tree, ignore_errors=True)
            if self.work is not None:
                shutil.rmtree(self.work / f"meta-{name}", ignore_errors=True)


_GIT_DIRS: dict[Path, Path] = {}


@contextmanager
def worktree_lock(top: Path) -> Iterator[None]:
    """The repository's lock for rlbench's ``git worktree`` commands, held for one command.

    ``git worktree add``, ``remove``, ``list`` and ``prune`` read every worktree's administrative files, which another
    of them may be writing or deleting: two rlbench commands making worktrees in one repository at once (an ``ab`` and
    a ``history run``, two CI jobs on one checkout) broke each other's (``fatal: failed to read
    .git/worktrees/<id>/commondir``). An exclusive ``flock`` on ``rlbench-worktrees.lock`` in the repository's git
    directory, beside git's own lock files; the kernel releases it with a process that dies holding it.
    """
    path = _GIT_DIRS.get(top)
    if path is None:  # (asked once: the exit of a Ctrl-C'd run must not fail on it)
        common = Path(_git(["rev-parse", "--git-common-dir"], top))
        path = _GIT_DIRS[top] = common if common.is_absolute() else top / common
    try:
        handle = open(path / "rlbench-worktrees.lock", "a")  # noqa: SIM115 - held across the yield
    except OSError as exc:
        raise UsageError(f"cannot lock the repository's worktrees ({exc.strerror or exc}: {path})") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _remove_tree(top: Path, tree: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=top, capture_output=True, check=False)


@dataclass
class ABResult:
    """Records of both sides and where they came from."""

    base_rev: str
    head_rev: str
    base: list[Record]
    head: list[Record]
    rounds: int


def run_ab(
    base_rev: str,
    head_rev: str,
    run_argv: list[str],
    rounds: int,
    repo: Path,
    keep: Path | None = None,
    on_run: Callable[[int, str], None] | None = None,
    looks: list[int] | None = None,
    decided: Callable[[list[Record], list[Record], int], bool] | None = None,
    max_time: float | None = None,
    warmup: int = 0,
) -> ABResult:
    """Run ``run_argv`` for both revisions, ``rounds`` times each, interleaved; return both sides' records.

    With ``looks`` (ascending round counts, the last one at most ``rounds``), the records so far are handed to
    ``decided(base, head, look_index)`` each time a look's rounds are done, and the runs stop at the first look it
    returns ``True`` for (``rlbench ab --rounds auto``), or at the first look after ``max_time`` seconds.

    Args:
        base_rev: Baseline revision (anything ``git rev-parse`` accepts).
        head_rev: Candidate revision.
        run_argv: ``["run", BENCH, options...]`` or ``["profile", options..., "--", "python", "train.py", ...]``
            (without store/report/repeats/seed options).
        rounds: Runs per side.
        repo: A directory inside the git repository.
        keep: Keep the stores there instead of deleting them.
        on_run: Called with (round, side) before each run (progress display).
        warmup: Untimed repeats each run makes first, left out of the records returned.

    Raises:
        UsageError: Bad revisions or command. RlbenchError: a run failed (its last stderr line is shown).
    """
    if rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {rounds}")
    args, seed = split_run_args(run_argv)
    top = repo_top(repo)
    revs = {"base": base_rev, "head": head_rev}
    shas = {side: _git(["rev-parse", "--verify", f"{rev}^{{commit}}"], top) for side, rev in revs.items()}
    with Worktrees(repo, "ab") as wt:
        assert wt.work is not None
        sides = {side: wt.add(side, sha, revs[side]) for side, sha in shas.items()}
        stores = {side: wt.work / f"store-{side}" for side in shas}
        plan = [n for n in (looks or []) if 0 < n < rounds] + [rounds]
        done, t0 = 0, time.monotonic()
        for i, target in enumerate(plan):
            base, head = interleave(
                sides, args, seed, target - done, stores, warmup=warmup, on_run=on_run, work=wt.work, keep=keep, start=done
            )
            done = target
            if decided is not None and decided(base, head, i):
                break
            if max_time is not None and time.monotonic() - t0 > max_time:
                break
        if keep is not None:
            keep_stores(stores, keep)
        return ABResult(shas["base"], shas["head"], base, head, done)


def keep_stores(stores: dict[str, Path], keep: Path) -> None:
    """Copy both sides' stores into ``keep`` (``ab --keep``, checked before the first round).

    Raises:
        UsageError: The copy failed after all (a full disk, a folder changed meanwhile): both stores are then copied to
            ``.rlbench/ab-kept-<time>-<pid>`` in the current directory instead, and the message says where, so the
            rounds are never lost with the work directory.
    """
    from rlbench.results.outputs import check_output_dir

    try:
        check_output_dir(keep, "--keep", [f"store-{side}/" for side in stores])
        for side, store in stores.items():
            shutil.copytree(store, keep / f"store-{side}", dirs_exist_ok=True)
        return
    except (OSError, shutil.Error, UsageError) as exc:
        why = exc if isinstance(exc, UsageError) else f"--keep {str(keep)!r}: cannot copy the records ({exc})"[:300]
    spare = Path.cwd() / ".rlbench" / f"ab-kept-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    try:
        for side, store in stores.items():
            shutil.copytree(store, spare / f"store-{side}", dirs_exist_ok=True)
    except (OSError, shutil.Error) as exc:
        raise UsageError(f"{why}; copying them to {spare} failed too ({exc})"[:400]) from None
    raise UsageError(f"{why}; both sides' records are kept in {spare} instead")


def interleave(
    sides: dict[str, Checkout],
    args: list[str],
    seed: int,
    rounds: int,
    stores: dict[str, Path],
    *,
    repeats: int = 1,
    warmup: int = 0,
    on_run: Callable[[int, str], None] | None = None,
    work: Path | None = None,
    keep: Path | None = None,
    start: int = 0,
) -> tuple[list[Record], list[Record]]:
    """Run both sides ``rounds`` times, interleaved (A B, B A, ...); every run of round ``k`` uses the same seeds.

    ``sides`` and ``stores`` are keyed ``base`` and ``head``. Each run makes ``warmup + repeats`` repeats, seeds from
    ``seed + k * (warmup + repeats)``, the same on both sides, so comparisons stay paired by seed. The first ``warmup``
    repeats of each run are left out of the records returned (they pay the process's one-time costs). ``start`` numbers
    the first round (more rounds added to the same stores); the records returned are all the stores hold.

    Returns:
        The base side's and the head side's records.

    Raises:
        SideFailed: A side's run failed and ``work`` is None (the caller keeps its files).
        RlbenchError: A side's run failed: both sides' records and logs were moved out of ``work`` (to ``keep``, or
            ``.rlbench/ab-failed-*``) and the message says where. Its ``exit_code`` is 1 when the side's measured code
            failed (the run exited 1), else 2.
    """
    from rlbench.results.store import read_records

    per_run = warmup + repeats
    for k in range(start, start + rounds):
        for side in ("base", "head") if k % 2 == 0 else ("head", "base"):
            if on_run:
                on_run(k, side)
            try:
                run_side(sides[side], args, seed + k * per_run, stores[side], repeats=per_run)
            except SideFailed as exc:
                if work is None:
                    raise
                kept = _keep_after_failure(work, keep, exc, list(sides))
                where = f"kept in {kept}" if kept else "could not be copied anywhere (is the disk full?)"
                failed = RlbenchError(f"{exc.message}; records and logs of both sides {where}")
                failed.exit_code = exc.exit_code  # 1 when the side's measured code failed, as `rlbench run` says
                raise failed from None
    base, head = read_records(stores["base"]), read_records(stores["head"])
    return [r for r in base if r.repeat >= warmup], [r for r in head if r.repeat >= warmup]


class SideFailed(RlbenchError):
    """One side's run exited non-zero: its message, and its full output to keep.

    ``returncode`` and ``last`` (the last line it wrote on stderr) are the parts of the message.
    """

    def __init__(self, message: str, store: Path, output: str, returncode: int = 1, last: str = "") -> None:
        super().__init__(message)
        self.message, self.store, self.output = message, store, output
        self.returncode, self.last = returncode, last
        #: the side's measured code failed (its run exited 1): so does ab (exit 1); anything else is exit 2
        self.exit_code = 1 if returncode == 1 else 2


def _keep_after_failure(work: Path, keep: Path | None, exc: SideFailed, sides: list[str]) -> Path | None:
    """Move both sides' stores (records, tracebacks) out of the work directory before it is removed.

    They go to ``keep`` when given (or where copying there fails after all), else to ``.rlbench/ab-failed-<time>-<pid>``
    in the current directory. The failing side's whole output is saved there as ``<side>-output.log``, and every path
    the message named is rewritten to where the file now is. ``None`` when they could be copied nowhere.
    """
    from rlbench.results.outputs import write_output

    spare = Path.cwd() / ".rlbench" / f"ab-failed-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    for dest in [keep, spare] if keep is not None else [spare]:
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for side in sides:
                src = work / f"store-{side}"
                if src.is_dir():
                    shutil.copytree(src, dest / f"store-{side}", dirs_exist_ok=True)
        except (OSError, shutil.Error):
            continue
        side = exc.store.name.removeprefix("store-")
        text = exc.output.replace(str(exc.store), str(dest / exc.store.name))
        with contextlib.suppress(UsageError):  # the records are what matters; the log is a convenience
            write_output(dest / f"{side}-output.log", text, "--keep")
        exc.message = exc.message.replace(str(exc.store), str(dest / exc.store.name))
        return dest
    return None  # nowhere to copy them


def _remove_orphans(top: Path) -> None:
    """Remove what an ``rlbench ab``, ``history run`` or ``bisect`` killed with SIGKILL left behind: its worktrees in
    this repo and its directory (also one with no worktree in it: a history run killed between two commits).

    Work directories are named ``rlbench-<ab|history|bisect>-<pid>-*``; one whose process is gone is an orphan (no
    cleanup code can run after ``kill -9``, so the next command that makes worktrees does it).
    """
    lines = _git(["worktree", "list", "--porcelain"], top).splitlines()
    trees = [Path(line.split(" ", 1)[1]) for line in lines if line.startswith("worktree ")]
    for tree in trees:
        work = tree.parent
        m = _PREFIX.match(work.name)
        if not m or pid_alive(int(m.group(1))):
            continue
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=top, capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    for kind in ("ab", "history", "bisect"):  # killed between two checkouts: no worktree registered, the folder left
        remove_orphan_dirs(f"rlbench-{kind}-")
    subprocess.run(["git", "worktree", "prune"], cwd=top, capture_output=True, check=False)


_EP_SECTION = re.compile(r'^\[project\.entry-points\."rlbench\.suites"\]\s*$(?P<body>.*?)(?=^\[|\Z)', re.M | re.S)
_EP_LINE = re.compile(r'^\s*(?P<name>[\w.-]+)\s*=\s*"(?P<value>[^"]+)"\s*$', re.M)


def _import_path(tree: Path, meta: Path) -> str:
    """``PYTHONPATH`` entries that make ``python -m rlbench`` run the revision checked out in ``tree``.

    The revision's package is ``tree/rlbench``; its built-in suites are ``tree/suites``, installed as
    ``rlbench.suites`` (linked into the worktree here, which is ours and temporary). Its suites are found through
    the entry points *its* ``pyproject.toml`` declares: a minimal ``rlbench`` distribution in ``meta`` carries them
    and, first on the path, shadows the installed rlbench's metadata, so each side runs its own benchmarks.
    """
    suites, link = tree / "suites", tree / "rlbench" / "suites"
    if suites.is_dir() and not link.exists():
        link.symlink_to(suites.resolve(), target_is_directory=True)
    dist = meta / "rlbench-0.0.0+ab.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlbench\nVersion: 0.0.0+ab\n", encoding="utf-8")
    pyproject = tree / "pyproject.toml"
    section = _EP_SECTION.search(pyproject.read_text(encoding="utf-8")) if pyproject.is_file() else None
    lines = [f"{m['name']} = {m['value']}" for m in _EP_LINE.finditer(section["body"])] if section else []
    (dist / "entry_points.txt").write_text("[rlbench.suites]\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return os.pathsep.join((str(meta), str(tree)))


def run_side(checkout: Checkout, args: list[str], seed: int, store: Path, repeats: int = 1) -> None:
    """Run ``args`` (from :func:`split_run_args`) on one checked-out revision, its records going to ``store``.

    Raises:
        SideFailed: The run exited non-zero (its message, and its whole output to keep).
    """
    env = dict(os.environ)
    path = checkout.path
    env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command, rest = args[0], args[1:]
    shown = shlex.join([command, "--seed", str(seed), *rest])  # the user's command for this round, not ab's options
    ours = ["--repeats", str(repeats), "--store", str(store), "--quiet", "--report", str(store / "last-report.md")]
    if command == "profile":  # ab's options go before profile's `--`; the script and its arguments stay after it
        cmd = [sys.executable, "-m", "rlbench", "profile", "--seed", str(seed), *ours, *rest]
    else:
        cmd = [sys.executable, "-m", "rlbench", "run", *rest, "--seed", str(seed), *ours]
    proc = run_child(cmd, cwd=checkout.cwd, env=env)
    _check_side(proc, checkout.tree, cmd, shown, store)


def _check_side(proc: subprocess.CompletedProcess, tree: Path, cmd: list[str], shown: str, store: Path) -> None:
    """Raise :class:`SideFailed` (with the run's whole output) when a side's run exited non-zero."""
    if proc.returncode == 0:
        return
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    output = f"$ {shlex.join(cmd)}\n--- stdout ---\n{proc.stdout or ''}\n--- stderr ---\n{proc.stderr or ''}"
    raise SideFailed(f"run of {tree.name} ({shown}) exited {proc.returncode}: {last}", store, output, proc.returncode, last)

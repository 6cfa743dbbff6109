"""The parent side of ``rlbench profile``: run the user's script K times in child processes, write records per repeat.

Each repeat runs ``python -m rlbench.profiling.bootstrap`` in a child (the script's own output goes to the terminal,
or to stderr with ``--json``, or to a log file with ``--quiet``). A repeat's records are appended as soon as it
finishes, exactly like ``rlbench run``: a script that raises, exits non-zero, hangs past ``--timeout`` or is killed
ends the run with a one-line error, and the finished repeats stay on disk. Ctrl-C and SIGTERM end the child too.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbench.core.children import (
    ProcessWatch,
    child_pythonpath,
    end_group,
    end_stragglers,
    own_group_dying_with_parent,
    remove_orphan_dirs,
    signals_deferred,
)
from rlbench.core.errors import StoreError, UsageError, interrupt_exit_code
from rlbench.instrument.machine_load import LoadProbe
from rlbench.profiling.follow import followed_any
from rlbench.profiling.results import metric_from_dict
from rlbench.profiling.session import Settings
from rlbench.results.fingerprint import (
    machine_fingerprint,
    no_git,
    repo_state,
    software_fingerprint,
    with_gpus,
)
from rlbench.results.metrics import PROFILE_CHILD_WALL_S, PROFILE_PLAIN_WALL_S, PROFILE_PROCESSES, Metric, load_metrics
from rlbench.results.records import definition_hash, metric_records
from rlbench.results.store import RunWriter, utc_now

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
LAUNCHERS = {"torchrun": "torch.distributed.run"}
"""Console scripts that start Python workers, run as the module behind them (their workers are followed)."""
LAUNCHER_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
"""Modules that only start and watch the processes doing the work: not a role the job waits on."""
PROFILE_VERSION = 1
MAX_SEED = 2**31 - 1  # as `rlbench run`: every seeding library accepts it


@dataclass
class Target:
    """What to run: a script or a module, with its arguments.

    Attributes:
        python: Interpreter to run it with.
        module: ``True`` for ``-m module``.
        target: Script path or module name.
        args: The script's own arguments (seed template not yet applied).
    """

    python: str
    module: bool
    target: str
    args: list[str]

    @property
    def name(self) -> str:
        """The benchmark name its records carry: the script as given, or ``-m module``."""
        return f"-m {self.target}" if self.module else self.target


def parse_command(argv: list[str]) -> Target:
    """``python train.py ARGS``, ``python -m pkg.train ARGS``, ``train.py ARGS``, ``-m pkg.train ARGS``, or
    ``torchrun ARGS`` (``-m torch.distributed.run ARGS``: the ranks it starts are followed).

    Raises:
        UsageError: When it is not a Python script or module, or the script does not exist.
    """
    if not argv:
        raise UsageError(
            "nothing to profile: `rlbench profile -- python train.py [ARGS]` (or `-- python -m pkg.train`, "
            "`-- torchrun --nproc-per-node 2 train.py`)"
        )
    python = sys.executable
    rest = list(argv)
    head = Path(rest[0]).name
    if head in LAUNCHERS:  # `torchrun ...` is `python -m torch.distributed.run ...`: its ranks are followed
        return Target(python, True, LAUNCHERS[head], rest[1:])
    if _PYTHON.match(head):
        python = _interpreter(rest[0])
        rest = rest[1:]
    if not rest:
        raise UsageError("nothing to profile after the interpreter: `rlbench profile -- python train.py [ARGS]`")
    if rest[0] == "-m":
        if len(rest) < 2 or rest[1].startswith("-"):
            raise UsageError("`-m` needs a module name: `rlbench profile -- python -m pkg.train [ARGS]`")
        return Target(python, True, rest[1], rest[2:])
    if rest[0].startswith("-"):
        raise UsageError(
            f"unsupported interpreter option {rest[0]!r}: rlbench profile runs `python SCRIPT [ARGS]` or "
            "`python -m MODULE [ARGS]`"
        )
    script = rest[0]
    if not script.endswith(".py") and not Path(script).is_file():
        raise UsageError(
            f"{argv[0]!r} is not a Python script: rlbench profile runs Python training code, "
            "`rlbench profile -- python train.py [ARGS]`"
        )
    if not Path(script).is_file():
        raise UsageError(f"no such script: {script!r} (relative to {os.getcwd()})")
    return Target(python, False, script, rest[1:])


def _interpreter(given: str) -> str:
    """The interpreter ``given`` names: rlbench's own for ``python`` / ``python3`` / its own version, else that one.

    Raises:
        UsageError: A path that is not executable, a name not on ``PATH``, or Python 2.
    """
    version = _PYTHON.match(Path(given).name)
    assert version is not None
    if version.group(1) and version.group(1).split(".")[0] != "3":
        raise UsageError(f"{given!r} is Python {version.group(1)}: rlbench profile runs Python 3 scripts (`-- python ...`)")
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if os.sep in given:  # an explicit interpreter path: use it (rlbench is put on its path)
        if not os.access(given, os.X_OK) or not Path(given).is_file():
            raise UsageError(f"interpreter {given!r} is not an executable file")
        found: str | None = given
    elif version.group(1) in (None, "3", ours):
        return sys.executable  # the Python rlbench runs in, where its hooks and the script's libraries are
    else:
        found = shutil.which(given)
    if found is None:
        raise UsageError(
            f"no {given!r} on PATH: name an installed interpreter by its path, or `python` for rlbench's own ({ours})"
        )
    try:  # a shim (pyenv) may be on PATH for a version that is not installed: it must start
        probe = subprocess.run(
            [found, "-c", "import sys; print(sys.version_info[0])"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"interpreter {given!r} does not start ({exc})") from None
    if probe.returncode != 0 or probe.stdout.strip() != "3":
        said = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[0]
        raise UsageError(f"interpreter {given!r} does not run Python 3 ({said}): name one by its path, or `python`")
    return found


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``[options] -- command`` (or ``[options] python train.py ...`` without ``--``) into the two lists."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    value_options = {"--repeats", "--seed", "--seed-arg", "--store", "--report", "--trace", "--trace-limit", "--timeout"}
    value_options |= {"--log-to", "--log-every"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-") or a == "-m":
            return argv[:i], argv[i:]
        i += 2 if a in value_options else 1
    return argv, []


@dataclass
class Options:
    """How to run the repeats.

    Attributes:
        repeats: Runs of the script.
        seed: Seed of the first repeat (repeat ``k`` uses ``seed + k``).
        seed_arg: Template appended to the script's arguments per repeat, e.g. ``"--seed {seed}"`` (``""``: none).
        timeout: Seconds a repeat may take before it is ended (``None``: no limit).
        settings: The session's settings.
        trace: Chrome trace path (repeat ``k`` > 0 gets ``-k`` before the suffix), or ``None``.
        pyinstrument: HTML path for pyinstrument's call tree (first repeat), or ``None``.
        output: ``"inherit"`` (the terminal), ``"stderr"`` (keep stdout for ``--json``) or ``"log"`` (a file per repeat).
        against_plain: Pair every repeat with a run of the same command without rlbench, in the order profiled-plain,
            plain-profiled, plain-profiled, profiled-plain (ABBA, repeating), each process timed from its start to
            its exit (:func:`plain_first`).
        follow: Follow every Python process the script starts (:mod:`rlbench.profiling.follow`); without, only the
            script's own process is profiled.
    """

    repeats: int = 1
    seed: int = 0
    seed_arg: str = ""
    timeout: float | None = None
    settings: Settings = field(default_factory=Settings)
    trace: Path | None = None
    pyinstrument: Path | None = None
    output: str = "inherit"
    against_plain: bool = False
    follow: bool = True
    tracking: dict[str, Any] | None = None
    """``--log-to`` / ``--live`` (:mod:`rlbench.profiling.tracking`): ``{"log_to", "every", "live"}``."""
    watch: Any = None
    """``--live``: ``watch(k, live_dir, follow_dir, log) -> viewer`` is started with each repeat; ``viewer.stop()``."""


def plain_first(k: int) -> bool:
    """Whether pair ``k`` of ``--against-plain`` runs the plain command first: ABBA (profiled first in pairs 0 and 3
    of every four), so that a drift of the machine in either direction weighs on both sides alike."""
    return k % 4 in (1, 2)


def seeded_args(args: list[str], seed_arg: str, seed: int) -> list[str]:
    """The script's arguments for one repeat: ``args`` plus the seed template filled in."""
    if not seed_arg:
        return list(args)
    try:
        filled = seed_arg.format(seed=seed)
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(
            f"--seed-arg {seed_arg!r}: put {{seed}} where the seed goes, e.g. '--seed {{seed}}' ({exc})"
        ) from None
    try:
        return [*args, *shlex.split(filled)]
    except ValueError as exc:  # an unclosed quote
        raise UsageError(
            f"--seed-arg {seed_arg!r} cannot be split into arguments ({exc}): quote it as a shell would, "
            "e.g. '--seed {seed}'"
        ) from None


def check_options(opts: Options) -> None:
    """Reject bad values before anything runs.

    Raises:
        UsageError: Naming the option.
    """
    if opts.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {opts.repeats}")
    if opts.seed_arg and "{seed}" not in opts.seed_arg:
        raise UsageError(f"--seed-arg {opts.seed_arg!r} has no {{seed}}: e.g. --seed-arg '--seed {{seed}}'")
    seeded_args([], opts.seed_arg, opts.seed)
    if not 0 <= opts.seed <= MAX_SEED - (opts.repeats - 1):
        raise UsageError(
            f"--seed must lie in [0, {MAX_SEED - (opts.repeats - 1)}] (repeats use seed..seed+{opts.repeats - 1}), "
            f"got {opts.seed}"
        )
    if opts.timeout is not None and not (math.isfinite(opts.timeout) and opts.timeout > 0):
        raise UsageError(f"--timeout must be positive seconds, got {opts.timeout:g}")
    if opts.repeats > 1 and not opts.seed_arg:
        print(
            "rlbench: note: no --seed-arg: every repeat runs the same command (its own seed, if any); pass e.g. "
            "--seed-arg '--seed {seed}' to vary the seed per repeat",
            file=sys.stderr,
        )


@dataclass
class ProfileOutcome:
    """What a profile produced (mirrors :class:`rlbench.run.runner.RunOutcome`)."""

    run_id: str
    records_path: Path
    repeats_done: int = 0
    metrics: list[list[Metric]] = field(default_factory=list)
    error: str | None = None
    interrupted: bool = False
    exit_code: int = 0
    logs: list[Path] = field(default_factory=list)
    cut_repeat: int | None = None
    """A repeat ended early (Ctrl-C, SIGTERM, ``--timeout``) whose measurements up to then are saved (``meta.cut``)."""
    child_s: float = 0.0
    """Wall seconds the children ran, summed over repeats (from start to exit, as this process saw them)."""
    plain_s: float = 0.0
    """Wall seconds the plain runs of ``--against-plain`` took, summed (none of it is the command's own work)."""
    child_rlbench_s: float = 0.0
    """Of which rlbench's own work in the children, outside the script (each child measures its own)."""
    record_fields: dict[str, Any] = field(default_factory=dict)
    """What :func:`metric_records` was given for the first repeat (but the metrics): the command's cost is stored
    with the same identity after the report."""
    exiting: Any = None
    """The last repeat's child, still exiting after its results were saved: :meth:`wait_child` before printing."""

    def wait_child(self) -> None:
        """Wait for the last repeat's child to exit (ending it at its deadline; on Ctrl-C, now). One whose exit ran
        past ``--timeout`` sets :attr:`error` (its measurements are saved)."""
        exiting, self.exiting = self.exiting, None
        if exiting is None:
            return
        exiting.wait()
        if exiting.late:
            self.error = f"{exiting.where} did not exit within --timeout after its run ended and was ended"


def _numbered(path: Path, k: int) -> Path:
    """Repeat ``k``'s file: ``trace-1.json`` beside ``trace.json`` (a device, ``/dev/null``, takes every repeat)."""
    from rlbench.results.outputs import is_device

    return path if k == 0 or is_device(path) else path.with_name(f"{path.stem}-{k}{path.suffix}")


def profile_params(target: Target, opts: Options) -> dict[str, Any]:
    """The case's parameters: the command without the per-repeat seed (repeats of one case differ only in seed)."""
    return {"command": shlex.join([target.name, *target.args]), "seed_arg": opts.seed_arg}


def run_profile(
    target: Target,
    opts: Options,
    writer: RunWriter,
    *,
    meta: dict[str, Any] | None = None,
    on_repeat: Any = None,
    meanwhile: Callable[[], None] | None = None,
) -> ProfileOutcome:
    """Run the repeats, writing each one's records as it finishes.

    Args:
        target: What to run.
        opts: How.
        writer: Where the records go.
        meta: Stored in every record (the command line).
        on_repeat: Called with ``(k, seed)`` before each repeat.
        meanwhile: Called once in a thread while the first repeat runs, after the fingerprint is taken (work the
            caller would otherwise do after the script: imports).
    """
    outcome = ProfileOutcome(writer.run_id, writer.path)
    params = profile_params(target, opts)
    dhash = definition_hash(target.name, PROFILE_VERSION, params)
    where = Path(target.target).resolve().parent if not target.module else Path.cwd()
    fp = _Fingerprint(where, meanwhile)  # git and package metadata are read while the first child runs, not after it
    remove_orphan_dirs("rlbench-profile-")
    with tempfile.TemporaryDirectory(prefix=f"rlbench-profile-{os.getpid()}-") as tmp:
        try:
            for k in range(opts.repeats):
                seed = opts.seed + k
                if on_repeat is not None:
                    on_repeat(k, seed)
                plain_s = None
                if opts.against_plain and plain_first(k):
                    plain_s = _run_plain(target, opts, k, seed, writer, outcome)
                    if plain_s is None:
                        break
                before = outcome.child_s
                # --against-plain times each process to its exit: no last child left exiting while the report is written
                last = k == opts.repeats - 1 and not opts.against_plain
                result = _run_repeat(target, opts, k, seed, Path(tmp), writer, outcome, fp, last=last)
                if result is None:
                    break
                child_s = outcome.child_s - before
                outcome.exiting = result.exiting
                metrics, device = [*result.metrics, *load_metrics(result.load)], result.device
                fields: dict[str, Any] = {
                    "run_id": writer.run_id,
                    "timestamp": utc_now(),
                    "benchmark": target.name,
                    "params": params,
                    "definition_hash": dhash,
                    "repeat": k,
                    "seed": seed if opts.seed_arg else None,
                    "device": device,
                    "fingerprint": with_gpus(fp.result(), result.gpus),
                    "meta": {**(meta or {}), "kind": "profile", "report": "profile", "repeats": opts.repeats},
                }
                if result.cut:  # what the repeat measured before it was ended, marked as such
                    fields["meta"]["cut"] = True
                outcome.record_fields = outcome.record_fields or fields
                records = metric_records(metrics, **fields)
                with signals_deferred():
                    try:
                        writer.write(records)
                    except StoreError as exc:
                        saved = f"repeats 0-{k - 1} are saved in {writer.path}" if k else "no repeat was saved"
                        raise StoreError(f"{exc} while saving repeat {k}; {saved}; free space or pass --store DIR") from None
                    outcome.repeats_done += 1
                    outcome.metrics.append(metrics)
                    if result.cut:
                        outcome.cut_repeat = k
                if result.interrupted is not None:
                    raise result.interrupted
                if result.cut:
                    break
                if opts.against_plain:
                    if plain_s is None:
                        plain_s = _run_plain(target, opts, k, seed, writer, outcome)
                        if plain_s is None:
                            break
                    _write_pair(writer, fields, k, plain_s, child_s)
        except KeyboardInterrupt as exc:
            outcome.interrupted = True
            outcome.exit_code = interrupt_exit_code(exc)
            if outcome.exiting is not None:  # the user's Ctrl-C ends the exiting child too
                outcome.exiting.end()
                outcome.exiting = None
        except BaseException:
            outcome.wait_child()
            raise
    return outcome


class _Fingerprint:
    """The records' fingerprint, taken in a thread (its ``git`` and package-metadata reads overlap the child), then
    ``meanwhile`` (the caller's own preparation: the CLI imports what renders the report)."""

    def __init__(self, where: Path, meanwhile: Callable[[], None] | None = None) -> None:
        self.where = where
        self.meanwhile = meanwhile
        self.value: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._take, name="rlbench-fingerprint", daemon=True)
            self.thread.start()

    def _take(self) -> None:
        # git_fingerprint's two answers, each repository read once (a script inside rlbench's own checkout)
        known: dict[str, dict[str, Any]] = {}
        user = repo_state(self.where, known)  # the user's code
        own = repo_state(Path(__file__).resolve().parent, known) or repo_state(Path(os.getcwd()), known)
        self.value = {
            "machine": machine_fingerprint(),
            "software": software_fingerprint(),
            "git": user[1] if user else no_git(),
            "rlbench_git": own[1] if own else no_git(),  # rlbench's checkout, if it runs from one
        }
        if self.meanwhile is not None:
            with contextlib.suppress(Exception):  # a preparation only: whatever failed here fails again where it counts
                self.meanwhile()

    def result(self) -> dict[str, Any]:
        self.start()
        assert self.thread is not None
        self.thread.join()
        if self.value is None:  # the thread failed: take it here, so the error shows
            self._take()
        assert self.value is not None
        return self.value


def write_child_spec(
    path: Path,
    target: Target,
    args: list[str],
    out: Path,
    settings: Settings,
    *,
    trace: Path | None = None,
    pyinstrument: Path | None = None,
    done_fd: int | None = None,
    follow: dict[str, Any] | None = None,
    tracking: dict[str, Any] | None = None,
) -> Path:
    """Write the request ``python -m rlbench.profiling.bootstrap PATH`` runs: the script, its arguments, where its
    results go, and the session's settings; ``done_fd``: a pipe the child inherits and writes one byte to once its
    results are written. Returns ``path``."""
    spec = {
        "target": target.target,
        "module": target.module,
        "args": args,
        "out": str(out),
        "settings": vars(settings),
        "trace": str(trace) if trace else None,
        "pyinstrument": str(pyinstrument) if pyinstrument else None,
        "launched": time.time(),
        "done_fd": done_fd,
        "follow": follow,
        "tracking": tracking,
    }
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def child_env() -> dict[str, str]:
    """The profiled child's environment: the working directory and this rlbench importable, output unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([child_pythonpath(), str(Path(__file__).resolve().parents[2])])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _child_output(opts: Options, writer: RunWriter, outcome: ProfileOutcome, name: str) -> tuple[Any, Any, Any]:
    """Where a child's output goes: ``(log, stdout, stderr)``. With ``--quiet`` both go to ``<run-id>-NAME.log`` in the
    store (listed in ``outcome.logs``; the caller closes ``log``); else stdout to the terminal, or to stderr under
    ``--json``, and stderr to the terminal."""
    if opts.output != "log":
        return None, (sys.stderr if opts.output == "stderr" else None), None
    log_path = writer.store / f"{writer.run_id}-{name}.log"
    outcome.logs.append(log_path)
    log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - the caller closes it, also on interruption
    return log, log, log


def _run_repeat(
    target: Target,
    opts: Options,
    k: int,
    seed: int,
    tmp: Path,
    writer: RunWriter,
    outcome: ProfileOutcome,
    fp: _Fingerprint | None = None,
    *,
    last: bool = False,
) -> _Repeat | None:
    out = tmp / f"repeat-{k}.json"
    env = child_env()
    folder, follow = None, None
    if opts.follow:  # the script's processes join the profile through this folder (rlbench.profiling.follow)
        from rlbench.profiling.follow import prepare

        folder = tmp / f"follow-{k}"
        follow = {"folder": str(folder), "env": prepare(folder, vars(opts.settings), env["PYTHONPATH"])}
    tracking = None
    if opts.tracking:  # --log-to, --live: the script's process reads its figures as it runs, and publishes them here
        live_dir = tmp / f"live-{k}"
        live_dir.mkdir(exist_ok=True)
        run_name = f"rlbench-{writer.run_id}" + (f"-{k}" if opts.repeats > 1 else "")
        tracking = {**opts.tracking, "live_dir": str(live_dir), "follow_dir": str(folder) if folder else None}
        tracking["run_name"] = run_name
    # the child writes a byte here once its results are on disk; EOF: it exited (or died) before that
    done_r, done_w = os.pipe()
    spec_path = write_child_spec(
        tmp / f"repeat-{k}.spec.json",
        target,
        seeded_args(target.args, opts.seed_arg, seed),
        out,
        opts.settings,
        trace=_numbered(opts.trace, k) if opts.trace else None,
        pyinstrument=opts.pyinstrument if k == 0 else None,
        done_fd=done_w,
        follow=follow,
        tracking=tracking,
    )
    cmd = [target.python, "-m", "rlbench.profiling.bootstrap", str(spec_path)]
    log, stdout, stderr = _child_output(opts, writer, outcome, f"repeat{k}")
    probe = LoadProbe()
    where = f"repeat {k}" + (f" (seed {seed})" if opts.seed_arg else "")
    started = time.perf_counter()
    interrupted: KeyboardInterrupt | None = None
    timed_out = False
    exiting: _Exiting | None = None
    watch: ProcessWatch | None = None
    viewer: Any = None
    try:
        # the child leads its own process group: its Pool workers and Popen children end with it, whatever ends it
        try:
            proc = subprocess.Popen(
                cmd, env=env, stdout=stdout, stderr=stderr, preexec_fn=own_group_dying_with_parent, pass_fds=(done_w,)
            )
        finally:
            os.close(done_w)
        if folder is not None:  # the script's process tree, for what never joins and what outlives the script
            watch = ProcessWatch(proc.pid, subreaper=True).start()
        if fp is not None:
            fp.start()
        if opts.watch is not None and tracking is not None:  # --live: drawn from what the processes publish
            viewer = opts.watch(k, Path(tracking["live_dir"]), folder, outcome.logs[-1] if log is not None else None)
        deadline = None if opts.timeout is None else started + opts.timeout
        try:
            signalled = _results_signalled(proc, done_r, deadline)
            # its processes write their results as they end, often after the script's own (a vector env closed at
            # exit): a profile that followed any waits for the whole tree
            if signalled and last and (folder is None or not followed_any(folder)):
                # the last repeat's results are in while its process exits (the script's atexit work, the
                # interpreter's teardown): the records and the report are written meanwhile (ProfileOutcome.wait_child)
                exiting = _Exiting(proc, deadline, where)
            else:
                proc.wait(timeout=_left(deadline))
                end_stragglers(proc.pid)  # what the script started and left running ends with its repeat
        except subprocess.TimeoutExpired:
            timed_out = True
            end_group(proc, grace_s=5.0)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM here: the child saves what it measured, then ends
            interrupted = exc
            end_group(proc, grace_s=5.0)
        except BaseException:
            end_group(proc, grace_s=5.0)
            raise
    finally:
        if viewer is not None:
            viewer.stop()
        os.close(done_r)
        outcome.child_s += time.perf_counter() - started
        if log is not None:
            log.close()
        if watch is not None:
            watch.stop()
            if exiting is None:
                watch.end_leftovers()  # a daemon that left the script's process group does not outlive the repeat
    load = probe.stop()
    if not out.is_file():
        if interrupted is not None:
            raise interrupted
        if timed_out:
            outcome.error = f"{where} ran past --timeout {opts.timeout:g} s and was ended"
            return None
        how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited {proc.returncode}"
        outcome.error = f"{where}: the script {how} before rlbench could save its measurements"
        if proc.returncode in (-2, 130):
            raise KeyboardInterrupt
        return None
    data = json.loads(out.read_text(encoding="utf-8"))
    outcome.child_rlbench_s += float(data.get("rlbench_s") or 0.0)
    if exiting is not None and data["status"] != "ok":  # nothing to write while it exits: wait for it here
        exiting.wait()
        exiting = None
    if data["status"] == "usage":  # the child could not start the script (no such module)
        raise UsageError(data["error"])
    cut = interrupted is not None or timed_out or data["status"] == "interrupted"
    if timed_out:
        outcome.error = f"{where} ran past --timeout {opts.timeout:g} s and was ended"
    elif data["status"] == "interrupted" and interrupted is None:
        interrupted = KeyboardInterrupt()  # the script itself was interrupted (SIGINT sent to it alone)
    elif data["status"] not in ("ok", "interrupted"):
        outcome.error = f"{where}: the script {data['error']}"
        return None
    if cut and not data.get("metrics"):
        if interrupted is not None:
            raise interrupted
        return None
    metrics = [metric_from_dict(d) for d in data["metrics"]]
    if (data.get("tracking") or {}).get("log_to"):  # what --log-to logged and cost (--live alone adds no record)
        from rlbench.profiling.tracking import logging_metric

        metrics.append(logging_metric(data["tracking"]))
    if folder is not None or data.get("threads"):
        metrics += _followed(data, metrics, folder, watch, opts, k)
        for m in metrics:
            if m.name == PROFILE_PROCESSES and target.module and target.target in LAUNCHER_MODULES:
                m.meta["main_is_launcher"] = True  # torchrun's agent: it starts and watches the ranks
    return _Repeat(metrics, load, str(data.get("device", "cpu")), cut, interrupted, data.get("gpus"), exiting)


def _followed(
    data: dict[str, Any], metrics: list[Metric], folder: Path | None, watch: ProcessWatch | None, opts: Options, k: int
) -> list[Metric]:
    """The repeat's other roles (the main process's threads, every followed process) as metrics, the main thread's
    waits given the roles on their other side, and the merged trace written."""
    from rlbench.profiling.roles import Collected, collect, job_steps, role_metrics

    pid = int(data.get("pid") or 0)
    collected = collect(folder, watch.seen if watch else None, main_pid=pid) if folder is not None else Collected()
    extra = role_metrics(data, collected, pid)
    job_steps(metrics, extra)
    summary = next((m for m in extra if m.name == PROFILE_PROCESSES), None)
    main_waits = summary.meta.get("main_waits", []) if summary is not None else []
    for m in metrics:
        if m.name.startswith("time/") and "wait/" in m.name:
            channels = [w for w in main_waits if m.name == f"time/{w['phase']}" or m.name.endswith("/" + w["phase"])]
            if channels:
                m.meta = {**m.meta, "channels": channels}
    if opts.trace and data.get("trace"):
        from rlbench.profiling.roles import trace_waits
        from rlbench.profiling.trace import merged_trace, write_merged_trace

        threads = data.get("threads") or []
        main = {"pid": pid, "role": "main", "threads": threads, "iteration_t": data.get("iteration_t") or []}
        t0 = (data.get("iteration_t") or [None])[0] or (threads[0].get("started") if threads else 0.0)
        trace = merged_trace(main, collected.processes, float(t0 or 0.0), waits=trace_waits([data, *collected.processes]))
        write_merged_trace(_numbered(opts.trace, k), trace)
    return extra


def _write_pair(writer: RunWriter, fields: dict[str, Any], k: int, plain_s: float, child_s: float) -> None:
    """Repeat ``k``'s pair of ``--against-plain``: both processes' walls, as records of that repeat."""
    meta = {"order": "plain first" if plain_first(k) else "profiled first"}
    metrics = [
        Metric(PROFILE_PLAIN_WALL_S, "s", "none", [plain_s], meta=meta),
        Metric(PROFILE_CHILD_WALL_S, "s", "none", [child_s], meta=meta),
    ]
    with signals_deferred():
        writer.write(metric_records(metrics, **fields))


def _run_plain(target: Target, opts: Options, k: int, seed: int, writer: RunWriter, outcome: ProfileOutcome) -> float | None:
    """Run repeat ``k``'s command without rlbench (``--against-plain``) and return its wall seconds, start to exit.

    Its output goes where the repeat's goes (a log beside it with ``--quiet``). ``None``, with ``outcome.error`` set,
    when it fails or runs past ``--timeout``; Ctrl-C and SIGTERM end it and its process group, then propagate.
    """
    args = seeded_args(target.args, opts.seed_arg, seed)
    cmd = [target.python, *(["-m", target.target] if target.module else [target.target]), *args]
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")  # as the profiled child runs (child_env)
    log, stdout, stderr = _child_output(opts, writer, outcome, f"plain{k}")
    where = f"the plain run beside repeat {k}" + (f" (seed {seed})" if opts.seed_arg else "")
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, preexec_fn=own_group_dying_with_parent)
        try:
            proc.wait(timeout=opts.timeout)
            wall = time.perf_counter() - started
            end_stragglers(proc.pid)
        except subprocess.TimeoutExpired:
            end_group(proc, grace_s=5.0)
            outcome.error = f"{where} ran past --timeout {opts.timeout:g} s and was ended"
            return None
        except BaseException:  # Ctrl-C, SIGTERM: the plain run ends with the command
            end_group(proc, grace_s=5.0)
            raise
    finally:
        outcome.plain_s += time.perf_counter() - started
        if log is not None:
            log.close()
    if proc.returncode != 0:
        how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited {proc.returncode}"
        outcome.error = f"{where}: the script {how} when run without rlbench"
        return None
    return wall


@dataclass
class _Repeat:
    """One repeat's measurements. ``cut``: it was ended early (Ctrl-C, SIGTERM, ``--timeout``) and these are what it
    measured up to then; ``interrupted``: raise it once they are saved; ``gpus``: the GPU fields of the machine
    fingerprint, from the child (rlbench's own process never imports torch)."""

    metrics: list[Metric]
    load: Any
    device: str
    cut: bool = False
    interrupted: KeyboardInterrupt | None = None
    gpus: dict[str, list[str]] | None = None
    exiting: _Exiting | None = None


def _results_signalled(proc: subprocess.Popen[Any], done_r: int, deadline: float | None) -> bool:
    """Wait until the child has written its results (True) or has exited without signalling (False).

    Raises:
        subprocess.TimeoutExpired: If neither happens by ``deadline`` (``time.perf_counter``; None: no limit).
    """
    import select

    while True:
        left = _left(deadline)
        if left == 0.0:
            raise subprocess.TimeoutExpired(proc.args, 0.0)
        # 1 s slices: the exit is seen even if something the child started holds the pipe open
        ready, _, _ = select.select([done_r], [], [], 1.0 if left is None else min(1.0, left))
        if ready:
            return os.read(done_r, 1) == b"1"
        if proc.poll() is not None:
            return False


class _Exiting:
    """A child whose results are saved and that is still exiting; :meth:`wait` reaps it (and its group's leftovers),
    ending it at the repeat's deadline or on Ctrl-C. ``late``: it was ended at the deadline."""

    def __init__(self, proc: subprocess.Popen[Any], deadline: float | None, where: str) -> None:
        self.proc, self.deadline, self.where = proc, deadline, where
        self.late = False

    def wait(self) -> None:
        try:
            self.proc.wait(timeout=_left(self.deadline))
            end_stragglers(self.proc.pid)
        except subprocess.TimeoutExpired:
            self.late = True
            self.end()
        except BaseException:
            self.end()
            raise

    def end(self) -> None:
        end_group(self.proc, grace_s=5.0)


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (``time.perf_counter``), never below 0; ``None``: no deadline."""
    return None if deadline is None else max(0.0, deadline - time.perf_counter())

"""Every Python process a profiled script starts, followed: env workers, data workers, actors, ranks, Ray workers.

How a process joins, whatever starts it:

* **A new interpreter** (``multiprocessing`` spawn and forkserver, ``subprocess`` of Python, ``torchrun``'s ranks, Ray's
  workers): ``rlbench profile`` puts a folder holding a ``sitecustomize.py`` first on ``PYTHONPATH`` and names its
  collection folder in ``RLBENCH_FOLLOW``; every Python that inherits that environment runs the hook at start-up,
  before the script's own code, and joins (:func:`from_site`). It is the route ``opentelemetry-instrument`` and
  ``ddtrace-run`` take; coverage.py's ``.pth`` route would need a file in the interpreter's own ``site-packages``. A
  ``sitecustomize`` the environment already had still runs after ours. A Python without rlbench importable (another
  interpreter) is left alone; the parent names it from the process table instead.
* **A fork** (``multiprocessing``'s fork start method, a ``Pool``'s workers, ``os.fork``): the child inherits the hooks;
  an ``os.register_at_fork`` handler clears what it inherited of its parent's measurements, and it joins as itself.

Each followed process runs a :class:`~rlbench.profiling.session.Session` over its lifetime (every thread its own
attribution) and writes its result, once, to ``<folder>/proc-<pid>-<n>.json`` when it ends: at exit (``atexit``), at the
end of a ``multiprocessing`` process's run (``BaseProcess._bootstrap``, whose ``os._exit`` skips ``atexit``), at
``os._exit`` or an ``exec``, and on SIGTERM (then it dies by that signal as it would have). A process killed outright
(SIGKILL, a segfault) writes nothing: its start marker (``start-<pid>-<n>.json``) names it, and the parent reports it as
never reported. Writing never raises into the user's code: a folder that is gone (a daemon outliving the run) is
skipped silently. :mod:`rlbench.profiling.roles` merges the files in the parent.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

SNAPSHOT_S = 0.25
"""A followed interpreter writes what it has measured so far this often while it works, and whenever it goes quiet (the
last snapshot stands for a process that is killed before it ends: Ray ends its actors so)."""
SNAPSHOT_RAY_S = 0.05
"""A Ray worker's: Ray ends it (a C++ quick exit) as soon as its owner is done with it."""
RAY_WORKER = "ray/_private/workers/default_worker.py"
SNAPSHOT_LOOK_S = 0.02
"""How often the snapshot thread looks whether anything happened (a few attribute reads)."""
FORK_SNAPSHOT_S = 0.0
"""Forked processes snapshot this often too where set (> 0): ``--log-to`` and ``--live`` read them while they run."""
FOLLOW_ENV = "RLBENCH_FOLLOW"
"""The collection folder of the profile this process belongs to (set for the script's whole process tree)."""
SETTINGS_FILE = "settings.json"
SITE_DIR = "site"

SITECUSTOMIZE = """\
# rlbench profile's start-up hook (see rlbench/profiling/follow.py), written for one run and removed with it
def _rlbench_follow():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:  # the environment's own sitecustomize, if it had one, runs too
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception:
        pass
    try:
        from rlbench.profiling.follow import from_site
    except Exception:  # another Python, without rlbench: not followed (rlbench names it from the process table)
        return
    try:
        from_site()
    except Exception:
        pass


_rlbench_follow()
del _rlbench_follow
"""

# processes that are machinery, not the job: never followed (named by their role if they report at all)
_HELPERS = (
    "multiprocessing.resource_tracker",
    "ray/dashboard",
    "ray/_private/log_monitor",
    "ray/_private/monitor",
    "ray/autoscaler",
    "ray/_private/runtime_env",
    "ray/util/client",
    "ray/_private/ray_process_reaper",
    "ray.util.client.server",
    "ray/core/src/ray/",  # Ray's own binaries: the GCS server, the raylet
    "ray::DashboardAgent",
    "ray::RuntimeEnvAgent",
)


def prepare(folder: Path, settings: dict[str, Any], pythonpath: str) -> dict[str, str]:
    """Make ``folder`` the collection folder of a profile: its settings and start-up hook. Returns the environment
    variables that make a process tree follow it: ``RLBENCH_FOLLOW``, and ``pythonpath`` (the script's) with the
    hook's folder first."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SETTINGS_FILE).write_text(json.dumps(settings), encoding="utf-8")
    site = folder / SITE_DIR
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return {FOLLOW_ENV: str(folder), "PYTHONPATH": os.pathsep.join(p for p in (str(site), pythonpath) if p)}


def followed_any(folder: Path) -> bool:
    """Whether any process joined the profile collected in ``folder`` (a start marker is there)."""
    return any(folder.glob("start-*.json"))


def helper(argv: list[str]) -> bool:
    """Whether a command line is a library's machinery (a resource tracker, a forkserver, Ray's own daemons)."""
    text = " ".join(argv)
    return any(h in text for h in _HELPERS)


def process_start() -> float:
    """When this process started, on ``time.perf_counter``'s clock (``CLOCK_MONOTONIC`` on Linux); now elsewhere."""
    now = time.perf_counter()
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return min(now, now - (boot - started_since_boot))
    except (OSError, ValueError, IndexError, AttributeError):
        return now


class Follower:
    """This process's part of a followed profile: its session, how it ends, and the result it writes."""

    current: Follower | None = None

    def __init__(self, folder: Path, session: Any, *, main: bool = False, born: float | None = None) -> None:
        self.folder = folder
        self.session = session
        self.main = main  # the profiled script's own process: its results go to rlbench's bootstrap, not the folder
        self.pid = os.getpid()
        self.born = process_start() if born is None else born
        self.flushed = False
        self.lock = threading.Lock()
        self.target: str | None = None  # a multiprocessing process's target (module.qualname), once known
        self.writing = False  # its result is being written
        self.quiet = False  # machinery that only forks the workers (a forkserver): no marker, no result
        self.signalled = 0  # a SIGTERM that came while it was: delivered once it is written
        self.overdue = False  # a SIGTERM kept that long: the next one ends the process, written or not
        self.kind = "main" if main else "python"
        self.n = _unique()

    @property
    def busy(self) -> bool:
        """Its result is being written, or a flush about to write it holds the lock."""
        return self.writing or self.lock.locked()

    # --- joining ----------------------------------------------------------------------------------------------
    def start(self, snapshot_s: float = 0.0) -> Follower:
        """Join: the start marker, the exit hooks, and (``snapshot_s`` > 0) a snapshot of the results so far every
        ``snapshot_s`` seconds, for a process killed before it can write them (Ray ends its workers so)."""
        Follower.current = self
        if not self.main:
            self._marker()
        _install_exit_hooks()
        if snapshot_s > 0:
            threading.Thread(target=self._snapshots, args=(snapshot_s,), name="rlbench-snapshot", daemon=True).start()
        return self

    def _snapshots(self, every: float) -> None:
        """Write a snapshot every ``every`` seconds while the process works, and as soon as it goes quiet (no phase
        transition for two looks, :data:`SNAPSHOT_LOOK_S` apart: a Ray actor's task has ended, and the next thing
        that comes may be its end, without warning)."""
        pid = self.pid
        path = self.folder / f"snap-{self.pid}-{self.n}.json"
        written = seen = None
        last = time.monotonic()
        while True:
            time.sleep(SNAPSHOT_LOOK_S)
            if self.flushed or os.getpid() != pid or not self.folder.is_dir():
                return
            stamp = self._stamp()
            now = time.monotonic()
            due = stamp != written and (stamp == seen or now - last >= every)
            seen = stamp
            if not due:
                continue
            written, last = stamp, now
            try:
                _write(path, snapshot(self))
            except Exception:
                if os.environ.get("RLBENCH_DEBUG"):
                    import traceback

                    traceback.print_exc()
                return

    def _stamp(self) -> tuple[float, ...]:
        """When each attributor last booked a transition: unchanged, nothing has happened since."""
        session = self.session
        stamps = [session.attributor.t] if session.attributor is not None else []
        if session.threads is not None:
            stamps += [a.t for a in list(session.threads.live.values())]
        return tuple(stamps)

    def _marker(self) -> None:
        if self.quiet:
            return
        data = {"pid": self.pid, "ppid": os.getppid(), "argv": _argv(), "born": self.born, "kind": self.kind}
        _write(self.folder / f"start-{self.pid}-{self.n}.json", data)

    def after_fork(self) -> None:
        """In a forked child: this process's own measurements from now on (what it inherited was its parent's)."""
        self.pid = os.getpid()
        self.born = time.perf_counter()
        self.flushed = self.writing = self.overdue = False
        self.signalled = 0
        self.lock = threading.Lock()
        self.main = self.quiet = False
        self.kind = "fork"
        self.n = _unique()
        self.target = None
        reset_session_after_fork(self.session)
        self._marker()
        _sigterm_flushes()
        if FORK_SNAPSHOT_S > 0:  # --log-to / --live read every process's figures as it runs (rlbench.profiling.live)
            threading.Thread(target=self._snapshots, args=(FORK_SNAPSHOT_S,), name="rlbench-snapshot", daemon=True).start()

    # --- ending -----------------------------------------------------------------------------------------------
    def flush(self, status: str, exit_code: int | None = None) -> None:
        """Stop attributing and write this process's result (once; never raises). A SIGTERM that arrives meanwhile (a
        pool terminating a worker that is already leaving) ends the process once the result is written."""
        if self.main or self.quiet or self.flushed or os.getpid() != self.pid:
            return
        # never wait for the lock: a SIGTERM handler runs in the thread it interrupted, which may hold it (a pool's
        # terminate reaching a worker as it flushes at its normal end); a flush under way writes the result
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self.flushed:
                return
            self.flushed = self.writing = True
        finally:
            self.lock.release()
        try:
            result = process_result(self, status, exit_code)
            _write(self.folder / f"proc-{self.pid}-{self.n}.json", result)
        except Exception:  # the user's process must end as it would have; the parent names it as never reported
            if os.environ.get("RLBENCH_DEBUG"):
                import traceback

                traceback.print_exc()
        finally:
            self.writing = False
            if self.signalled:
                _die(self.signalled)

    def role(self) -> str:
        """This process's role: what ``rlbench.role`` named in its main thread, a rank's, the library's own kind of
        worker, the Ray actor's class, else its entry point."""
        from rlbench.profiling.threads import ROLES

        a = self.session.attributor
        named = ROLES.get(a.thread) if a is not None else None
        return named or process_role(self.target)


def _unique() -> int:
    """A number no other follower of this pid has (an exec keeps the pid and starts the count again)."""
    return time.monotonic_ns()


def process_role(target: str | None = None) -> str:
    """The role of this process from what started it (see :meth:`Follower.role`)."""
    env = os.environ
    if env.get("RANK") and env.get("WORLD_SIZE"):
        return f"rank-{env['RANK']}"
    if target:
        known = {
            "gymnasium.vector.async_vector_env._async_worker": "env-worker",
            "stable_baselines3.common.vec_env.subproc_vec_env._worker": "env-worker",
            "torch.utils.data._utils.worker._worker_loop": "data-worker",
            "multiprocessing.pool.worker": "pool-worker",
            "torchrl.envs.batched_envs._run_worker_pipe_shared_mem": "env-worker",
            "torchrl.envs.batched_envs._run_worker_pipe_direct": "env-worker",
            "torchrl.collectors._runner._main_async_collector": "collector",
        }
        if target in known:
            return known[target]
        return _clean(target.rsplit(".", 1)[-1]) or "process"
    title = _proc_title()
    if title.startswith("ray::"):
        name = title[5:].split(".", 1)[0].split(" ", 1)[0]
        return _clean(name) if name and name != "IDLE" else "ray-worker"
    argv = sys.orig_argv if hasattr(sys, "orig_argv") else sys.argv
    args = list(argv[1:])
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args.pop(0)
    if len(args) >= 2 and args[0] == "-m":
        return _clean(args[1])
    if args and args[0] == "-c":
        return "python-c"
    if args:
        return _clean(Path(args[0]).stem) or "python"
    return "python"


def _clean(name: str) -> str:
    import re

    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-_.")[:64]
    return out if out and out[0].isalnum() else f"p{out}"[:64] if out else ""


def _proc_title() -> str:
    try:
        return Path("/proc/self/cmdline").read_bytes().split(b"\0", 1)[0].decode("utf-8", "replace")
    except OSError:
        return ""


def _argv() -> list[str]:
    return list(getattr(sys, "orig_argv", sys.argv))


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON whole or not at all; a folder that is gone (the run has ended) is no error."""
    tmp = path.with_name(path.name + ".part")
    try:
        tmp.write_text(json.dumps(data, allow_nan=False, default=_num), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, ValueError):
        try:
            tmp.unlink()
        except OSError:
            pass


def _num(v: Any) -> Any:
    if isinstance(v, float):
        return None
    return str(v)


# --- results ----------------------------------------------------------------------------------------------------
def process_result(follower: Follower, status: str, exit_code: int | None, peek: bool = False) -> dict[str, Any]:
    """Stop the session and turn every thread's attribution into metrics, with who this process was (``peek``: what
    it has measured so far, the session going on: a periodic snapshot)."""
    session = follower.session
    outcome = _peek(session) if peek else (session.outcome or session.stop(costs=False))
    role = follower.role()
    threads = thread_results(outcome, role, follower.born)
    if any(t["metrics"] for t in threads):
        from rlbench.profiling.results import metric_to_dict

        for t in threads:
            t["metrics"] = [metric_to_dict(m) for m in t["metrics"]]
    from rlbench.profiling.waits import PARTICIPANTS

    return {
        "pid": follower.pid,
        "ppid": os.getppid(),
        "role": role,
        "kind": follower.kind,
        "target": follower.target,
        "argv": _argv(),
        "born": follower.born,
        "ended": time.perf_counter(),
        "status": status,
        "exit_code": exit_code,
        "threads": threads,
        "participants": participants(PARTICIPANTS, outcome, role),
    }


def snapshot(follower: Follower) -> dict[str, Any]:
    """What this process has measured so far, raw (each thread's phase totals so far, :meth:`Attributor.peek`): cheap
    to take every fraction of a second; the parent makes metrics of it (:func:`rlbench.profiling.roles.collect`) if
    the process never writes its result."""
    from rlbench.profiling.waits import PARTICIPANTS

    outcome = _peek(follower.session)
    role = follower.role()
    threads = []
    for name, thread, a, begun in [(role, None, outcome.attribution, follower.born)] + [
        (t.role if role == "main" else f"{role}/{t.role}", t.name, t.attribution, t.started) for t in outcome.threads
    ]:
        threads.append(
            {
                "role": name,
                "thread": thread,
                "ident": a.thread,
                "begun": begun,
                "started": a.started,
                "ended": a.ended,
                "channels": [[k, side, v[0], int(v[1])] for (k, side), v in a.channels.items()],
                "raw": {
                    **raw_attribution(a),
                    **_live_fields(a),  # what `--log-to` and `--live` read of it (rlbench.profiling.live)
                },
                "metrics": [],
            }
        )
    return {
        "pid": follower.pid,
        "ppid": os.getppid(),
        "role": role,
        "kind": follower.kind,
        "target": follower.target,
        "argv": _argv(),
        "born": follower.born,
        "ended": time.perf_counter(),
        "status": "snapshot",
        "exit_code": None,
        "threads": threads,
        "participants": participants(PARTICIPANTS, outcome, role),
    }


def _live_fields(a: Any) -> dict[str, Any]:
    """A snapshot's iterations, the agent steps at its first and where its steady state began (its second iteration:
    time, steps, totals), for the live figures (:mod:`rlbench.profiling.live`)."""
    marks = a.iterations
    steady = {"t": marks[1].t, "steps": marks[1].steps, "excl": marks[1].excl} if len(marks) > 1 else None
    return {"iterations": len(marks), "start_steps": marks[0].steps if marks else 0, "steady": steady}


def _peek(session: Any) -> Any:
    """A running session's outcome so far (:meth:`Attributor.peek` of every thread)."""
    from rlbench.profiling.session import Outcome
    from rlbench.profiling.threads import ROLES, ThreadResult, thread_role

    threads = []
    if session.threads is not None:
        by_ident = {t.ident: t for t in threading.enumerate()}
        threads = list(session.threads.ended)
        for ident, a in list(session.threads.live.items()):
            t = by_ident.get(ident)
            name = ROLES.get(ident) or (thread_role(t) if t is not None else "thread")
            threads.append(
                ThreadResult(ident, t.name if t else str(ident), name, getattr(t, "native_id", None), a.peek(), a.t_begin)
            )
    return Outcome(session.attributor.peek(), {}, [], {}, threads)


def thread_results(outcome: Any, role: str, born: float, *, main_metrics: bool = True) -> list[dict[str, Any]]:
    """Every thread's attribution of a finished session as ``{"role", "thread", "ident", "metrics", ...}``: the
    session's own thread first (``thread`` None, role ``role``), then each other thread (role qualified by ``role``
    unless this is the main process, ``role == "main"``). ``main_metrics``: compute the session thread's metrics too
    (the bootstrap has them already)."""
    from rlbench.profiling.results import iteration_seconds

    out = []
    r = outcome.attribution
    first = {
        "role": role,
        "thread": None,
        "ident": r.thread,
        "begun": born,
        "started": r.started,
        "ended": r.ended,
        "channels": [[k, side, v[0], int(v[1])] for (k, side), v in r.channels.items()],
        "wait_log": r.wait_log,
        "trace": _trace(r),
        "metrics": _metrics(r, r.started - born) if main_metrics else [],
    }
    if main_metrics and not first["metrics"]:
        first["raw"] = raw_attribution(r)
    series = iteration_seconds(r, "environment")
    if series is not None:
        first["env_series"] = series
    out.append(first)
    for t in outcome.threads:
        a = t.attribution
        name = t.role if role == "main" else f"{role}/{t.role}"
        out.append(
            {
                "role": name,
                "thread": t.name,
                "ident": t.ident,
                "native_id": t.native_id,
                "begun": t.started,
                "started": a.started,
                "ended": a.ended,
                "channels": [[k, side, v[0], int(v[1])] for (k, side), v in a.channels.items()],
                "wait_log": a.wait_log,
                "trace": _trace(a),
                "metrics": _metrics(a, a.started - t.started),
            }
        )
        if not out[-1]["metrics"]:
            out[-1]["raw"] = raw_attribution(a)
    return out


def _metrics(r: Any, startup_s: float) -> list[Any]:
    """A thread's metrics, or ``[]`` where this process never imported numpy and the thread counted no iterations (a
    launcher, a ``python -c`` helper): the parent makes them of its raw totals (:func:`raw_attribution`), the same
    numbers, without a numpy import (a quarter of a second) in a process that had no other use for it."""
    if "numpy" not in sys.modules and not r.iterations:
        return []
    from rlbench.profiling.results import attribution_metrics

    return attribution_metrics(r, startup_s=startup_s)


def raw_attribution(a: Any) -> dict[str, Any]:
    """A thread's totals so far, as plain JSON: what :func:`rlbench.profiling.roles.raw_metrics` makes metrics of."""
    return {
        "excl": a.excl,
        "enters": a.enters,
        "layers": a.layers,
        "steps": a.steps,
        "sched": [None if v != v else v for v in a.sched],
        "transitions": a.transitions,
        "passthrough": a.passthrough,
        "merges": a.merges,
        "other_threads_cpu_s": a.other_threads_cpu_s,
        "other_threads": a.other_threads,
        "foreign_phases": a.foreign_phases,
        "hooks": a.hooks,
        "threads_followed": a.threads_followed,
    }


def _trace(r: Any) -> list[list[Any]]:
    return [[e.path, e.start, e.end, r.layers.get(e.path) or ""] for e in r.trace]


def participants(known: dict[str, dict[str, set[int]]], outcome: Any, role: str) -> dict[str, dict[str, list[str]]]:
    """Per channel and side, the roles of this process that used it (thread idents turned into roles)."""
    roles: dict[int, str] = {}
    for t in outcome.threads:
        roles[t.ident] = t.role if role == "main" else f"{role}/{t.role}"
    roles[outcome.attribution.thread] = role
    out: dict[str, dict[str, list[str]]] = {}
    for key, sides in known.items():
        out[key] = {side: sorted({roles.get(i, f"{role}/thread") for i in idents}) for side, idents in sides.items()}
    for ident, name in roles.items():  # a thread is the other side of a join on it (and of the futures it set)
        out.setdefault(f"thread:{os.getpid()}:{ident}", {}).setdefault("set", [])
        out[f"thread:{os.getpid()}:{ident}"]["set"] = sorted({*out[f"thread:{os.getpid()}:{ident}"]["set"], name})
    return out


# --- joining, from the start-up hook and at fork ------------------------------------------------------------------
def read_settings(folder: Path) -> dict[str, Any]:
    return json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))


def from_site() -> None:
    """The start-up hook's entry: join the profile named by ``RLBENCH_FOLLOW`` (a no-op without it, in a machinery
    process, or where the folder is gone)."""
    folder = os.environ.get(FOLLOW_ENV)
    if not folder or Follower.current is not None:
        return
    path = Path(folder)
    if not (path / SETTINGS_FILE).is_file() or helper(_argv()):
        return
    # a forkserver only forks the workers: it joins (its forks inherit the hooks) but reports nothing of its own
    quiet = any("multiprocessing.forkserver" in a for a in _argv())
    from rlbench.profiling.session import Session, Settings

    settings = read_settings(path)
    born = process_start()
    # memory is marked in the script's own process only (ops are counted in each, in its own second iteration)
    fields = {k: v for k, v in settings.items() if k in Settings.__dataclass_fields__}
    session = Session(Settings(**{**fields, "memory": False}))
    session.start()
    follower = Follower(path, session, born=born)
    follower.quiet = quiet
    every = float(settings.get("snapshot_s", SNAPSHOT_S))
    if any(RAY_WORKER in a for a in _argv()):  # Ray ends its workers outright, often right after their last task
        every = min(every, SNAPSHOT_RAY_S)
    follower.start(snapshot_s=0.0 if quiet else every)
    _sigterm_flushes()


def join_as_main(folder: Path, session: Any) -> Follower:
    """The profiled script's own process (the bootstrap) joins: its children follow, its own results are its own."""
    return Follower(folder, session, main=True).start()


_installed = False


def _install_exit_hooks() -> None:
    """How a followed process's end writes its result, installed once per process (a fork inherits them)."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_forked)
    real_exit = os._exit

    def _exit(code: int) -> None:
        f = Follower.current
        if f is not None:
            f.flush("exit", code)
        real_exit(code)

    _exit.__rlbench_wrapped__ = real_exit  # type: ignore[attr-defined]
    os._exit = _exit
    for name in ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe"):
        real = getattr(os, name, None)
        if real is None:
            continue

        def make(real: Any) -> Any:
            def exec_(*args: Any, **kwargs: Any) -> Any:
                f = Follower.current
                if f is not None:
                    f.flush("exec")
                return real(*args, **kwargs)

            exec_.__rlbench_wrapped__ = real  # type: ignore[attr-defined]
            return exec_

        setattr(os, name, make(real))
    from rlbench.profiling.autohooks import PostImport

    PostImport(  # as soon as the script imports them (a process that never does pays nothing for them)
        None,
        {
            "multiprocessing.process": ("BaseProcess", lambda _, module: _patch_multiprocessing(module)),
            "subprocess": ("Popen", lambda _, module: _patch_popen(module)),
        },
        "not following the processes of",
    ).watch()
    _patch_sigterm_handlers()


def _patch_sigterm_handlers() -> None:
    """A SIGTERM handler the process installs later (Ray's worker loop installs one that exits at once) is run after
    this process's result is written: ``signal.signal(SIGTERM, handler)`` installs ``handler`` behind a flush, and
    ``signal.getsignal`` still answers ``handler``."""
    real_signal, real_getsignal = signal.signal, signal.getsignal
    if hasattr(real_signal, "__rlbench_wrapped__"):
        return
    theirs: dict[int, Any] = {}

    def install(signum: int, handler: Any) -> Any:
        if signum != signal.SIGTERM or not callable(handler) or handler is _on_sigterm:
            theirs.pop(signum, None)
            return real_signal(signum, handler)

        def flush_first(num: int, frame: Any) -> Any:
            f = Follower.current
            if f is not None and not f.writing:
                f.flush("terminated", -num)
            return handler(num, frame)

        previous = real_signal(signum, flush_first)
        before = theirs.get(signum, previous)
        theirs[signum] = handler
        return before

    def getsignal(signum: int) -> Any:
        return theirs.get(signum) or real_getsignal(signum)

    install.__rlbench_wrapped__ = real_signal  # type: ignore[attr-defined]
    getsignal.__rlbench_wrapped__ = real_getsignal  # type: ignore[attr-defined]
    signal.signal, signal.getsignal = install, getsignal  # type: ignore[assignment]


def _patch_popen(subprocess: Any) -> None:
    """A ``subprocess`` child runs another program (or another interpreter, which joins as itself): its pid is noted
    (``exec-<pid>.json``), so the fork marker its ``preexec_fn`` left is not taken for a process that never reported."""
    real = subprocess.Popen.__init__
    if hasattr(real, "__rlbench_wrapped__"):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        f = Follower.current
        pid = getattr(self, "pid", None)
        if f is not None and pid:
            _write(f.folder / f"exec-{pid}.json", {"pid": pid, "parent": os.getpid()})

    __init__.__rlbench_wrapped__ = real  # type: ignore[attr-defined]
    subprocess.Popen.__init__ = __init__  # type: ignore[method-assign]


def _at_exit() -> None:
    f = Follower.current
    if f is not None:
        f.flush("exit", 0)


def _forked() -> None:
    f = Follower.current
    if f is not None:
        try:
            f.after_fork()
        except Exception:
            Follower.current = None  # a child rlbench could not reset is not followed; it runs as it would


def _patch_multiprocessing(mpp: Any) -> None:
    """A ``multiprocessing`` process's run: its target names its role, and its end writes its result (the process
    then leaves by ``os._exit``, which skips ``atexit``)."""
    real = mpp.BaseProcess._bootstrap
    if hasattr(real, "__rlbench_wrapped__"):
        return

    def _bootstrap(self: Any, *args: Any, **kwargs: Any) -> int:
        f = Follower.current
        if f is not None and os.getpid() == f.pid:
            f.target = _target_name(self)
        try:
            code = real(self, *args, **kwargs)
        except BaseException:
            if f is not None:
                f.flush("error", 1)
            raise
        if f is not None:
            f.flush("exit", code)
        return code

    _bootstrap.__rlbench_wrapped__ = real  # type: ignore[attr-defined]
    mpp.BaseProcess._bootstrap = _bootstrap


def _target_name(process: Any) -> str:
    target = getattr(process, "_target", None)
    if target is None:
        run = type(process).run
        return f"{type(process).__module__}.{type(process).__qualname__}" if run is not _base_run() else "process"
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', getattr(target, '__name__', 'target'))}"


def _base_run() -> Any:
    import multiprocessing.process as mpp

    return mpp.BaseProcess.run


def _sigterm_flushes() -> None:
    """SIGTERM (a pool's terminate, torchrun stopping its workers, rlbench ending the run) writes the result first,
    then ends the process by that signal, as it would have. A handler the script installs itself takes over."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        pass


def _on_sigterm(signum: int, frame: Any) -> None:
    f = Follower.current
    if f is not None:
        # interrupting the result being written (or the flush that is about to write it, holding its lock): the
        # signal is delivered when the write is done. Waiting here for that lock would wait forever: this handler
        # runs in the thread that holds it, and the pool that sent the signal would wait forever for this process.
        if f.busy and not f.overdue:
            if not f.signalled:
                threading.Thread(target=_deliver_later, args=(f, signum), name="rlbench-sigterm", daemon=True).start()
            f.signalled = signum
            return
        f.flush("terminated", -signum)
    _die(signum)


SIGTERM_GRACE_S = 10.0
"""How long a SIGTERM waits for the result being written before it ends the process anyway."""


def _deliver_later(f: Follower, signum: int) -> None:
    """A SIGTERM kept while the result was written ends the process once it is: the flush delivers it itself, and
    if the process is still here after the grace (a pool worker, SIGTERMed twice, was seen to stay blocked on its
    task queue with the signal kept: a deadlock the pool's join waited on forever), the signal is sent again and
    this time ends it."""
    deadline = time.monotonic() + SIGTERM_GRACE_S
    while f.busy and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # the flush's own delivery, when it is under way, ends the process meanwhile
    f.overdue = True
    os.kill(os.getpid(), signum)


def _die(signum: int) -> None:
    """End this process by ``signum``, as it would have ended without rlbench's handler."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def reset_session_after_fork(session: Any) -> None:
    """In a forked child: the session's attribution starts over for the one thread that survived the fork (the
    forking thread), keeping what is known of the code (paths, layers, modules, envs); other threads' are dropped."""
    from threading import get_ident

    from rlbench.profiling import waits

    ident = get_ident()
    threads = session.threads
    a = session.attributor
    if a is not None:
        a.reset_after_fork()
        if a.thread != ident:  # forked from another thread: the parent's main thread is not in this process
            a.depth = 1  # its hooks pass through; this thread's own attribution goes on as a thread's
            mine = threads.live.get(ident) if threads is not None else None
            if mine is not None:
                mine.reset_after_fork()
    if threads is not None:
        keep = {ident: threads.live[ident]} if ident in threads.live else {}
        threads.live = keep
        threads.ended = []
        threads.started = {}
        threads.lock = threading.Lock()
        for r in threads.routers:
            r.cache = {k: v for k, v in r.cache.items() if k == ident}
    session.outcome = None
    waits.PARTICIPANTS.clear()

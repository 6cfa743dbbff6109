"""In-process profiling: automatic attribution around any code, and the user's own metrics, as records.

``rlbench profile -- python train.py`` runs the script under a :class:`Session` in a child process; the same
session is available in-process::

    import rlbench
    with rlbench.session("my-ppo"):      # records go to .rlbench/<run-id>.jsonl, fingerprinted
        train()                          # env steps, inference, forward/backward/optimizer found automatically
        rlbench.record("eval_return", returns, unit="return", direction="higher")

``rlbench.record`` outside any session writes its record at once (to ``$RLBENCH_STORE`` or ``.rlbench``), so a
script can store its own metrics with machine, commit and software fingerprints without being profiled.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlbench.core.errors import MeasuredCodeFailed, StoreError, UsageError
from rlbench.profiling.attribution import INFER, SAMPLE_EVERY, Attribution, Attributor, activate
from rlbench.profiling.threads import ThreadResult, ThreadSet

if TYPE_CHECKING:
    from rlbench.profiling.autohooks import Hooks
    from rlbench.results.metrics import Metric

STORE_ENV = "RLBENCH_STORE"


@dataclass
class Settings:
    """How a session attributes.

    Attributes:
        sync: Synchronize CUDA at every phase boundary (``--sync``), so GPU work is booked to the phase that queued it.
        trace_limit: Closed phases kept for a Chrome/Perfetto trace (0: no trace).
        count_iteration: Iteration counted with torch's dispatch mode (ops, syncs, copies per phase); ``None``: none.
        memory: Record peak-RSS growth per top-level phase.
        libraries: Label Stable-Baselines3's and TorchRL's methods when the script imports them.
        sample_every: From the 512th iteration on (:data:`~rlbench.profiling.attribution.SAMPLE_FROM`), attribute one
            iteration in this many, picked by a hash of its index; the others pass their hooked calls through and
            record only their wall time and agent steps (``--all-iterations``: 1, every one). The compiled hooks do
            it, for iterations an env step or a collector's labelled rollout starts at top level (an off-policy
            loop's, one per env step).
        threads: Attribute every thread on its own (:mod:`rlbench.profiling.threads`); without, only the session's
            thread is attributed and the others' CPU seconds are summed.
    """

    sync: bool = False
    trace_limit: int = 0
    count_iteration: int | None = None
    memory: bool = True
    libraries: bool = True
    sample_every: int = SAMPLE_EVERY
    threads: bool = True


@dataclass
class Outcome:
    """A finished session: what was attributed, what the hooks cost, and the user's own metrics."""

    attribution: Attribution
    costs: dict[str, float]
    user_metrics: list[Metric] = field(default_factory=list)
    limits: dict[str, Any] = field(default_factory=dict)
    threads: list[ThreadResult] = field(default_factory=list)
    """Every other thread that made a hooked call, each with its own attribution (:mod:`rlbench.profiling.threads`)."""

    def metrics(self, startup_s: float | None = None) -> list[Metric]:
        """Every metric of the session (attribution first, then the user's)."""
        from rlbench.profiling.results import attribution_metrics

        found = attribution_metrics(self.attribution, startup_s=startup_s, costs=self.costs, limits=self.limits)
        return [*found, *self.user_metrics]


def sync_function(settings: Settings) -> Callable[[], None] | None:
    """What ``--sync`` calls at phase boundaries: CUDA's or MPS's synchronize, or ``None`` (not asked, or no GPU
    visible to torch)."""
    if not settings.sync:
        return None
    import torch

    if torch.cuda.is_available():
        return torch.cuda.synchronize
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.mps.synchronize
    return None


def install_hooks(a: Attributor, libraries: bool = True, threads: ThreadSet | None = None) -> Hooks:
    """Install every automatic hook for ``a``: gymnasium's and torch's, and with ``libraries`` the labels of
    Stable-Baselines3 and TorchRL (now if imported, else when they are); with ``threads``, every other thread's calls
    go to its own attributor. Pass the result to ``autohooks.uninstall``."""
    from rlbench.profiling.autohooks import install, uninstall
    from rlbench.profiling.libraries import install_labels
    from rlbench.profiling.waits import install_waits

    h = install(a, threads)
    try:
        install_waits(h)
        if libraries:
            install_labels(h)
    except BaseException:
        uninstall(h)
        raise
    return h


class Session:
    """Automatic attribution of everything run between :meth:`start` and :meth:`stop` (or inside ``with``)."""

    current: Session | None = None
    _claim = threading.Lock()  # makes "is a session active? then this one is" one step for every thread

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.attributor: Attributor | None = None
        self.parent: Session | None = None  # the session active in another thread when this one was opened
        self.threads: ThreadSet | None = None
        self.hooks: Any = None
        self.hooks_kind = "python"  # "compiled" where the C hooks were installed (autohooks.native_available)
        self.user_metrics: list[Metric] = []
        self.outcome: Outcome | None = None

    def start(self) -> Session:
        """Install the hooks and start attributing.

        A session opened in another thread while one is active joins it (:meth:`_join`): it reports its own thread.

        Raises:
            RuntimeError: If a session is active in this thread (sessions do not nest).
        """
        # two threads entering at once: exactly one gets the process's session, whole (the others join it once it is
        # ready: the claim is held while it starts)
        with Session._claim:
            active = Session.current
            if active is not None:
                return self._join(active)
            Session.current = self
            try:
                self._start()
            except BaseException:
                Session.current = None
                raise
        return self

    def _start(self) -> None:
        from rlbench.profiling.autohooks import native_available

        s = self.settings
        sync = sync_function(s)
        self.attributor = main = Attributor(
            sync=sync,
            trace_limit=s.trace_limit,
            count_iteration=s.count_iteration,
            memory=s.memory,
            sample_every=s.sample_every,
        )

        def thread_attributor() -> Attributor:
            # another thread's: its own phases and iterations; ops are counted and memory (the process's peak RSS)
            # marked in the session's thread only; the library knowledge is shared
            a = Attributor(
                sync=sync, trace_limit=s.trace_limit, count_iteration=None, memory=False, sample_every=s.sample_every
            )
            a.profiler_enabled, a.forward_names = main.profiler_enabled, main.forward_names
            a.rf_on = a.profiler_enabled()
            a.refresh_extras()
            return a

        self.threads = ThreadSet(main, thread_attributor) if s.threads else None
        self.hooks = install_hooks(main, libraries=s.libraries, threads=self.threads)
        self.hooks_kind = "compiled" if native_available() else "python"
        activate(main, self.threads)

    def _join(self, active: Session) -> Session:
        """A session opened in another thread than the active one's (an actor thread's own ``rlbench.session``): it
        reports that thread's attribution, which the active session's hooks keep (sessions do not nest in a thread).

        Raises:
            RuntimeError: In the active session's own thread, or where it follows no other thread (``threads=False``).
        """
        from threading import get_ident

        threads = active.threads
        a = threads.attributor(get_ident()) if threads is not None and active.attributor is not None else None
        if a is None or active.attributor is a:
            raise RuntimeError(
                "rlbench: a profiling session is already active in this thread (or its session follows no other "
                "thread); sessions do not nest: open one per thread"
            )
        self.parent, self.attributor = active, a
        return self

    def stop(self, costs: bool = True) -> Outcome:
        """Stop attributing, remove the hooks, and measure what they cost per event (``costs``; 10 ms: a followed
        process, whose result carries no costs, skips it)."""
        from rlbench.profiling.autohooks import uninstall

        assert self.attributor is not None, "stop() before start()"
        if self.parent is not None:  # a thread's session inside the active one: what this thread measured so far
            result = self.attributor.peek()
            result.hooks = self.parent.hooks_kind
            self.outcome = Outcome(result, {}, self.user_metrics, {}, [])
            return self.outcome
        threads: list[ThreadResult] = []
        try:
            result = self.attributor.finish()
            if self.threads is not None:
                threads = self.threads.close()
        finally:
            activate(None)
            Session.current = None
            uninstall(self.hooks)
        result.hooks = self.hooks_kind
        result.threads_followed = self.threads is not None
        for t in threads:
            t.attribution.hooks = self.hooks_kind
        measured = measure_costs(self.settings) if costs else {}
        self.outcome = Outcome(result, measured, self.user_metrics, measure_limits(result), threads)
        return self.outcome

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.stop()


def measure_limits(result: Attribution) -> dict[str, Any]:
    """This machine's limits for the matrix products of the counted iteration (``--count-ops``), or ``{}``."""
    if not any(result.matmuls.values()):
        return {}
    import torch

    from rlbench.instrument.roofline import machine_limits

    device = "cuda" if torch.cuda.is_initialized() else "cpu"
    return {**machine_limits(result.matmuls, device), "device": device, "threads": torch.get_num_threads()}


def measure_costs(settings: Settings, n: int = 1_000, repeats: int = 5) -> dict[str, float]:
    """Per-event cost of the hooks, in µs, measured now on this machine (minimum over ``repeats``).

    It runs once per profiled run, after the script, so its own time is part of the fixed cost per run: 1,000 calls
    per loop, best of 5, gave the same figures to about 0.01 µs as 4,000 best of 3, in 5 ms instead of 12 ms.

    ``event_us``: one automatic phase opened and closed by a hooked call at top level (wrapper, clock reads,
    booking); ``merge_us``: a hooked call that continues the phase its previous call left (see
    :data:`~rlbench.profiling.attribution.MERGE_GAP_S`); ``passthrough_us``: a hooked call nested in an open phase,
    which passes straight through; ``mark_us``: one peak-RSS reading; ``calls`` and ``repeats``: how they were
    measured (the report says so).
    """
    import resource

    from rlbench.profiling.autohooks import event_wrapper

    scratch = Attributor(count_iteration=None, memory=False, trace_limit=n * 2 if settings.trace_limit else 0)

    def noop(obj: Any, value: Any, flag: Any = None) -> None:  # hooked calls carry arguments: pack and unpack them
        return None

    first = event_wrapper(scratch, noop, "x", "other", INFER)
    second = event_wrapper(scratch, noop, "y", "other", INFER)
    half = range(n // 2)
    obj, value = object(), 1

    def bare() -> None:
        for _ in half:
            noop(obj, value, flag=True)
            noop(obj, value, flag=True)

    def alternating() -> None:
        for _ in half:
            first(obj, value, flag=True)
            second(obj, value, flag=True)

    def same() -> None:
        for _ in half:
            first(obj, value, flag=True)
            first(obj, value, flag=True)

    def marks() -> None:
        for _ in half:
            resource.getrusage(resource.RUSAGE_SELF)
            resource.getrusage(resource.RUSAGE_SELF)

    def timed(fn: Callable[[], None]) -> float:
        best = math.inf
        for _ in range(repeats):
            if scratch.trace is not None:
                scratch.trace.clear()
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        return best

    base = timed(bare)
    cost = {"event_us": timed(alternating), "merge_us": timed(same), "mark_us": timed(marks) + base}
    scratch.depth = 1
    cost["passthrough_us"] = timed(alternating)
    return {**{k: max(v - base, 0.0) / n * 1e6 for k, v in cost.items()}, "calls": float(n), "repeats": float(repeats)}


class _Expired(BaseException):
    """The time limit of a measured call passed (a ``BaseException``: the code's own ``except Exception`` lets it by)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """End the block with :class:`~rlbench.core.errors.MeasuredCodeFailed` once ``seconds`` pass (``None``/0: no limit).

    A ``SIGALRM`` timer, as the micro suites' ``--timeout``: it interrupts a Python loop or a ``time.sleep`` at once, a
    long C call when it returns. It fires again every second, should the code catch it. Only in the main thread (where
    signals arrive); elsewhere the block runs unlimited.
    """
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
            try:
                yield
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous)
    except _Expired as exc:
        raise MeasuredCodeFailed(f"did not finish within {seconds:g} s (--timeout)") from exc


def profile_call(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    *,
    device: Any = None,
    callback: Any = None,
    timeout: float | None = None,
) -> list[Metric]:
    """Run ``fn(**kwargs)`` under a session; its metrics, plus ``{name: number}`` it returns as the user's own (a
    :class:`~rlbench.results.metrics.Value` with its unit and direction, a bare number with neither).

    Used by ``@rlbench.benchmark`` benchmarks. ``device`` and ``callback`` are the runner's (unused by the
    attribution itself; a CUDA device turns on synchronized boundaries).

    Raises:
        MeasuredCodeFailed: When ``fn`` runs past ``timeout`` seconds.
        ValueError: When ``fn`` returns a metric of a name rlbench records itself, or values that are not numbers.
        UsageError: When ``RLBENCH_INJECT_DELAY`` is set: it slows rlbench's own timed phases, which a function under
            automatic attribution has none of.
    """
    from rlbench.instrument.timers import INJECT_ENV
    from rlbench.results.metrics import Metric, Value

    if os.environ.get(INJECT_ENV):
        raise UsageError(
            f"{INJECT_ENV} slows rlbench's own timed phases; an @rlbench.benchmark function has none (its phases are "
            f"found automatically), so nothing would be slowed: unset {INJECT_ENV}"
        )
    sync = getattr(device, "type", "cpu") in ("cuda", "mps")
    session = Session(Settings(sync=sync))
    t0 = time.perf_counter()
    with session, time_limit(timeout):
        returned = fn(**kwargs)
    assert session.outcome is not None
    metrics = session.outcome.metrics()
    if isinstance(returned, dict):
        who = f"{getattr(fn, '__qualname__', 'the benchmark')} returned"
        for name, value in returned.items():
            check_name(name, who)
            if isinstance(value, Value):  # declared with its unit and direction: judged by compare, gate and ab
                metrics.append(Metric(name, value.unit, value.direction, samples_of(value.value, f"{who} {name!r}")))
            else:
                metrics.append(Metric(name, "", "none", samples_of(value, f"{who} {name!r}")))
    metrics.append(Metric("profile/call_s", "s", "lower", [time.perf_counter() - t0]))
    return metrics


# --- the user's own metrics -------------------------------------------------------------------------------------
def check_name(name: object, who: str = "rlbench.record") -> None:
    """Refuse a user metric name that is not a plain name, or that rlbench records itself.

    Raises:
        ValueError: Naming the metric and what to do.
    """
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"{who}: the metric name must be a non-empty string, got {name!r}")
    from rlbench.results.metrics import OWN_METRICS, OWN_PREFIXES

    if name in OWN_METRICS or name.startswith(OWN_PREFIXES):
        raise ValueError(
            f"{who}: the metric name {name!r} is one rlbench records itself, so yours would shadow it in reports and "
            f"gates; name yours differently (e.g. 'my_{name.replace('/', '_')}')"
        )


def samples_of(value: Any, what: str) -> list[float]:
    """The samples of ``value``: one number (a float, int, NumPy scalar or 0-d tensor) or a flat sequence of them.

    Raises:
        ValueError: For a string (``"12"`` is not the samples 1 and 2), a nested sequence or anything not a number.
    """
    if isinstance(value, (str, bytes, bytearray)):
        raise ValueError(f"{what} needs numbers, got the string {value!r}")
    scalar = getattr(value, "ndim", None) == 0 or not isinstance(value, Iterable)
    items = [value] if scalar else list(value)
    out = []
    for v in items:
        if isinstance(v, (str, bytes, bytearray)) or getattr(v, "ndim", 0):
            raise ValueError(f"{what} needs one number or a flat sequence of numbers, got {value!r}")
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            raise ValueError(f"{what} needs one number or a flat sequence of numbers, got {value!r}") from None
    return out


def record(
    name: str,
    value: float | Sequence[float],
    *,
    unit: str = "",
    direction: str = "none",
    x: Sequence[float] | None = None,
) -> None:
    """Record a metric of your own (eval return, loss, ...) with the run's records.

    Inside ``rlbench profile`` or a :func:`session` it joins that run's records; elsewhere it is written at once,
    fingerprinted, to the store named by ``$RLBENCH_STORE`` (default ``.rlbench``), as benchmark = the script's name.

    Args:
        name: Metric name (``eval_return`` is the one training reports read as the learning outcome). A name rlbench
            records itself (``sps``, ``wall_s``, ``time/...``, ``profile/...``: :data:`~rlbench.results.metrics.OWN_METRICS`,
            :data:`~rlbench.results.metrics.OWN_PREFIXES`) is refused.
        value: One number (a float, int, NumPy scalar or 0-d tensor) or a flat sequence of them (a list, tuple, 1-D
            array or tensor). A string is refused.
        unit: Unit of the samples.
        direction: ``higher``, ``lower`` (which way is better) or ``none``.
        x: Optional abscissa per sample (e.g. the agent step of each eval).

    Raises:
        ValueError: On a malformed or rlbench-owned name, a bad direction or a value that is not numbers.
    """
    from rlbench.results.metrics import Metric

    check_name(name)
    if direction not in ("higher", "lower", "none"):
        raise ValueError(f"rlbench.record: direction must be 'higher', 'lower' or 'none', got {direction!r}")
    samples = samples_of(value, f"rlbench.record: {name!r}")
    xs = samples_of(x, f"rlbench.record: {name!r}'s x") if x is not None else None
    if xs is not None and len(xs) != len(samples):
        raise ValueError(f"rlbench.record: {name!r} has {len(samples)} samples but {len(xs)} x values")
    metric = Metric(name, unit, direction, samples, x=xs)
    if Session.current is not None:
        Session.current.user_metrics.append(metric)
        return
    _standalone().write([metric])


class _Standalone:
    """Records written by ``rlbench.record`` outside any session: one run file per process."""

    instance: _Standalone | None = None

    def __init__(self) -> None:
        from rlbench.results.fingerprint import fingerprint
        from rlbench.results.store import RunWriter

        self.writer = RunWriter(os.environ.get(STORE_ENV) or ".rlbench")
        self.fp = fingerprint()
        self.benchmark = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"

    def write(self, metrics: list[Metric]) -> None:
        from rlbench.results.records import definition_hash, metric_records
        from rlbench.results.store import utc_now

        params = {"script": self.benchmark}
        self.writer.write(
            metric_records(
                metrics,
                run_id=self.writer.run_id,
                timestamp=utc_now(),
                benchmark=self.benchmark,
                params=params,
                definition_hash=definition_hash(self.benchmark, 1, params),
                repeat=0,
                seed=None,
                device="cpu",
                fingerprint=self.fp,
                meta={"command": " ".join(sys.argv)},
            )
        )


def _standalone() -> _Standalone:
    if _Standalone.instance is None:
        _Standalone.instance = _Standalone()
    return _Standalone.instance


class RecordingSession(Session):
    """A :class:`Session` that writes its records when it ends: ``with rlbench.session("my-ppo"): train()``.

    Args:
        name: The benchmark name its records carry (default: the script's file name).
        store: Results store directory (default: ``$RLBENCH_STORE`` or ``.rlbench``).
        params: The case's parameters (what distinguishes this setting from others; seed excluded).
        seed: The run's seed, if any.
        settings: How to attribute.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        store: str | os.PathLike[str] | None = None,
        params: dict[str, Any] | None = None,
        seed: int | None = None,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(settings)
        self.name = name or (Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python")
        self.store = store or os.environ.get(STORE_ENV) or ".rlbench"
        self.params = dict(params or {})
        self.seed = seed
        self.records_path: Path | None = None
        self.writer: Any = None  # the store's writer, opened (and the store checked) when the session starts

    def start(self) -> RecordingSession:
        """Check the store, the name and the parameters, then start attributing: nothing wrong with them is found only
        after the training.

        Raises:
            StoreError: If the store cannot be written (a file, a read-only directory).
            ValueError: On a name, parameters or seed that records cannot hold.
            RuntimeError: If another session is active in this process.
        """
        import json

        from rlbench.results.store import RunWriter

        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"rlbench.session: the name must be a non-empty string, got {self.name!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"rlbench.session: seed must be an int or None, got {self.seed!r}")
        try:
            json.dumps(self.params, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"rlbench.session: params must be JSON numbers, strings, lists or dicts ({exc})") from None
        try:
            self.writer = RunWriter(self.store)
        except StoreError as exc:
            reason = str(exc).split("; pass --store")[0]
            raise StoreError(f"rlbench.session: {reason}; pass store= (or set ${STORE_ENV}) a writable directory") from None
        super().start()
        return self

    def __enter__(self) -> RecordingSession:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Write what was measured however the block ended (its end, ``sys.exit``, an exception, Ctrl-C), then let the
        exception, if any, go on. A block that did not end normally says so in its records' ``meta.ended``."""
        outcome = self.stop()
        ended = _how_it_ended(exc)
        try:
            self._write(outcome, ended)
        except Exception as write_error:
            if exc is None:
                raise
            # the block's own exception goes on: it says what happened to the training; this says what was lost
            print(f"rlbench: warning: the session's records were not saved: {write_error}", file=sys.stderr)

    def _write(self, outcome: Outcome, ended: str | None) -> None:
        from rlbench.results.fingerprint import fingerprint, git_fingerprint
        from rlbench.results.records import definition_hash, metric_records
        from rlbench.results.store import utc_now

        writer = self.writer
        fp = fingerprint()
        script_dir = Path(sys.argv[0]).resolve().parent if sys.argv and sys.argv[0] else None
        fp["git"] = git_fingerprint(script_dir, rlbench_first=False)
        dhash = definition_hash(self.name, 1, self.params)
        meta: dict[str, Any] = {"command": " ".join(sys.argv), "kind": "profile", "report": "profile"}
        if ended is not None:
            meta["ended"] = ended
        writer.write(
            metric_records(
                outcome.metrics(),
                run_id=writer.run_id,
                timestamp=utc_now(),
                benchmark=self.name,
                params=self.params,
                definition_hash=dhash,
                repeat=0,
                seed=self.seed,
                device="cuda" if self.settings.sync else "cpu",
                fingerprint=fp,
                meta=meta,
            )
        )
        self.records_path = writer.path


def _how_it_ended(exc: object) -> str | None:
    """``None`` for a block that ran to its end or left by ``sys.exit(0)``; else what ended it, in a few words."""
    if exc is None:
        return None
    if isinstance(exc, SystemExit):
        return None if exc.code in (0, None) else f"sys.exit({exc.code!r})"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}".rstrip(": ")


def session(
    name: str | None = None,
    *,
    store: str | os.PathLike[str] | None = None,
    params: dict[str, Any] | None = None,
    seed: int | None = None,
    sync: bool = False,
    count_ops: bool = False,
) -> RecordingSession:
    """Profile the code inside ``with rlbench.session(...)`` as ``rlbench profile`` would, and store the records.

    Args:
        name: Benchmark name of the records (default: the script's file name).
        store: Results store (default: ``$RLBENCH_STORE`` or ``.rlbench``); ``rlbench report STORE`` renders it.
        params: Parameters that identify the setting (compare and gate match runs on them).
        seed: The run's seed.
        sync: Synchronize CUDA/MPS at phase boundaries.
        count_ops: Count torch ops, syncs and copies per phase during the second iteration (a torch dispatch mode:
            that iteration runs slower and is left out of the timings).
    """
    return RecordingSession(
        name, store=store, params=params, seed=seed, settings=Settings(sync=sync, count_iteration=1 if count_ops else None)
    )

"""Running a benchmark: repeats with their seeds, records written as each repeat finishes.

The runner never renders anything; it returns a :class:`RunOutcome` that says what was written and
whether the run finished, failed or was interrupted, and the CLI decides what to print.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rlbench.core.children import signals_deferred
from rlbench.core.errors import MeasuredCodeFailed, RlbenchError, StoreError, UsageError, interrupt_exit_code
from rlbench.instrument.machine_load import LoadProbe
from rlbench.results.fingerprint import fingerprint, git_fingerprint
from rlbench.results.metrics import ITER_TIME, TIME, Metric, load_metrics
from rlbench.results.records import Record, definition_hash, metric_records
from rlbench.results.store import RunWriter, utc_now
from rlbench.run.registry import BenchmarkSpec, RunContext, display_path, resolve_target


@dataclass
class RunOutcome:
    """What a run produced.

    Attributes:
        run_id: The run's id.
        records_path: File the records were appended to.
        repeats_done: Repeats whose records are on disk.
        metrics: Metrics per finished repeat.
        error: One-line description of the exception that ended the run, if any.
        error_log: File holding that exception's traceback.
        interrupted: True when Ctrl-C or SIGTERM ended the run.
        exit_code: What the CLI exits with for an interrupted run: 130 (Ctrl-C) or 143 (SIGTERM).
    """

    run_id: str
    records_path: Path
    repeats_done: int = 0
    metrics: list[list[Metric]] = field(default_factory=list)
    error: str | None = None
    error_log: Path | None = None
    interrupted: bool = False
    exit_code: int = 0


def _pytest_file_spec(path: Path) -> BenchmarkSpec:
    """The spec that runs a user's pytest-benchmark file as a micro-benchmark (imported only for such a file)."""
    from rlbench.run.pytest_bench import file_spec

    return file_spec(path, display_path(path))


def resolve_run_target(target: str) -> BenchmarkSpec:
    """The benchmark ``rlbench run TARGET`` runs: a name, ``FILE.py[:NAME]`` or ``package.module:NAME``.

    Raises:
        UsageError: With one line saying what to do when the target cannot be run.
    """
    return resolve_target(target, pytest_file=_pytest_file_spec)


def params_of(config: Any) -> dict[str, Any]:
    """A config's parameters as a JSON-friendly dict, seed excluded (repeats of one case differ only in seed), and so
    are the settings of how rlbench runs it (``option(..., setting=True)``: an ``@rlbench.benchmark``'s ``--timeout``)."""
    out = {}
    for f in fields(config):
        if f.name == "seed" or f.metadata.get("setting"):
            continue
        v = getattr(config, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def to_records(
    spec: BenchmarkSpec,
    config: Any,
    metrics: list[Metric],
    run_id: str,
    repeat: int,
    device: str,
    fp: dict[str, Any],
    meta: dict[str, Any],
) -> list[Record]:
    """Build the records of one repeat."""
    params = params_of(config)
    dhash = definition_hash(spec.name, spec.version, {k: v for k, v in params_of(spec.config_factory()).items()})
    return metric_records(
        metrics,
        run_id=run_id,
        timestamp=utc_now(),
        benchmark=spec.name,
        params=params,
        definition_hash=dhash,
        repeat=repeat,
        seed=getattr(config, "seed", None),
        device=device,
        fingerprint=fp,
        meta={**meta, "report": spec.report},  # the kind of report these records get (rlbench.report.kinds)
    )


def run_benchmark(
    spec: BenchmarkSpec,
    config: Any,
    writer: RunWriter,
    *,
    repeats: int = 1,
    device: Any = None,
    callback_factory: Any = None,
    profiler: Any = None,
    meta: dict[str, Any] | None = None,
    first_repeat_extra: list[Metric] | None = None,
) -> RunOutcome:
    """Run ``repeats`` repeats of ``spec`` (seeds ``config.seed + k``), writing records after each.

    Exceptions from the benchmark are caught: the outcome carries a one-line error and the path of a
    traceback log next to the records. Ctrl-C stops at once; finished repeats stay on disk.

    Args:
        spec: The benchmark.
        config: Its configuration (the seed of repeat ``k`` is ``config.seed + k``).
        writer: Where records go.
        repeats: Number of repeats.
        device: Resolved torch device.
        callback_factory: ``callback_factory(repeat) -> Callback`` (e.g. a progress bar), optional.
        profiler: A pyinstrument profiler to run around the repeats, optional.
        meta: Context stored in every record (command line, ...).
        first_repeat_extra: Metrics measured outside the repeats (process start-up), stored with repeat 0.

    Returns:
        What was written and how the run ended.
    """
    outcome = RunOutcome(writer.run_id, writer.path)
    base_seed = getattr(config, "seed", 0)
    meta = dict(meta or {})
    meta.setdefault("repeats", repeats)
    fp: dict[str, Any] | None = None  # read after the first repeat: it holds the thread setting the run chose
    try:
        for k in range(repeats):
            fp = _run_repeat(
                spec,
                config,
                writer,
                k,
                base_seed + k,
                device,
                callback_factory,
                profiler,
                meta,
                first_repeat_extra if k == 0 else None,
                outcome,
                fp,
            )
            if fp is None:
                break
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (errors.Terminated), wherever it lands between repeats too
        outcome.interrupted = True
        outcome.exit_code = interrupt_exit_code(exc)
    return outcome


def _run_repeat(
    spec: BenchmarkSpec,
    config: Any,
    writer: RunWriter,
    k: int,
    seed: int,
    device: Any,
    callback_factory: Any,
    profiler: Any,
    meta: dict[str, Any],
    extra: list[Metric] | None,
    outcome: RunOutcome,
    fp: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """One repeat, its records written; returns the fingerprint used (``fp``, or a fresh one when ``None``), or
    ``None`` when the repeat failed (``outcome.error`` says why)."""
    cfg = replace(config, seed=seed) if hasattr(config, "seed") else config
    ctx = RunContext(device=device, callback=callback_factory(k) if callback_factory else None, profiler=profiler)
    probe = LoadProbe()
    try:
        if profiler is not None:
            profiler.start()
        try:
            metrics = spec.run(cfg, ctx)
        finally:
            if profiler is not None:
                profiler.stop()
    except KeyboardInterrupt:
        raise
    except RlbenchError:  # the user's input, not a failing component: exit 2 with its message
        raise
    except BaseException as exc:  # the measured code failed, however it did (SystemExit included): it is not rlbench's exit
        outcome.error = f"repeat {k} (seed {getattr(cfg, 'seed', '?')}) {failure(exc)}"
        outcome.error_log = _write_traceback(writer, exc)
        return None
    check_injection(spec, metrics)
    fp = fp if fp is not None else code_fingerprint(spec)
    metrics = [*metrics, *load_metrics(probe.stop())]  # what else the machine did during this repeat
    records = to_records(spec, cfg, [*(extra or []), *metrics], writer.run_id, k, str(device), fp, meta)
    with signals_deferred():  # the records and the count of saved repeats change together
        try:
            writer.write(records)
        except StoreError as exc:  # disk full, file size limit: say what is safe on disk
            saved = f"repeats 0-{k - 1} are saved in {writer.path}" if k else "no repeat was saved"
            raise StoreError(f"{exc} while saving repeat {k}; {saved}; free space or pass --store DIR") from None
        outcome.repeats_done += 1
        outcome.metrics.append([*(extra or []), *metrics])
    return fp


def failure(exc: BaseException) -> str:
    """What the measured code did, in words: ``raised ValueError: ...``, ``exited with sys.exit(3) instead of
    returning ...``, ``did not finish within 2 s (--timeout)``."""
    if isinstance(exc, MeasuredCodeFailed):
        return str(exc)
    if isinstance(exc, SystemExit):
        return (
            f"exited with sys.exit({'' if exc.code is None else repr(exc.code)}) instead of returning, so nothing of it "
            "was measured (a benchmark returns; raise an exception to fail it)"
        )
    return f"raised {type(exc).__name__}: {exc}"


def check_injection(spec: BenchmarkSpec, metrics: list[Metric]) -> None:
    """Refuse an ``RLBENCH_INJECT_DELAY`` phase that the repeat never timed: it would slow nothing, silently.

    Raises:
        UsageError: Naming the phase and the phases the benchmark has.
    """
    from rlbench.instrument.timers import INJECT_ENV, parse_injection, slowed_phases

    wanted = parse_injection(os.environ.get(INJECT_ENV))
    timed = {m.name.split("/", 1)[1] for m in metrics if m.name.startswith((TIME, ITER_TIME))}
    unknown = [p for p in wanted if p not in timed and p not in slowed_phases()]
    if unknown:
        shown = ", ".join(sorted(timed)[:12]) + (", ..." if len(timed) > 12 else "") if timed else "none"
        raise UsageError(
            f"{INJECT_ENV} names the phase {unknown[0]!r}, which {spec.name} does not time (its phases: {shown}); "
            f"name one of them, or unset {INJECT_ENV} (a test-only knob)"
        )


def _write_traceback(writer: RunWriter, exc: BaseException) -> Path | None:
    path = writer.store / f"{writer.run_id}.error.txt"
    try:
        path.write_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), encoding="utf-8")
    except OSError:
        print("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), file=sys.stderr)
        return None
    return path


_RLBENCH = Path(__file__).resolve().parents[1]


def measured_code_dir(spec: BenchmarkSpec) -> Path | None:
    """The folder of the measured code when it is not rlbench's own: a user suite (``./suites/x.py``), ``file.py:name``,
    an ``@rlbench.benchmark`` function, a pytest-benchmark file, or a third-party package; ``None`` for rlbench's."""
    import inspect

    files: list[Path] = []
    try:
        found = inspect.getsourcefile(inspect.unwrap(spec.run))
        if found:
            files.append(Path(found))
    except TypeError:  # a builtin or a callable object
        pass
    source = spec.source.split(" (")[0]
    if source.endswith(".py") and Path(source).is_file():  # a user's pytest-benchmark file, run by rlbench's code
        files.append(Path(source))
    for file in files:
        resolved = file.resolve()
        if _RLBENCH not in resolved.parents and (_RLBENCH.parent / "suites") not in resolved.parents:
            return resolved.parent
    return None


def code_fingerprint(spec: BenchmarkSpec) -> dict[str, Any]:
    """The record fingerprint, its ``git`` the commit of the code measured: the user's repository for the user's code
    (rlbench's own commit then kept as ``rlbench_git``), rlbench's for rlbench's benchmarks."""
    fp = fingerprint()
    where = measured_code_dir(spec)
    if where is not None:
        mine = git_fingerprint(where, rlbench_first=False)
        if mine.get("commit") is None:  # an installed third-party suite: the project it is run from
            mine = git_fingerprint(None, rlbench_first=False)
        fp["rlbench_git"], fp["git"] = fp["git"], mine
    return fp

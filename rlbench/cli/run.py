"""``rlbench run BENCHMARK``: validate everything, run the repeats, write records and the report."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from rlbench.cli.parser import Parser, add_config_options, config_overrides
from rlbench.core.errors import RlbenchError, UsageError
from rlbench.core.options import run_setting
from rlbench.results.metrics import PROFILE_SELF_S, STARTUP_S, Metric
from rlbench.run.registry import BenchmarkSpec, all_specs, display_path, user_pytest_files


def _run_help() -> str:
    rows = [(s.name, s.summary) for s in all_specs()]
    rows += [(p.stem, f"pytest-benchmark file {display_path(p)}") for p in user_pytest_files()]
    names = "\n".join(f"  {name:<16} {summary}" for name, summary in rows)
    return (
        "usage: rlbench run TARGET [options]\n\n"
        "Run a benchmark, store its records and write its bottleneck report.\n\n"
        "TARGET is a benchmark name (below; ./suites/*.py of the working directory included), or\n"
        "  path/to/file.py:NAME        NAME in that file: a BenchmarkSpec, an @rlbench.benchmark function, BENCHMARKS\n"
        "  package.module:NAME         likewise, imported with the working directory on sys.path\n"
        "  path/to/file.py             the file's one benchmark, or a pytest-benchmark file (test_*.py) timed\n"
        "                              as a micro-benchmark\n\n"
        f"benchmarks:\n{names}\n\n"
        "`rlbench run TARGET --help` lists every option of that benchmark.\n"
    )


def build_run_parser(spec: BenchmarkSpec, config: Any) -> Parser:
    """The parser of ``rlbench run <spec.name>``: run options plus one option per config field."""
    p = Parser(prog=f"rlbench run {spec.name}", description=spec.summary)
    g = p.add_argument_group("run options")
    g.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="K",
        help="repeats, seeds seed..seed+K-1; figures are medians over repeats with their spread (default: 1)",
    )
    g.add_argument(
        "--store",
        default=".rlbench",
        metavar="DIR",
        help="results store: records go to DIR/<run-id>.jsonl, written as each repeat finishes (default: .rlbench)",
    )
    g.add_argument(
        "--report",
        default=None,
        metavar="PATH",
        help="markdown bottleneck report to write; its PNG chart goes beside it (default: DIR/<run-id>.md)",
    )
    g.add_argument(
        "--pyinstrument",
        action="store_true",
        help="also record pyinstrument's call tree: HTML beside the report, top frames listed in it (as `rlbench profile "
        "--pyinstrument`)",
    )
    g.add_argument("--profile", dest="pyinstrument", action="store_true", help=argparse.SUPPRESS)  # its old name
    g.add_argument(
        "--json",
        action="store_true",
        help="print exactly one JSON object on stdout (medians over repeats, paths of records and report)",
    )
    g.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar and no summary table: one line on stderr says where the report and the records went",
    )
    g.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where repeats run: local (this process, one after another) or ray (each case a Ray task with its "
        "declared CPUs/GPUs, records streamed into the store; a case whose worker dies is retried once; needs "
        "pip install 'rlbench[ray]') (default: local)",
    )
    g.add_argument(
        "--log-to",
        default=None,
        metavar="tensorboard|wandb|mlflow[:TARGET]",
        help="log SPS and each phase's share and time per iteration every 2 s of training at most (at an iteration's end; "
        "PPO: --log-every SECONDS), on the agent-step axis, under rlbench/, into a run opened at TARGET (a log folder, a "
        "W&B project, an MLflow tracking URI); rlbench's own training loops only. Needs pip install 'rlbench[trackers]'",
    )
    if not hasattr(config, "log_every"):  # the off-policy loops' own --log-every is agent steps between progress updates
        g.add_argument(
            "--log-every",
            dest="tracker_every",
            type=float,
            default=None,
            metavar="SECONDS",
            help="with --log-to: seconds of training between two points (default: 2)",
        )
    if not hasattr(config, "address"):  # a benchmark with its own --address (grpo-pipeline) joins the cluster itself
        g.add_argument(
            "--address",
            default="",
            metavar="ADDR",
            help="with --backend ray: the Ray cluster to join (host:port, or auto); default: a local Ray, stopped after",
        )
    add_config_options(p, config)
    return p


def _since_start(t0: float) -> float:
    """Seconds since the CLI module started loading (the interpreter's own ~40 ms start is not included;
    time the whole command externally for that)."""
    return time.perf_counter() - t0


MAX_SEED = 2**31 - 1


def check_common_options(config: Any, repeats: int) -> None:
    """Checks every benchmark shares: seeds in range, no more threads than cores, a well-formed test knob.

    Raises:
        UsageError: Naming the option and the accepted range.
    """
    seed = getattr(config, "seed", 0)
    if not 0 <= seed <= MAX_SEED - repeats:
        raise UsageError(f"--seed must lie in [0, {MAX_SEED - repeats}] (repeats use seed..seed+{repeats - 1}), got {seed}")
    threads, cores = run_setting(config, "threads", 1), os.cpu_count() or 1
    if threads > cores:
        raise UsageError(
            f"--threads {threads} exceeds this machine's {cores} cores: more threads than cores measures contention, "
            f"not the code; use at most {cores}"
        )
    from rlbench.instrument.timers import INJECT_ENV, parse_injection

    try:
        parse_injection(os.environ.get(INJECT_ENV))
    except ValueError as exc:
        raise UsageError(f"{exc} (a test-only knob: unset {INJECT_ENV} for real measurements)") from None


def _check_report_path(path: Path, pyinstrument: bool = False) -> None:
    """The report and, with ``--pyinstrument``, its HTML beside it, checked before the run (see
    :func:`rlbench.results.outputs.check_outputs`)."""
    from rlbench.results.outputs import check_outputs, is_device

    html = path.with_name(path.stem + "-profile.html") if pyinstrument and not is_device(path) else None
    check_outputs([(path, "--report"), (html, "--pyinstrument's HTML")])


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[TextIO]:
    """While the block runs, everything written to standard output (the benchmark's prints, its C libraries' and its
    child processes' output: file descriptor 1 itself, and ``sys.stdout``) goes to standard error; yields a buffer
    for the one JSON object, written to the real standard output (``sys.stdout`` as it was) once the block ends."""
    out = sys.stdout
    with contextlib.suppress(OSError, ValueError):
        out.flush()
    buffer = io.StringIO()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            try:
                yield buffer
            finally:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        if buffer.getvalue():
            out.write(buffer.getvalue())
            out.flush()


def _wants_json(argv: list[str]) -> bool:
    """``--json`` among the options (before any ``--``), and no ``--help`` (which prints on stdout)."""
    opts = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in opts and not {"-h", "--help"} & set(opts)


def run_command(argv: list[str], t0: float) -> int:
    """Parse ``rlbench run`` arguments, run, and return the exit code.

    With ``--json``, standard output belongs to rlbench from the start: the benchmark's own output (at import and
    while it runs) goes to standard error, so standard output holds exactly the one JSON object.
    """
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_run_help())
        return 0
    if _wants_json(argv):
        with _stdout_to_stderr() as out:
            return _run_command(argv, t0, out)
    return _run_command(argv, t0, sys.stdout)


def _run_command(argv: list[str], t0: float, out: TextIO) -> int:
    if argv[0].startswith("-"):
        raise UsageError("missing BENCHMARK: `rlbench run BENCHMARK [options]` (see `rlbench list`)")
    from rlbench.run.runner import resolve_run_target

    spec = resolve_run_target(argv[0])
    defaults = spec.config_factory()
    parser = build_run_parser(spec, defaults)
    parser.prog = f"rlbench run {argv[0]}"  # a file or module target: its --help and errors name it as typed
    args = parser.parse_args(argv[1:])
    config = replace(defaults, **config_overrides(args, defaults))
    if hasattr(config, "validate"):
        config.validate()
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    check_common_options(config, args.repeats)
    from rlbench.core.devices import validate_device_string

    device_spec = run_setting(config, "device", "auto")
    validate_device_string(device_spec)
    if args.backend == "ray" and args.pyinstrument:
        raise UsageError("--pyinstrument records this process only: drop it with --backend ray, or run with --backend local")
    if args.address and args.backend != "ray" and not hasattr(config, "address"):
        raise UsageError("--address names a Ray cluster: add --backend ray")
    from rlbench.report.kinds import MATPLOTLIB_KINDS
    from rlbench.report.plots import ChartWorker

    # imports matplotlib on idle cycles while this process imports torch and trains; only for a kind that draws with it
    charts = ChartWorker() if spec.report in MATPLOTLIB_KINDS else None
    args.out = out
    try:
        return _run(spec, config, args, argv, device_spec, charts, t0)
    finally:
        if charts is not None:
            charts.close()


def _log_to(spec: BenchmarkSpec, args: Any) -> tuple[Any, float] | None:
    """``--log-to`` / ``--log-every`` checked before the first repeat: ``(LogTo, seconds)``, or ``None``."""
    every_given = getattr(args, "tracker_every", None)
    if not getattr(args, "log_to", None):
        if every_given is not None:
            raise UsageError("--log-every goes with --log-to: add --log-to tensorboard|wandb|mlflow[:TARGET], or leave it out")
        return None
    from rlbench.profiling.tracking import DEFAULT_EVERY_S, check_every, check_log_to, parse_log_to

    if spec.report not in ("training", "offpolicy"):
        raise UsageError(
            f"--log-to follows rlbench's own training loops (ppo-cartpole, sac-pendulum, ddpg-pendulum); {spec.name} has "
            "none: leave it out (a script of your own: rlbench profile --log-to ... -- python train.py)"
        )
    if args.backend == "ray":
        raise UsageError("--log-to logs from this process's training loop: leave out --backend ray, or --log-to")
    log_to = parse_log_to(args.log_to)
    every = check_every(every_given) if every_given is not None else DEFAULT_EVERY_S
    for note in check_log_to(log_to, os.environ):
        print(note, file=sys.stderr, flush=True)
    return log_to, every


def _run(spec: BenchmarkSpec, config: Any, args: Any, argv: list[str], device_spec: str, charts: Any, t0: float) -> int:
    from rlbench.core.devices import resolve_device

    if spec.check is not None:
        spec.check(config)  # what needs imports (env ids, optional libraries), before the device is opened
    tracked = _log_to(spec, args)
    if args.backend == "ray":
        return _run_on_ray(spec, config, args, argv, device_spec, charts, t0)
    device = resolve_device(device_spec, spec.torch_device)  # imports torch, unless the benchmark takes no device

    from rlbench.results.store import RunWriter
    from rlbench.run.runner import run_benchmark

    writer = RunWriter(args.store)
    report_path = Path(args.report) if args.report else writer.store / f"{writer.run_id}.md"
    _check_report_path(report_path, bool(args.pyinstrument))
    startup = Metric(STARTUP_S, "s", "lower", [_since_start(t0)])
    command = "rlbench run " + " ".join(shlex.quote(a) for a in argv)
    profiler = None
    if args.pyinstrument:
        from rlbench.instrument.sampling import make_profiler

        profiler = make_profiler()

    from rlbench.cli.progress import TrainingProgress

    progress = TrainingProgress(spec.name, args.repeats, enabled=not args.quiet)
    callbacks = progress.callback
    if tracked is not None:  # --log-to: a tracker callback beside the progress bar, one run per repeat

        def callbacks(k: int) -> Any:
            from rlbench.instrument.callbacks import CallbackList
            from rlbench.profiling.tracking import RunTracker

            log_to, every = tracked
            name = f"rlbench-{writer.run_id}" + (f"-{k}" if args.repeats > 1 else "")
            return CallbackList([progress.callback(k), RunTracker(log_to, every, name)])

    with progress:
        outcome = run_benchmark(
            spec,
            config,
            writer,
            repeats=args.repeats,
            device=device,
            callback_factory=callbacks,
            profiler=profiler,
            meta={"command": command},
            first_repeat_extra=[startup],
        )
        if outcome.error or outcome.interrupted:
            progress.discard()
    if outcome.interrupted:
        what = "terminated (SIGTERM)" if outcome.exit_code == 143 else "interrupted"
        print(
            f"rlbench: {what}: {outcome.repeats_done} of {args.repeats} repeats saved in {outcome.records_path}"
            + (f"; `rlbench report {outcome.records_path}` renders them" if outcome.repeats_done else ""),
            file=sys.stderr,
        )
        return outcome.exit_code
    if outcome.error:
        saved = (
            f"{outcome.repeats_done} finished repeats saved in {outcome.records_path}"
            if outcome.repeats_done
            else "no repeat finished"
        )
        print(f"rlbench: error: {spec.name} {outcome.error}; {saved}; traceback in {outcome.error_log}", file=sys.stderr)
        return 1

    if profiler is not None:
        from rlbench.instrument.sampling import top_frames
        from rlbench.results.fingerprint import fingerprint
        from rlbench.results.outputs import is_device, write_output
        from rlbench.run.runner import to_records

        html = None
        if not is_device(report_path):  # nothing is put beside /dev/null
            html = report_path.with_name(report_path.stem + "-profile.html")
            write_output(html, profiler.output_html(), "--pyinstrument")
        names, secs, total = top_frames(profiler)
        meta = {"frames": names, "total_s": total, "html": html.name if html is not None else None}
        prof = Metric(PROFILE_SELF_S, "s", "none", secs, meta=meta)
        writer.write(to_records(spec, config, [prof], writer.run_id, 0, str(device), fingerprint(), {"command": command}))

    return _finish(spec, args, writer.run_id, outcome.records_path, report_path, outcome.metrics, str(device), charts, t0)


def _finish(
    spec: BenchmarkSpec,
    args: Any,
    run_id: str,
    records_path: Path,
    report_path: Path,
    metrics: list[list[Metric]],
    device: str,
    charts: Any,
    t0: float,
    extra: dict[str, Any] | None = None,
) -> int:
    """Write the report of a finished run and print its summary (``--json``: one JSON object); returns 0."""
    from rlbench.report.kinds import render_run, renderer

    try:
        rendered = render_run(records_path, report_path, run_id=run_id, worker=charts)
    except Exception as exc:  # the measurement is on disk: say so, whatever stopped the report
        if os.environ.get("RLBENCH_DEBUG") and not isinstance(exc, RlbenchError):
            raise
        why = str(exc) if isinstance(exc, RlbenchError) else f"internal error ({type(exc).__name__}: {exc})"
        raise RlbenchError(
            f"{why}; the run's records are safe in {records_path}: `rlbench report {records_path}` renders them"
        ) from None
    summary = rendered.summary()
    summary.update(
        {
            "benchmark": spec.name,
            "run_id": run_id,
            "device": device,
            "repeats": len(metrics) if args.backend == "local" else args.repeats,
            "records": str(records_path),
            "report": str(report_path),
            "cli_wall_s": _since_start(t0),
            **(extra or {}),
        }
    )
    if args.json:
        print(json.dumps(summary, allow_nan=False, default=_json_default), file=args.out, flush=True)
    elif args.quiet:
        from rlbench.report.summary import where_line

        print(where_line(summary), file=sys.stderr, flush=True)
    else:
        renderer(rendered.kind).print_summary(summary)
    return 0


def _run_on_ray(spec: BenchmarkSpec, config: Any, args: Any, argv: list[str], device_spec: str, charts: Any, t0: float) -> int:
    """``--backend ray``: every case a Ray task (:mod:`rlbench.run.fanout`), records streamed in, then the same report."""
    from rlbench.cli.progress import CaseProgress
    from rlbench.results.store import RunWriter
    from rlbench.run.fanout import fan_out

    writer = RunWriter(args.store)
    report_path = Path(args.report) if args.report else writer.store / f"{writer.run_id}.md"
    _check_report_path(report_path, bool(args.pyinstrument))
    command = "rlbench run " + " ".join(shlex.quote(a) for a in argv)
    progress = CaseProgress(spec.name, enabled=not args.quiet)
    with progress:
        outcome = fan_out(
            spec,
            argv[0],
            config,
            writer,
            repeats=args.repeats,
            device_spec=device_spec,
            address=args.address or "",
            meta={"command": command},
            on_plan=progress.plan,
            on_done=progress.done,
        )
        if outcome.failed or outcome.interrupted:
            progress.discard()
    saved = f"{len(outcome.done)} of {len(outcome.cases)} cases saved in {outcome.records_path}"
    if outcome.interrupted:
        what = "terminated (SIGTERM)" if outcome.exit_code == 143 else "interrupted"
        hint = f"; `rlbench report {outcome.records_path}` renders them" if outcome.done else ""
        print(f"rlbench: {what}: {saved}{hint}", file=sys.stderr)
        return outcome.exit_code
    if outcome.usage_error:
        print(f"rlbench: error: {outcome.usage_error}; {saved}", file=sys.stderr)
        return 2
    if outcome.failed:
        label, reason = next(iter(outcome.failed.items()))
        more = f" (and {len(outcome.failed) - 1} more)" if len(outcome.failed) > 1 else ""
        where = f"; details in {outcome.error_log}" if outcome.error_log else ""
        print(f"rlbench: error: {spec.name} case {label} {reason}{more}; {saved}{where}", file=sys.stderr)
        return 1
    device = ", ".join(sorted(set(outcome.devices.values()))) or device_spec
    extra = {"backend": "ray", "fanout": {"cases": len(outcome.cases), "nodes": outcome.nodes}}
    return _finish(spec, args, writer.run_id, outcome.records_path, report_path, outcome.metrics, device, charts, t0, extra)


def _json_default(v: Any) -> Any:
    return str(v)

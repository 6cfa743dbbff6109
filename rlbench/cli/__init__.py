"""The ``rlbench`` command line: ``list``, ``run``, ``report``, ``compare``, ``gate``, ``ab``, ...

The CLI is thin: it parses, calls the runner / store / report layers and renders with rich. Exit codes:

* 0 success; 1 only for "a regression" (``gate``, ``ab --fail``) or "a benchmark raised" (``run``, finished
  repeats kept on disk);
* 2 for everything else that goes wrong: bad input, unreadable records, an unwritable output, and any internal
  error (one line; the traceback only with ``RLBENCH_DEBUG=1``), so an error can never pass for a regression;
* 130 on Ctrl-C and 143 on SIGTERM, both keeping finished repeats and removing temporary files and worktrees.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings

_T0 = time.perf_counter()  # set as soon as the CLI module loads, before torch is imported

from rlbench.cli.parser import Parser  # noqa: E402
from rlbench.core.errors import RlbenchError, Terminated  # noqa: E402

USAGE_EPILOG = """examples:
  rlbench profile -- python train.py     (where your own training script's time goes)
  rlbench list
  rlbench run ppo-cartpole
  rlbench run ppo-cartpole --repeats 5 --report reports/ppo-cartpole-cpu.md
  rlbench run ppo-cartpole --help        (every parameter of the benchmark)
  rlbench report .rlbench                (re-render the latest run's report)
  rlbench compare .rlbench/A.jsonl .rlbench/B.jsonl
  rlbench gate base.jsonl cand.jsonl --fail sps:5% --fail ops/iteration:0%
  rlbench ab main --fail sps:5% -- run ppo-cartpole --total-steps 20000
  rlbench history run main~50..main -- run ppo-cartpole --total-steps 16384
  rlbench publish -o site/                (the history as a static site)
  rlbench bisect v1.0 main --fail sps:5% -- run ppo-cartpole
  rlbench history run main~20..main -- run ppo-cartpole
  rlbench bisect v1.0 main --fail sps:5% -- run ppo-cartpole
"""


def build_parser() -> Parser:
    """The top-level parser with its sub-commands (benchmark parameters are added by ``run``)."""
    parser = Parser(
        prog="rlbench",
        description="Benchmark and profile reinforcement-learning training code.",
        epilog=USAGE_EPILOG,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlbench {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    p_list = sub.add_parser(
        "list", help="list every benchmark (built-in, installed suites, ./suites/) and where it comes from"
    )
    p_list.add_argument("--json", action="store_true", help="print the list as JSON")
    sub.add_parser("run", help="run a benchmark (rlbench run BENCHMARK --help for its options)", add_help=False)
    sub.add_parser(
        "profile",
        help="profile your own training script, unmodified: rlbench profile -- python train.py (rlbench profile --help)",
        add_help=False,
    )
    sub.add_parser("ab", help="run two git revisions interleaved and compare or gate (rlbench ab --help)", add_help=False)
    sub.add_parser(
        "history", help="measure a range of commits into a history store, add stores to it, show it", add_help=False
    )
    sub.add_parser("bisect", help="find the first commit where a metric regressed (rlbench bisect --help)", add_help=False)
    sub.add_parser("publish", help="write a history store as a static HTML site (rlbench publish --help)", add_help=False)
    from rlbench.cli.calibrate import build_calibrate_parser

    build_calibrate_parser(
        sub.add_parser("calibrate", help="measure the gate's false-alarm and detection rates on this machine (minutes)")
    )
    p_report = sub.add_parser("report", help="render the bottleneck report of stored records")
    p_report.add_argument("records", help="a records file (.jsonl) or a store directory (its latest run)")
    p_report.add_argument("--run", dest="run_id", default=None, help="run id (or a unique prefix) to report on")
    p_report.add_argument(
        "-o",
        "--output",
        default=None,
        help="markdown file to write (default: the records file with .md; '-' prints to stdout)",
    )
    p_report.add_argument("--no-chart", action="store_true", help="skip the PNG chart")

    from rlbench.cli.compare import add_side_arguments

    p_cmp = sub.add_parser(
        "compare",
        help="compare two runs, or the groups of one run (--by impl): ratio of medians with 95%% CI and a verdict per case",
    )
    add_side_arguments(p_cmp, cand_optional=True)
    p_cmp.add_argument(
        "--by",
        metavar="PARAM",
        help="compare the groups of ONE run that differ in this parameter (e.g. --by impl for `rlbench run peers`): "
        "each group against the --against group; give BASE only",
    )
    p_cmp.add_argument(
        "--against",
        metavar="VALUE",
        help="with --by: the parameter value of the baseline group (default: rlbench if present, else the first)",
    )
    p_cmp.add_argument(
        "--min-effect",
        type=float,
        default=0.05,
        metavar="F",
        help="smallest relative change that earns a verdict, as a fraction (default: 0.05)",
    )
    p_cmp.add_argument("--metric", action="append", metavar="NAME", help="compare only this metric (repeatable)")
    from rlbench.cli.compare import add_all_metrics_argument

    add_all_metrics_argument(p_cmp)
    p_cmp.add_argument("--report", metavar="PATH", help="also write a markdown comparison report")
    p_gate = sub.add_parser("gate", help="fail (exit 1) on significant regressions beyond thresholds; exit 2 on bad data")
    add_side_arguments(p_gate)
    p_gate.add_argument(
        "--fail",
        action="append",
        metavar="METRIC:PCT%",
        help="fail if METRIC is significantly worse by more than PCT%% (repeatable), e.g. sps:5%% time/update:10%%",
    )
    p_gate.add_argument(
        "--learning-drop",
        default="10%",
        metavar="PCT%",
        help="also fail if eval_return's median dropped significantly by more than this (default: 10%%)",
    )
    p_gate.add_argument("--no-learning-check", action="store_true", help="do not gate on eval_return")
    p_gate.add_argument("--summary", metavar="PATH", help="write the markdown table to PATH (e.g. $GITHUB_STEP_SUMMARY)")

    p_exp = sub.add_parser(
        "export", help="write records in another tool's format (pytest-benchmark, github-action-benchmark, Bencher)"
    )
    p_exp.add_argument("records", help="a records file or a store directory (its latest run)")
    p_exp.add_argument(
        "--format",
        required=True,
        choices=("pytest-benchmark", "github-action", "bencher"),
        help="pytest-benchmark JSON (time metrics), github-action-benchmark custom JSON (medians) or Bencher Metric "
        "Format JSON (medians with 95%% intervals, for `bencher run --adapter json`)",
    )
    p_exp.add_argument(
        "--direction",
        choices=("higher", "lower"),
        default=None,
        help="github-action only: customBiggerIsBetter (higher) or customSmallerIsBetter (lower) metrics",
    )
    p_exp.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    p_imp = sub.add_parser("import", help="store pytest-benchmark JSON (--benchmark-json) as rlbench records")
    p_imp.add_argument("file", help="pytest-benchmark JSON file")
    p_imp.add_argument("--store", default=".rlbench", help="results store to add the run to (default: .rlbench)")
    return parser


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("rlbench")
    except metadata.PackageNotFoundError:
        return "unknown"


def _on_sigterm(signum: int, frame: object) -> None:
    Terminated.seen = True
    raise Terminated


def _show_warning(
    message: object, category: object, filename: str, lineno: int, file: object = None, line: object = None
) -> None:
    print(f"rlbench: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlbench`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    warnings.showwarning = _show_warning
    try:
        if argv and argv[0] == "run":
            from rlbench.cli.run import run_command

            return run_command(argv[1:], _T0)
        if argv and argv[0] == "profile":
            from rlbench.cli.profile import profile_command

            return profile_command(argv[1:], _T0)
        if argv and argv[0] == "ab":
            from rlbench.cli.ab import ab_command

            return ab_command(argv[1:])
        if argv and argv[0] in ("history", "bisect"):
            from rlbench.cli.history import bisect_command, history_command

            return history_command(argv[1:]) if argv[0] == "history" else bisect_command(argv[1:])
        if argv and argv[0] == "publish":
            from rlbench.cli.publish import publish_command

            return publish_command(argv[1:])
        parser = build_parser()  # not before run / profile / ab: they parse their own options (saves ~30 ms)
        args = parser.parse_args(argv)
        if args.command == "list":
            from rlbench.cli.listing import list_command

            return list_command(args)
        if args.command == "report":
            from rlbench.cli.report import report_command

            return report_command(args)
        if args.command in ("export", "import"):
            from rlbench.cli.interop import export_command, import_command

            return export_command(args) if args.command == "export" else import_command(args)
        if args.command in ("compare", "gate"):
            from rlbench.cli.compare import compare_command, gate_command

            return compare_command(args) if args.command == "compare" else gate_command(args)
        if args.command == "calibrate":
            from rlbench.cli.calibrate import calibrate_command

            return calibrate_command(args)
        parser.print_help()
        return 0
    except RlbenchError as exc:
        print(f"rlbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("rlbench: terminated (SIGTERM)", file=sys.stderr)
        return Terminated.exit_code
    except KeyboardInterrupt:
        print("rlbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlbench list | head`: the reader left; not an error of ours (as git and pip do)
        return 0
    except Exception as exc:  # a bug of ours: one line and exit 2, never 1 (which means "regression")
        if os.environ.get("RLBENCH_DEBUG"):
            raise
        print(
            f"rlbench: error: internal error ({type(exc).__name__}: {exc}); rerun with RLBENCH_DEBUG=1 for the "
            "traceback and report it",
            file=sys.stderr,
        )
        return 2


def console_main() -> None:
    """Console-script entry: run :func:`main`, flush, and leave without interpreter teardown.

    Once torch is imported, Python's normal shutdown (finalizing thousands of modules) takes ~0.4 s on
    the reference machine, longer than a short benchmark's whole report. Every file rlbench writes is
    closed before this point, so the process exits with ``os._exit`` after the ``atexit`` handlers (the
    libraries' own clean-up, such as multiprocessing's temporary folder) and flushing stdout and stderr. Set
    ``RLBENCH_SLOW_EXIT=1`` to keep the normal shutdown (e.g. to debug atexit handlers).
    """
    try:
        code = main()
    except BrokenPipeError:  # `rlbench list | head`: the reader left; not an error of ours (as git and pip do)
        code = 0
    if os.environ.get("RLBENCH_SLOW_EXIT"):
        sys.exit(code)
    import atexit

    # the libraries' exit handlers still run: multiprocessing removes its pymp-* folder and reaps its helpers there
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing left to save
            pass
    os._exit(code)

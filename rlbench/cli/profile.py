"""``rlbench profile [options] -- python train.py ARGS``: where an unmodified training script's time goes."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from rlbench.cli.parser import Parser
from rlbench.core.errors import UsageError
from rlbench.results.outputs import is_device

DESCRIPTION = """\
Run your training script unmodified and attribute its wall time to phases, automatically:
  env/step, env/reset   gymnasium Env / VectorEnv (and SB3 VecEnv, TorchRL EnvBase) calls; agent steps counted
  inference             acting: a module called on the env's batch, with or without grad, up to the env step
                        (the critic beside the actor, the sampled distribution, the action's conversion)
  train/forward         the training forward and loss (a module called with grad enabled, until zero_grad/backward)
  train/target          module calls and tensor work under no_grad inside the update (TD targets), the block whole
  train/target_update   copies or lerps into a called module's parameters (polyak loops, load_state_dict)
  train/backward        autograd backward
  train/optimizer       optimizer.step (every torch optimizer), zero_grad, clip_grad_norm_
  replay/add, /sample   the methods of any class that is a replay buffer by shape
  advantage             what runs after the rollout's last acting call, before the update (the GAE loop)
  transfer              .item() .tolist() .cpu() .cuda() .numpy() .to(device), tensors made from host data
  Python/other          everything else
docs/phases.md says what each phase holds. Stable-Baselines3 and TorchRL calls are labelled too (collect,
train, advantage, replay/...). Name more phases in your code with `with rlbench.phase("gae"):`. Training
iterations are found from the env/update rhythm: the first is the warm-up, the rest the steady state. With
--count-ops one iteration is counted op by op (torch ops, syncs and copies per phase; left out of the timings).
From the 512th iteration on, one in 8 is attributed and the rest only timed whole (--all-iterations: all).
Records go to the store like `rlbench run`'s, so report, compare, gate and ab apply.
"""

EPILOG = """\
examples:
  rlbench profile -- python train.py --total-timesteps 50000
  rlbench profile --repeats 5 --seed 1 --seed-arg "--seed {seed}" --count-ops -- python train.py
  rlbench profile --trace trace.json --pyinstrument -- python -m mypkg.train
  rlbench profile --sync -- python train.py --cuda        (CUDA: book GPU work to the phase that queued it)
  rlbench profile --repeats 4 --against-plain -- python train.py   (what profiling costs this script, measured)
  rlbench profile --log-to tensorboard -- python train.py        (rlbench/... series in the script's own run)
  rlbench profile --live -- python train.py                      (phase shares per role, refreshed every second)
"""


def build_profile_parser() -> Parser:
    """The parser of ``rlbench profile`` (the command to run comes after ``--``)."""
    p = Parser(
        prog="rlbench profile",
        usage="rlbench profile [options] -- python SCRIPT.py [ARGS] | python -m MODULE [ARGS]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--repeats", type=int, default=1, metavar="K", help="run the script K times (default: 1)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the first repeat; repeat k uses N+k (default: 0)")
    p.add_argument(
        "--seed-arg",
        default="",
        metavar="TEMPLATE",
        help="arguments appended per repeat with {seed} filled in, e.g. '--seed {seed}' (default: none: every repeat runs "
        "the command as given)",
    )
    p.add_argument(
        "--store",
        default=".rlbench",
        metavar="DIR",
        help="results store: records go to DIR/<run-id>.jsonl as each repeat finishes (default: .rlbench)",
    )
    p.add_argument(
        "--report", default=None, metavar="PATH", help="markdown bottleneck report to write (default: DIR/<run-id>.md)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout (medians over repeats, paths); the script's output goes to stderr",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no summary (one line on stderr says where the report and the records went); the script's output goes to "
        "DIR/<run-id>-repeatK.log",
    )
    p.add_argument(
        "--sync",
        action="store_true",
        help="synchronize CUDA (or MPS) at every phase boundary so GPU work is booked to the phase that queued it "
        "(slower; without it, GPU time lands where the host waits: .item(), .cpu())",
    )
    p.add_argument("--trace", default=None, metavar="PATH", help="write a Chrome/Perfetto trace of the phases")
    p.add_argument("--trace-limit", type=int, default=200_000, metavar="N", help="phases kept in the trace (default: 200000)")
    p.add_argument(
        "--pyinstrument",
        action="store_true",
        help="also record pyinstrument's call tree (first repeat): HTML beside the report, top frames in it",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="end a repeat that runs longer than S seconds, the exit after the script's last line included (default: none)",
    )
    p.add_argument(
        "--count-ops",
        action="store_true",
        help="count torch ops, syncs and copies per phase during the second iteration (noise-free figures to gate on, "
        "e.g. syncs/iteration:0%%); that iteration runs under a torch dispatch mode, slower, and is left out of the timings",
    )
    p.add_argument(
        "--against-plain",
        action="store_true",
        help="also run the command without rlbench once per repeat, alternating which goes first (ABBA), and report "
        "what profiling cost as measured: each profiled process's wall against its plain run's (doubles the run time; "
        "use --repeats 4 or more for a median worth quoting)",
    )
    p.add_argument(
        "--all-iterations",
        action="store_true",
        help="attribute every training iteration: by default, from the 512th on, one in 8 is (picked by a hash of its "
        "index; the others' hooked calls pass straight through and only their wall time and agent steps are kept). An "
        "off-policy loop starts an iteration per env step: attributing them all cost a CleanRL-style DQN about 3%% of its "
        "steady state on rlbench's 2-vCPU test machine, sampled 1.3-2%% (docs/profiling.md)",
    )
    p.add_argument(
        "--no-follow",
        action="store_true",
        help="profile the script's own process only: by default every Python process it starts (multiprocessing "
        "workers, vector-env and DataLoader workers, subprocesses of Python, torchrun's ranks, Ray's workers) is "
        "profiled too, each with its role, and the report says who waits on whom",
    )
    p.add_argument(
        "--no-threads",
        action="store_true",
        help="attribute each process's main thread only: by default every thread that makes a hooked call (an actor "
        "thread, a learner thread) books its own phases",
    )
    p.add_argument(
        "--log-to",
        default=None,
        metavar="tensorboard|wandb|mlflow[:TARGET]",
        help="log the profile's figures while the script runs, under rlbench/: SPS, each phase's share and time per "
        "iteration, per role, the hooks' and the logging's own cost, and at the end the bottleneck table. Into the run the "
        "script opened itself (a SummaryWriter, wandb.init, mlflow.start_run, SB3's tensorboard_log), at its own step; "
        "else one opened at TARGET (a log folder, a W&B project, an MLflow tracking URI). Needs pip install "
        "'rlbench[trackers]'",
    )
    p.add_argument(
        "--log-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --log-to: seconds of training between two points (default: 2)",
    )
    p.add_argument(
        "--live",
        action="store_true",
        help="draw the phases' shares per role, SPS and the top bottleneck on the terminal, about once a second, while "
        "the script runs (its output goes to DIR/<run-id>-repeatK.log, its last lines shown); writes nothing more to "
        "the records",
    )
    p.add_argument("--no-memory", action="store_true", help="do not record peak-RSS growth per phase")
    p.add_argument("--no-labels", action="store_true", help="do not label Stable-Baselines3 / TorchRL methods")
    return p


def profile_command(argv: list[str], t0: float) -> int:
    """Parse, run the repeats, write the report; return the exit code."""
    from rlbench.profiling.launcher import split_command

    options, command = split_command(argv)
    parser = build_profile_parser()
    args = parser.parse_args(options)
    if args.trace_limit < 1:
        raise UsageError(f"--trace-limit must be at least 1, got {args.trace_limit}")
    if args.sync and not _gpu_present():
        raise UsageError("--sync synchronizes a GPU, and this machine has none (CUDA, ROCm or MPS): leave it out")
    from rlbench.profiling.attribution import SAMPLE_EVERY
    from rlbench.profiling.launcher import Options, check_options, parse_command
    from rlbench.profiling.session import Settings

    target = parse_command(command)
    tracking = _tracking(args)  # before anything is made: a tracker missing, a folder that cannot be written
    from rlbench.results.outputs import check_outputs
    from rlbench.results.store import RunWriter

    writer = RunWriter(args.store)
    report_path = Path(args.report) if args.report else writer.store / f"{writer.run_id}.md"
    trace = Path(args.trace) if args.trace else None
    # a device report (/dev/null) gets nothing written beside it
    html = (
        report_path.with_name(report_path.stem + "-profile.html") if args.pyinstrument and not is_device(report_path) else None
    )
    check_outputs([(report_path, "--report"), (trace, "--trace"), (html, "--pyinstrument's HTML")])  # before the script runs
    opts = Options(
        repeats=args.repeats,
        seed=args.seed,
        seed_arg=args.seed_arg,
        timeout=args.timeout,
        settings=Settings(
            sync=args.sync,
            trace_limit=args.trace_limit if trace else 0,
            count_iteration=1 if args.count_ops else None,
            memory=not args.no_memory,
            libraries=not args.no_labels,
            sample_every=1 if args.all_iterations else SAMPLE_EVERY,
            threads=not args.no_threads,
        ),
        trace=trace,
        pyinstrument=html,
        output="log" if args.quiet or args.live else ("stderr" if args.json else "inherit"),
        against_plain=args.against_plain,
        follow=not args.no_follow,
        tracking=tracking,
    )
    check_options(opts)
    from rlbench.profiling.launcher import run_profile

    command_line = "rlbench profile " + shlex.join(argv)
    if args.live:
        from rlbench.cli.live import live_watcher

        opts.watch = live_watcher(target.name)
    announce = None if (args.quiet or args.json) else _announcer(target.name, opts)
    outcome = run_profile(target, opts, writer, meta={"command": command_line}, on_repeat=announce, meanwhile=_import_report)
    if outcome.interrupted:
        what = "terminated (SIGTERM)" if outcome.exit_code == 143 else "interrupted"
        print(f"rlbench: {what}: {_saved(outcome, opts.repeats)}", file=sys.stderr)
        return outcome.exit_code
    if outcome.error:
        log = f"; its output is in {outcome.logs[-1]}" if outcome.logs and outcome.logs[-1].is_file() else ""
        print(f"rlbench: error: {target.name} {outcome.error}; {_saved(outcome)}{log}", file=sys.stderr)
        return 1
    from rlbench.report.kinds import render_run

    cost = _CommandCost(t0, outcome.child_s, outcome.child_rlbench_s, outcome.plain_s)
    try:
        # the profile report's one chart is a bar chart, drawn with Pillow in-process: no matplotlib worker to wait
        # for. The last repeat's process may still be exiting meanwhile (its results are saved): waited for after.
        rendered = render_run(outcome.records_path, report_path, run_id=writer.run_id, finish=cost.fill)
        _store_cost(writer, outcome, cost)
    finally:
        outcome.wait_child()  # before anything is printed: the script's output at exit comes first
    if outcome.error:  # it did not exit within --timeout after its run: ended, its measurements and report saved
        print(f"rlbench: error: {target.name} {outcome.error}; the report is {report_path}", file=sys.stderr)
        return 1
    summary: dict[str, Any] = rendered.summary()
    summary.update(
        {
            "benchmark": target.name,
            "run_id": writer.run_id,
            "device": "cuda (synchronized)" if args.sync else "as the script chose",
            "repeats": outcome.repeats_done,
            "records": str(outcome.records_path),
            "report": str(report_path),
            "trace": str(trace) if trace else None,
            "cli_wall_s": time.perf_counter() - t0,
            "command_own_s": cost.own_s,
            "hooks_share": cost.hooks_share,
        }
    )
    if opts.against_plain:
        from rlbench.report.data import RunData
        from rlbench.report.profiled import against_plain

        measured = against_plain(RunData.from_records(rendered.records))
        summary["against_plain"] = measured if math.isfinite(measured) else None
    if args.json:
        print(json.dumps(summary, allow_nan=False, default=str))
    elif args.quiet:
        from rlbench.report.summary import where_line

        print(where_line(summary), file=sys.stderr, flush=True)
    else:
        from rlbench.report.kinds import renderer

        renderer(rendered.kind).print_summary(summary)
    return 0


def _tracking(args: Any) -> dict[str, Any] | None:
    """``--log-to``, ``--log-every`` and ``--live`` checked before the script starts: the tracker installed, its folder
    writable, W&B's credentials and network (offline without, said in one line)."""
    import os

    from rlbench.profiling.tracking import DEFAULT_EVERY_S, check_every, check_log_to, parse_log_to

    if args.log_every is not None and not args.log_to:
        raise UsageError("--log-every goes with --log-to: add --log-to tensorboard|wandb|mlflow[:TARGET], or leave it out")
    if args.live and (args.json or args.quiet):
        raise UsageError(f"--live draws on the terminal: leave out {'--json' if args.json else '--quiet'}")
    if not (args.log_to or args.live):
        return None
    every = check_every(args.log_every) if args.log_every is not None else DEFAULT_EVERY_S
    log_to = parse_log_to(args.log_to) if args.log_to else None
    if log_to is not None:
        for note in check_log_to(log_to, os.environ):  # (the script's environment: W&B offline, where it must be)
            print(note, file=sys.stderr, flush=True)
    return {
        "log_to": {"backend": log_to.backend, "target": log_to.target} if log_to else None,
        "every": every,
        "live": bool(args.live),
    }


def _saved(outcome: Any, of: int | None = None) -> str:
    """What is on disk after a run that did not finish (``of``: the repeats asked for); a file is named only if it
    exists."""
    if not outcome.repeats_done or not outcome.records_path.is_file():
        return "no repeat was saved"
    cut = outcome.cut_repeat
    finished = outcome.repeats_done - (cut is not None)
    count = f"{finished} of {of} repeats" if of is not None else f"{finished} finished repeats"
    cut_note = f", and repeat {cut} as far as it ran," if cut is not None else ""
    return f"{count} saved{cut_note} in {outcome.records_path}; `rlbench report {outcome.records_path}` renders them"


class _CommandCost:
    """What the command itself cost, measured in this run: its wall from the CLI's start (``t0``) to the report
    written, minus the script's own run in the child processes (their wall less rlbench's own work in them, which
    each child measures and returns)."""

    def __init__(self, t0: float, children_s: float, children_rlbench_s: float, plain_s: float = 0.0) -> None:
        self.t0 = t0
        self.children_s = children_s
        self.plain_s = plain_s  # --against-plain's plain runs: neither the command's work nor the profiled script's
        self.script_s = children_s - children_rlbench_s
        self.command_s = self.own_s = self.hooks_share = math.nan

    def fill(self, text: str, records: list[Any]) -> str:
        """``render_run``'s ``finish``: measure now (the charts are drawn, the report is about to be written) and put
        the cost line where the report left its place."""
        from rlbench.report.data import RunData
        from rlbench.report.profiled import COMMAND_COST_MARK, command_cost_line, plain_pairs, single_run_cost
        from rlbench.results.metrics import PROFILE_OVERHEAD_S

        d = RunData.from_records(records)
        self.hooks_share = float(d.meta(PROFILE_OVERHEAD_S, "share", math.nan))
        self.command_s = time.perf_counter() - self.t0
        self.own_s = self.command_s - self.script_s - self.plain_s
        measured = single_run_cost(plain_pairs(d), self.own_s)
        line = command_cost_line(self.own_s, self.command_s, self.script_s, self.hooks_share, measured, self.plain_s)
        return text.replace(COMMAND_COST_MARK, line)


def _store_cost(writer: Any, outcome: Any, cost: _CommandCost) -> None:
    """Append ``profile/command_s`` to the run's records, so a re-rendered report keeps the measured cost line."""
    from rlbench.results.metrics import PROFILE_COMMAND_S, Metric
    from rlbench.results.records import metric_records

    if not outcome.record_fields or not math.isfinite(cost.own_s):
        return
    meta = {"command_s": cost.command_s, "script_s": cost.script_s, "children_s": cost.children_s, "plain_s": cost.plain_s}
    metric = Metric(PROFILE_COMMAND_S, "s", "none", [cost.own_s], meta=meta)
    writer.write(metric_records([metric], **outcome.record_fields))


def _import_report() -> None:
    """What renders the report and prints its summary, made ready while the script runs (~60 ms after it otherwise):
    the profile's renderer, Pillow and the fonts for its chart, rich for the console table."""
    import rich.console
    import rich.table  # noqa: F401

    from rlbench.report.kinds import renderer
    from rlbench.report.plots import prepare_bar_charts

    renderer("profile")
    prepare_bar_charts()


def _announcer(name: str, opts: Any) -> Any:
    def announce(k: int, seed: int) -> None:
        """A rule with the repeat's title across standard error, as rich draws one, drawn without importing rich
        (~25 ms, right before the script's process starts)."""
        import os

        seed_note = f", seed {seed}" if opts.seed_arg else ""
        title = f"rlbench profile {name}: repeat {k + 1}/{opts.repeats}{seed_note}"
        try:
            width = os.get_terminal_size(sys.stderr.fileno()).columns
        except (OSError, ValueError, AttributeError):  # not a terminal: a log, a pipe
            width = 80
        line = "─" if (sys.stderr.encoding or "").lower().replace("-", "") == "utf8" else "-"
        side = max(width - len(title) - 2, 4)
        if sys.stderr.isatty() and not os.environ.get("NO_COLOR"):
            title = f"\033[1m{title}\033[0m"
        print(f"{line * (side // 2)} {title} {line * (side - side // 2)}", file=sys.stderr, flush=True)

    return announce


def _gpu_present() -> bool:
    """Whether this machine has a GPU ``--sync`` could synchronize, looked up without importing torch (4 s on a GPU
    machine): an NVIDIA or ROCm driver's device node, or Apple silicon (MPS), and CUDA_VISIBLE_DEVICES not set empty.
    The script's process checks again with torch (a CPU-only torch on a GPU machine) before the script starts."""
    import os
    import platform

    if sys.platform == "darwin":
        return platform.machine() == "arm64"
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return False
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/kfd"))

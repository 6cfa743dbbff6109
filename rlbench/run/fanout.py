"""A benchmark's cases fanned out over a Ray cluster: ``rlbench run TARGET --backend ray [--address ADDR]``.

A *case* is one repeat, or one part of a repeat where the benchmark splits it (``BenchmarkSpec.cases``: a micro
suite's groups). Each case becomes a Ray task that declares its CPUs (the benchmark's ``--threads``) and GPUs (one
for a CUDA device), so Ray's scheduler places it; rlbench schedules nothing itself. The driver streams results with
``ray.wait`` and writes each finished case's records into the one store as it arrives, with the node that ran it in
the record's fingerprint.

Guarantees:

* **never lost**: a case whose worker process dies is retried once by Ray (``max_retries=1``); a case that fails
  anyway (its code raised, its worker died twice) is named in the outcome, and every other case still runs;
* **never duplicated**: only the driver writes, once per case label;
* **nothing left behind**: on Ctrl-C or SIGTERM the pending tasks are cancelled (their workers killed), the records
  already written stay, and a Ray started here is shut down.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rlbench.core.children import remove_orphan_dirs, signals_deferred
from rlbench.core.errors import RlbenchError, StoreError, UsageError, interrupt_exit_code
from rlbench.core.options import run_setting
from rlbench.engines.ray_connect import init_ray
from rlbench.instrument.machine_load import LoadProbe
from rlbench.results.fingerprint import fingerprint
from rlbench.results.metrics import Metric, load_metrics
from rlbench.results.store import RunWriter
from rlbench.run.registry import BenchmarkSpec, RunContext
from rlbench.run.runner import resolve_run_target, to_records

TASK_NAME = "rlbench-case"  # a busy worker's process title is `ray::rlbench-case <label>`
POLL_S = 0.5


@dataclass(frozen=True)
class Case:
    """One task of a fanned-out run.

    Attributes:
        label: Unique within the run (``"gae"``, ``"repeat 2"``, ``"gae, repeat 1"``).
        repeat: The repeat its records belong to.
        config: The repeat's configuration (its records carry these parameters, as a serial run's do).
        part: The configuration the task runs (``config`` itself, or the part the benchmark split off).
    """

    label: str
    repeat: int
    config: Any
    part: Any


@dataclass
class CaseResult:
    """What a task sends back: its metrics and where it ran."""

    metrics: list[Metric]
    fingerprint: dict[str, Any]
    device: str
    worker_pid: int
    wall_s: float


@dataclass
class FanoutOutcome:
    """What a fanned-out run produced.

    Attributes:
        run_id: The run's id.
        records_path: File the records were appended to.
        cases: Labels of every case, in submission order.
        done: Labels of the cases whose records are on disk, in completion order.
        metrics: Metrics of each finished case (as :class:`~rlbench.run.runner.RunOutcome` holds one list per repeat).
        nodes: Node (host name and Ray node id) each finished case ran on.
        devices: Device each finished case ran on.
        failed: One-line reason per case that did not finish.
        usage_error: A case rejected its input (an absent device on its node): the CLI exits 2 with it.
        error_log: File holding the failed cases' tracebacks.
        interrupted: True when Ctrl-C or SIGTERM ended the run.
        exit_code: 130 (Ctrl-C) or 143 (SIGTERM) for an interrupted run.
    """

    run_id: str
    records_path: Path
    cases: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    metrics: list[list[Metric]] = field(default_factory=list)
    nodes: dict[str, str] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    usage_error: str | None = None
    error_log: Path | None = None
    interrupted: bool = False
    exit_code: int = 0


def plan_cases(spec: BenchmarkSpec, config: Any, repeats: int) -> list[Case]:
    """Every case of ``repeats`` repeats (seeds ``config.seed + k``), split where the benchmark splits a repeat."""
    out = []
    for k in range(repeats):
        cfg = replace(config, seed=config.seed + k) if hasattr(config, "seed") else config
        parts = spec.cases(cfg) if spec.cases is not None else [("", cfg)]
        for label, part in parts:
            name = ", ".join(s for s in (label, f"repeat {k}" if repeats > 1 or not label else "") if s)
            out.append(Case(name, k, cfg, part))
    return out


def config_params(config: Any) -> dict[str, Any]:
    """A config's fields as keyword arguments (the task rebuilds the config: a user's config class may not pickle)."""
    return {f.name: getattr(config, f.name) for f in fields(config)}


def run_case(target: str, cwd: str, params: dict[str, Any], device_spec: str) -> CaseResult:
    """Run one case in a Ray worker: resolve the benchmark as the driver did, run it, fingerprint this node.

    Args:
        target: The benchmark as typed on the command line.
        cwd: The driver's working directory (its ``./suites/`` and relative paths; skipped on a node without it).
        params: The case's configuration fields.
        device_spec: ``--device`` as given (resolved here, on the node that runs the case).
    """
    from rlbench.core.devices import resolve_device

    t0 = time.perf_counter()
    if os.path.isdir(cwd):
        os.chdir(cwd)
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
    spec = resolve_run_target(target)
    config = replace(spec.config_factory(), **params)
    device = resolve_device(device_spec, spec.torch_device)
    probe = LoadProbe()
    metrics = spec.run(config, RunContext(device=device))
    metrics = [*metrics, *load_metrics(probe.stop())]
    fp = fingerprint()
    fp["node"] = _node()
    return CaseResult(metrics, fp, str(device), os.getpid(), time.perf_counter() - t0)


def _node() -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    return {"hostname": socket.gethostname(), "ray_node_id": str(ctx.get_node_id()), "ip": ray.util.get_node_ip_address()}


def resources(config: Any, device_spec: str) -> dict[str, float]:
    """What a case declares to Ray's scheduler: ``--threads`` CPUs (1 by default), one GPU for a CUDA device."""
    cpus = max(1, int(run_setting(config, "threads", 1) or 1))
    return {"num_cpus": cpus, "num_gpus": 1 if device_spec.startswith("cuda") else 0}


def fan_out(
    spec: BenchmarkSpec,
    target: str,
    config: Any,
    writer: RunWriter,
    *,
    repeats: int = 1,
    device_spec: str = "auto",
    address: str = "",
    meta: dict[str, Any] | None = None,
    on_plan: Callable[[list[Case]], None] | None = None,
    on_done: Callable[[Case, str | None], None] | None = None,
) -> FanoutOutcome:
    """Run every case of ``spec`` as a Ray task and write each one's records as it finishes.

    Args:
        spec: The benchmark (resolved on the driver; tasks resolve ``target`` again).
        target: The benchmark as typed (a name, ``file.py:NAME``, ...).
        config: Its configuration (repeat ``k`` runs seed ``config.seed + k``).
        writer: Where records go.
        repeats: Number of repeats.
        device_spec: ``--device`` as given.
        address: A cluster to join (``ray.init(address=...)``); empty starts a local Ray, shut down at the end.
        meta: Context stored in every record (command line, ...).
        on_plan: Called with the cases before any is submitted (a progress bar's total).
        on_done: Called with each case as it ends, and ``None`` or the reason it failed.

    Raises:
        UsageError: Ray is not installed, or the cluster at ``address`` cannot be joined.
    """
    ray = _import_ray()
    outcome = FanoutOutcome(writer.run_id, writer.path)
    cases = plan_cases(spec, config, repeats)
    outcome.cases = [c.label for c in cases]
    base_meta = {**(meta or {}), "repeats": repeats, "backend": "ray"}
    log_path = writer.store / f"{writer.run_id}.ray.log"
    pending: dict[Any, Case] = {}
    started = False
    with log_path.open("a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
        # Ray's driver prints worker deaths ("(raylet) A worker died ...") on stdout from a thread: into the run's
        # log, so that stdout keeps what --json promises and the terminal only the progress bar
        try:
            started = _connect(ray, address)
            if on_plan is not None:
                on_plan(cases)
            _submit_and_collect(ray, spec, target, config, writer, cases, pending, device_spec, base_meta, outcome, on_done)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (errors.Terminated)
            outcome.interrupted = True
            outcome.exit_code = interrupt_exit_code(exc)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)  # kills the worker running it: no benchmark goes on after we stop
            if started:
                ray.shutdown()  # a Ray started here stops; a joined cluster is only left (its error thread too)
            # a worker ended by the cancel (or with the Ray it ran in) could not remove its temporary folder
            remove_orphan_dirs("rlbench-micro-")
    if log_path.stat().st_size == 0:
        log_path.unlink()
    return outcome


def _submit_and_collect(
    ray: Any,
    spec: BenchmarkSpec,
    target: str,
    config: Any,
    writer: RunWriter,
    cases: list[Case],
    pending: dict[Any, Case],
    device_spec: str,
    meta: dict[str, Any],
    outcome: FanoutOutcome,
    on_done: Callable[[Case, str | None], None] | None,
) -> None:
    """Submit every case, then write each one's records as it finishes (``pending`` holds what has not)."""
    task = ray.remote(run_case)
    declared = {"max_retries": 1, "retry_exceptions": False, **resources(config, device_spec)}
    cwd = os.getcwd()
    for case in cases:
        options = task.options(name=f"{TASK_NAME} {case.label}", **declared)
        pending[options.remote(target, cwd, config_params(case.part), device_spec)] = case
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        for ref in ready:
            case = pending.pop(ref)
            reason = _collect(ray, ref, case, spec, writer, meta, outcome)
            if on_done is not None:
                on_done(case, reason)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--backend ray needs ray, which is not installed: pip install 'rlbench[ray]'") from None
    return ray


def _connect(ray: Any, address: str) -> bool:
    """Join ``address`` or start a local Ray; True when this call started it (and must shut it down)."""
    if ray.is_initialized():
        return False
    if address:
        init_ray(ray, address, log_to_driver=False, logging_level="ERROR")
    else:
        init_ray(ray, "", include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    return True


def _collect(
    ray: Any, ref: Any, case: Case, spec: BenchmarkSpec, writer: RunWriter, meta: dict[str, Any], outcome: FanoutOutcome
) -> str | None:
    """Write one finished case's records (once), or note why it failed; returns that reason or ``None``."""
    from ray.exceptions import RayTaskError, TaskCancelledError

    try:
        result: CaseResult = ray.get(ref)
    except RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        if isinstance(cause, RlbenchError):
            outcome.usage_error = outcome.usage_error or f"case {case.label}: {cause}"
        return _fail(outcome, writer, case, f"raised {type(cause).__name__}: {cause}", str(exc))
    except TaskCancelledError:
        return _fail(outcome, writer, case, "was cancelled", "")
    except Exception as exc:  # WorkerCrashedError, NodeDiedError, ...: Ray already retried once
        return _fail(outcome, writer, case, f"lost its worker twice ({type(exc).__name__}); Ray retried it once", str(exc))
    if case.label in outcome.done:
        return None  # never write a case twice
    node = result.fingerprint.get("node", {})
    records = to_records(
        spec,
        case.config,
        result.metrics,
        writer.run_id,
        case.repeat,
        result.device,
        result.fingerprint,
        {**meta, "case": case.label, "worker_pid": result.worker_pid, "case_wall_s": result.wall_s},
    )
    with signals_deferred():  # the records and the list of saved cases change together
        try:
            writer.write(records)
        except StoreError as exc:
            saved = f"cases {', '.join(outcome.done)} are saved in {writer.path}" if outcome.done else "no case was saved"
            raise StoreError(f"{exc} while saving case {case.label}; {saved}; free space or pass --store DIR") from None
        outcome.done.append(case.label)
        outcome.metrics.append(result.metrics)
        outcome.devices[case.label] = result.device
        outcome.nodes[case.label] = f"{node.get('hostname', '?')} ({str(node.get('ray_node_id', '?'))[:8]})"
    return None


def _fail(outcome: FanoutOutcome, writer: RunWriter, case: Case, reason: str, detail: str) -> str:
    outcome.failed[case.label] = reason
    path = writer.store / f"{writer.run_id}.error.txt"
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(f"case {case.label} {reason}\n{detail}\n")
        outcome.error_log = path
    except OSError:
        print(f"case {case.label} {reason}\n{detail}", file=sys.stderr)
    return reason

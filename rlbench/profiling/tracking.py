"""``rlbench profile --log-to tensorboard|wandb|mlflow[:TARGET]``: the profile's figures in the user's own tracker, live.

In the script's process, one thread (``rlbench-tracker``) reads what the profile has measured so far every
``--log-every`` seconds (:mod:`rlbench.profiling.live`: this process's threads without stopping them, and the followed
processes' snapshots) and logs each interval's figures under ``rlbench/``: SPS, each phase's share and time per
iteration, per role, and the hooks' and the logging's own cost; at the end, the steady state's bottleneck table as text.
The training thread does none of it.

**Into the user's own run.** Post-import hooks on the trackers' classes (:class:`~rlbench.profiling.autohooks.PostImport`,
the script's code untouched) see what the script opens: a ``torch.utils.tensorboard`` or ``tensorboardX``
``SummaryWriter`` (SB3's ``tensorboard_log`` opens one), a ``wandb.init`` run, an ``mlflow.start_run`` run. rlbench logs
into that run: through the script's own writer (its event file), into the W&B run (``commit=False``: its rows stay the
script's, and ``rlbench/step`` is the x-axis of rlbench's series), into the MLflow run by its id. The x-axis is the
script's own step (the ``global_step`` it last passed to ``add_scalar``, ``wandb.log`` or ``mlflow.log_metric``), else
rlbench's agent-step count; with the script's step, a point is logged when that step has moved on. Where the script
opened no run, rlbench opens one where TARGET says. A writer the script closes before the end is flushed into first; a
TensorBoard log then goes on in rlbench's own event file in the same folder.

**Faults.** A tracker call that raises never reaches the script: the profile goes on, and the result says what was not
logged (the report's cost section shows it). Checks that can be made before the script starts (the library installed,
a folder writable, W&B's credentials and network) are made by rlbench's own process (:func:`check_log_to`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import socket
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.core.errors import UsageError

BACKENDS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
"""``--log-to`` backend -> the package it needs."""
EXTRA = "rlbench[trackers]"
DEFAULT_EVERY_S = 2.0
LIVE_EVERY_S = 1.0
PREFIX = "rlbench"
WANDB_HOST = "api.wandb.ai"
CONNECT_S = 3.0


@dataclass(frozen=True)
class LogTo:
    """Where ``--log-to`` sends the figures: ``backend`` and its TARGET (a folder, a W&B project, an MLflow tracking
    URI), ``None`` for the default."""

    backend: str
    target: str | None = None

    def describe(self) -> str:
        return self.backend + (f":{self.target}" if self.target else "")


def parse_log_to(text: str) -> LogTo:
    """``tensorboard``, ``tensorboard:DIR``, ``wandb[:PROJECT]``, ``mlflow[:TRACKING_URI]``.

    Raises:
        UsageError: Another backend, or an empty TARGET.
    """
    backend, sep, target = text.partition(":")
    backend = backend.strip().lower()
    if backend not in BACKENDS:
        raise UsageError(
            f"--log-to {text!r}: choose tensorboard[:DIR], wandb[:PROJECT] or mlflow[:TRACKING_URI] "
            f"(e.g. --log-to tensorboard:runs/profile)"
        )
    if sep and not target.strip():
        raise UsageError(f"--log-to {text!r}: nothing after ':'; leave it out for the default, or name the {_what(backend)}")
    return LogTo(backend, target.strip() or None)


def _what(backend: str) -> str:
    return {"tensorboard": "log folder", "wandb": "W&B project", "mlflow": "MLflow tracking URI"}[backend]


def check_every(seconds: float) -> float:
    """``--log-every``: a positive, finite number of seconds.

    Raises:
        UsageError: Otherwise.
    """
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--log-every must be a positive number of seconds, got {seconds:g}")
    return seconds


def check_log_to(log_to: LogTo, env: dict[str, str]) -> list[str]:
    """What can be checked before the script starts, in rlbench's own process: the tracker installed, its folder
    writable; for W&B, credentials and network (without either it logs offline: ``WANDB_MODE=offline`` is put in the
    script's environment ``env``, and a note says so). Returns the notes to print.

    Raises:
        UsageError: The library is not installed, or the folder cannot be written.
    """
    package = BACKENDS[log_to.backend]
    if importlib.util.find_spec(package) is None:
        raise UsageError(f"--log-to {log_to.backend} needs the {package} package, not installed here: pip install '{EXTRA}'")
    notes: list[str] = []
    if log_to.backend == "tensorboard":
        if log_to.target:
            _check_folder(Path(log_to.target), f"--log-to tensorboard:{log_to.target}")
    elif log_to.backend == "mlflow":
        uri = log_to.target or env.get("MLFLOW_TRACKING_URI") or ""
        folder = _local_store(uri)
        if folder is not None:
            _check_folder(folder, f"--log-to mlflow:{uri}" if log_to.target else f"MLflow's tracking folder {folder}")
            if log_to.target and not uri.startswith("sqlite:"):  # a file store, asked for: MLflow 3 refuses one unless
                env.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # told so
    else:
        _check_folder(Path(env.get("WANDB_DIR") or "."), "W&B's folder (WANDB_DIR, else the working directory)")
        mode = env.get("WANDB_MODE", "").lower()
        if mode not in ("offline", "dryrun", "disabled"):
            why = None
            if not _wandb_credentials(env):
                why = "no W&B credentials (WANDB_API_KEY or `wandb login`)"
            elif not _reachable(env):
                why = f"W&B's server ({_wandb_host(env)}) did not answer within {CONNECT_S:g} s"
            if why:
                env["WANDB_MODE"] = "offline"
                notes.append(
                    f"rlbench: note: {why}: W&B runs offline (WANDB_MODE=offline, the script's own run too) into "
                    f"{Path(env.get('WANDB_DIR') or '.') / 'wandb'}; `wandb sync` uploads them later"
                )
    return notes


def _check_folder(folder: Path, what: str) -> None:
    """Create ``folder`` if needed and write a file in it (removed at once).

    Raises:
        UsageError: Naming ``what`` and why.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".rlbench-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{what}: cannot write {folder} ({exc.strerror or exc}): give a folder you can write") from None


def _local_store(uri: str) -> Path | None:
    """The folder of a local MLflow store URI (a path, ``file:``, ``sqlite:///``), ``None`` for a server."""
    if not uri:
        return None  # MLflow's own default: nothing made here
    if uri.startswith("file:"):
        rest = uri[len("file:") :]
        return Path(rest[2:] if rest.startswith("//") else rest)
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :]).parent
    if "://" in uri or uri.startswith(("databricks", "http")):
        return None
    return Path(uri)


def _wandb_host(env: dict[str, str]) -> str:
    base = env.get("WANDB_BASE_URL") or f"https://{WANDB_HOST}"
    return base.split("://", 1)[-1].split("/", 1)[0]


def _wandb_credentials(env: dict[str, str]) -> bool:
    if env.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        return netrc.netrc(env.get("NETRC") or None).authenticators(_wandb_host(env).split(":")[0]) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(env: dict[str, str]) -> bool:
    host = _wandb_host(env)
    name, _, port = host.partition(":")
    try:
        with socket.create_connection((name, int(port or 443)), timeout=CONNECT_S):
            return True
    except (OSError, ValueError):
        return False


# --- the script's own runs, seen through post-import hooks ---------------------------------------------------------
class UserRuns:
    """What the script opened in a tracker, and the step it last logged at (see the module docstring)."""

    def __init__(self) -> None:
        self.writers: list[tuple[Any, str, str]] = []  # (weak writer, kind, log dir), newest last
        self.closed: set[int] = set()  # ids of writers the script closed
        self.mlflow: tuple[str, str] | None = None  # (tracking URI, run id)
        self.step: int | None = None  # the script's last step
        self.opened: float | None = None  # when the script first opened a run (perf_counter)
        self.unstepped = False  # the script logged a value without a step
        self.finished: set[int] = set()  # ids of the W&B runs the script finished
        self.before_close: Any = None  # called with (what, handle) before the script closes a run

    def saw_run(self) -> None:
        if self.opened is None:
            self.opened = time.perf_counter()

    def saw_step(self, step: Any) -> None:
        if step is None or isinstance(step, bool):
            self.unstepped = True  # the script logs without a step of its own: rlbench's points go on agent steps
            return
        try:
            value = int(step)
        except (TypeError, ValueError):
            return
        if self.step is None or value > self.step:
            self.step = value

    def writer(self) -> tuple[Any, str, str] | None:
        """The newest TensorBoard writer the script opened: ``(writer or None once closed, kind, log dir)``."""
        for ref, kind, logdir in reversed(self.writers):
            w = ref()
            if w is None or id(w) in self.closed:
                return None, kind, logdir
            return w, kind, logdir
        return None

    def wandb_run(self) -> Any:
        wandb = sys.modules.get("wandb")
        return getattr(wandb, "run", None) if wandb is not None else None

    def _closing(self, what: str, handle: Any) -> None:
        if self.before_close is not None:
            with contextlib.suppress(Exception):
                self.before_close(what, handle)


ORIGINAL = "__rlbench_wrapped__"
OWN_RUNS: set[int] = set()
"""ids of the W&B runs rlbench opened itself (never the script's)."""


def _writer_patch(kind: str) -> Any:
    def patch(h: Any, module: Any) -> None:
        from rlbench.profiling.autohooks import replace_attr

        runs: UserRuns = h.user_runs
        cls = module.SummaryWriter
        init, add_scalar, add_scalars, close = cls.__init__, cls.add_scalar, cls.add_scalars, cls.close

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            logdir = getattr(self, "log_dir", None) or getattr(self, "logdir", None) or ""
            runs.writers.append((weakref.ref(self), kind, str(logdir)))
            runs.saw_run()

        def add_scalar_(self: Any, tag: Any, scalar_value: Any, global_step: Any = None, *args: Any, **kw: Any) -> Any:
            runs.saw_step(global_step)
            return add_scalar(self, tag, scalar_value, global_step, *args, **kw)

        def add_scalars_(self: Any, main_tag: Any, values: Any, global_step: Any = None, *args: Any, **kw: Any) -> Any:
            runs.saw_step(global_step)
            return add_scalars(self, main_tag, values, global_step, *args, **kw)

        def close_(self: Any, *args: Any, **kwargs: Any) -> Any:
            if id(self) not in runs.closed:
                runs._closing("tensorboard", self)
                runs.closed.add(id(self))
            return close(self, *args, **kwargs)

        for name, fn, original in (
            ("__init__", __init__, init),
            ("add_scalar", add_scalar_, add_scalar),
            ("add_scalars", add_scalars_, add_scalars),
            ("close", close_, close),
        ):
            setattr(fn, ORIGINAL, original)
            replace_attr(h.restore, cls, name, fn)

    return patch


def _wandb_patch(h: Any, module: Any) -> None:
    from rlbench.profiling.autohooks import replace_attr

    runs: UserRuns = h.user_runs
    cls = module.Run
    log, finish = cls.log, cls.finish

    def log_(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in OWN_RUNS and threading.current_thread().name != TRACKER_THREAD:
            runs.saw_step(kwargs.get("step"))
        return log(self, *args, **kwargs)

    def finish_(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in OWN_RUNS and id(self) not in runs.finished:
            runs._closing("wandb", self)
        try:
            return finish(self, *args, **kwargs)
        finally:
            runs.finished.add(id(self))

    for name, fn, original in (("log", log_, log), ("finish", finish_, finish)):
        setattr(fn, ORIGINAL, original)
        replace_attr(h.restore, cls, name, fn)


def _mlflow_patch(h: Any, module: Any) -> None:
    from rlbench.profiling.autohooks import replace_attr

    runs: UserRuns = h.user_runs
    fluent = sys.modules.get("mlflow.tracking.fluent")
    start_run = module.start_run

    def start_run_(*args: Any, **kwargs: Any) -> Any:
        active = start_run(*args, **kwargs)
        with contextlib.suppress(Exception):
            runs.mlflow = (module.get_tracking_uri(), active.info.run_id)
            runs.saw_run()
        return active

    setattr(start_run_, ORIGINAL, start_run)
    replace_attr(h.restore, module, "start_run", start_run_)
    if fluent is not None and getattr(fluent, "start_run", None) is start_run:
        replace_attr(h.restore, fluent, "start_run", start_run_)
    for name, pos in (("log_metric", 2), ("log_metrics", 1)):  # where each takes its step
        original = getattr(module, name, None)
        if original is not None:
            replace_attr(h.restore, module, name, _mlflow_logged(module, runs, original, pos))


def _mlflow_logged(module: Any, runs: UserRuns, original: Any, pos: int) -> Any:
    def logged(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name != TRACKER_THREAD:
            runs.saw_step(kwargs.get("step", args[pos] if len(args) > pos else None))
            if runs.mlflow is None:  # a run the fluent API opened by itself
                with contextlib.suppress(Exception):
                    active = module.active_run()
                    if active is not None:
                        runs.mlflow = (module.get_tracking_uri(), active.info.run_id)
                        runs.saw_run()
        return original(*args, **kwargs)

    setattr(logged, ORIGINAL, original)
    return logged


USER_RUN_PATCHES = {
    "torch.utils.tensorboard.writer": ("SummaryWriter", _writer_patch("torch")),
    "tensorboardX.writer": ("SummaryWriter", _writer_patch("tensorboardX")),
    "wandb.sdk.wandb_run": ("Run", _wandb_patch),
    "mlflow": ("start_run", _mlflow_patch),
}
"""Module executed -> (the attribute it must have, the patch that watches the script's runs in it)."""


# --- backends ---------------------------------------------------------------------------------------------------
class Backend:
    """Where one run's figures go. ``where``: the run, as the report names it; ``user``: the script's own run."""

    name = ""
    where = ""
    user = False

    def scalars(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def text(self, tag: str, text: str, step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close what rlbench opened (never the script's own run)."""


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli), masked. TensorBoard's own (``record_writer``'s) is the same pure Python
    behind an import of 175 ms of CPU here (its ``summary`` package: numpy, the plugins), which the script's process
    would pay while it trains; the tests check the two agree."""
    crc = 0xFFFFFFFF
    table = _CRC32C
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _Records:
    """TFRecord framing (TensorBoard's ``RecordWriter``'s): length, its checksum, the data, its checksum."""

    def __init__(self, file: Any) -> None:
        self.file = file

    def write(self, data: bytes) -> None:
        import struct

        header = struct.pack("<Q", len(data))
        self.file.write(header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data)))

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class EventFile(Backend):
    """rlbench's own TensorBoard event file in ``logdir`` (the script's log folder once its writer is closed, or
    TARGET): written in this thread, no writer thread of its own, with TensorBoard's own protos, framed as its
    ``RecordWriter`` frames them (:class:`_Records`)."""

    name = "tensorboard"

    def __init__(self, logdir: str, user: bool = False) -> None:
        from tensorboard.compat.proto import event_pb2

        self.event_pb2 = event_pb2
        Path(logdir).mkdir(parents=True, exist_ok=True)
        # TensorBoard's own naming (its readers sort a folder's files by name): after the script's file of that second
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.rlbench"
        self.path = Path(logdir) / name
        self.file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self.records = _Records(self.file)
        self.where, self.user = str(logdir), user
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self.records.write(event.SerializeToString())
        self.records.flush()

    def scalars(self, values: dict[str, float], step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
        self._write(self.event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def text(self, tag: str, text: str, step: int) -> None:
        # the tag as SummaryWriter.add_text names it (torch's and tensorboardX's): one tag, whichever file wrote it
        summary = _text_summary(f"{tag}/text_summary", text)
        self._write(self.event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.records.close()


def _text_summary(tag: str, text: str) -> Any:
    """A TensorBoard text summary (the text plugin's tensor of one string), as ``add_text`` writes it."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_STRING

    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)])
    tensor = TensorProto(dtype=DT_STRING, string_val=[text.encode("utf-8")], tensor_shape=shape)
    return Summary(value=[Summary.Value(tag=tag, metadata=meta, tensor=tensor)])


class UserWriter(Backend):
    """The script's own ``SummaryWriter``: rlbench's series go into its event file, through its original methods."""

    name = "tensorboard"
    user = True

    def __init__(self, writer: Any, logdir: str) -> None:
        self.writer = weakref.ref(writer)
        self.where = logdir
        cls = type(writer)
        self.add_scalar = getattr(cls.add_scalar, ORIGINAL, cls.add_scalar)
        self.add_text = cls.add_text

    def scalars(self, values: dict[str, float], step: int) -> None:
        w = self.writer()
        if w is None:
            raise RuntimeError("the script's SummaryWriter is gone")
        for k, v in values.items():
            self.add_scalar(w, k, float(v), int(step))
        w.flush()

    def text(self, tag: str, text: str, step: int) -> None:
        w = self.writer()
        if w is None:
            raise RuntimeError("the script's SummaryWriter is gone")
        self.add_text(w, tag, text, int(step))
        w.flush()


class Wandb(Backend):
    """A W&B run: the script's (rlbench's rows go in with ``commit=False``, against ``rlbench/step``) or rlbench's own."""

    name = "wandb"

    def __init__(self, run: Any, user: bool) -> None:
        self.run, self.user = run, user
        self.where = f"run {getattr(run, 'id', '?')}" + (f" ({getattr(run, 'dir', '')})" if getattr(run, "dir", "") else "")
        with contextlib.suppress(Exception):
            run.define_metric(f"{PREFIX}/step")
            run.define_metric(f"{PREFIX}/*", step_metric=f"{PREFIX}/step")

    def _log(self, data: dict[str, Any], step: int) -> None:
        log = getattr(type(self.run).log, ORIGINAL, type(self.run).log)
        if self.user:
            log(self.run, {**data, f"{PREFIX}/step": step}, commit=False)
        else:
            log(self.run, {**data, f"{PREFIX}/step": step})

    def scalars(self, values: dict[str, float], step: int) -> None:
        self._log(values, step)

    def text(self, tag: str, text: str, step: int) -> None:
        self.run.summary[tag] = text
        import wandb

        rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ") and "---" not in line]
        if len(rows) > 1:
            self._log(
                {tag: wandb.Table(columns=[c.strip() for c in rows[0]], data=[[c.strip() for c in r] for r in rows[1:]])}, step
            )

    def close(self) -> None:
        if not self.user:
            finish = getattr(type(self.run).finish, ORIGINAL, type(self.run).finish)
            finish(self.run)


class Mlflow(Backend):
    """An MLflow run by its id, through ``MlflowClient`` (thread-safe; the script's fluent run stays the script's)."""

    name = "mlflow"

    def __init__(self, uri: str | None, run_id: str, user: bool) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self.run_id, self.user = run_id, user
        self.where = f"run {run_id}" + (f" at {uri}" if uri else "")

    def scalars(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, int(step)) for k, v in values.items() if math.isfinite(v)]
        for i in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def text(self, tag: str, text: str, step: int) -> None:
        self.client.log_text(self.run_id, text, f"{tag}.md")

    def close(self) -> None:
        if not self.user:
            self.client.set_terminated(self.run_id)


def own_backend(log_to: LogTo, run_name: str) -> Backend:
    """The run rlbench opens where the script opened none (TARGET, else each tracker's default)."""
    if log_to.backend == "tensorboard":
        return EventFile(log_to.target or str(Path("runs") / run_name))
    if log_to.backend == "mlflow":
        from mlflow.tracking import MlflowClient

        uri = log_to.target or os.environ.get("MLFLOW_TRACKING_URI") or None
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(PREFIX)
        experiment = found.experiment_id if found is not None else client.create_experiment(PREFIX)
        run = client.create_run(experiment, run_name=run_name)
        return Mlflow(uri, run.info.run_id, user=False)
    import wandb

    run = wandb.init(project=log_to.target or PREFIX, name=run_name, reinit="create_new")
    OWN_RUNS.add(id(run))
    return Wandb(run, user=False)


TRACKER_THREAD = "rlbench-tracker"


class Tracking:
    """``--log-to`` and ``--live`` in the script's process (see the module docstring).

    Args:
        spec: The request's ``tracking`` part: ``log_to`` (``{"backend", "target"}`` or ``None``), ``every``
            (seconds between points), ``live`` (publish this process's figures for ``--live``), ``live_dir``,
            ``follow_dir`` (the followed processes' snapshots), ``run_name``.
        session: The script's session (started).
    """

    def __init__(self, spec: dict[str, Any], session: Any) -> None:
        raw = spec.get("log_to")
        self.log_to = LogTo(raw["backend"], raw.get("target")) if raw else None
        self.every = float(spec.get("every") or DEFAULT_EVERY_S)
        self.live = bool(spec.get("live"))
        self.live_dir = Path(spec["live_dir"]) if spec.get("live_dir") else None
        self.follow_dir = Path(spec["follow_dir"]) if spec.get("follow_dir") else None
        self.run_name = str(spec.get("run_name") or "rlbench")
        self.session = session
        self.pid = os.getpid()
        self.runs = UserRuns()
        self.runs.before_close = self._before_close
        from rlbench.profiling.live import Window

        self.window = Window()
        self.backend: Backend | None = None
        self.own: Backend | None = None
        self.lock = threading.RLock()
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.costs: dict[str, float] | None = None
        self.t0 = time.perf_counter()
        self.cpu_s = 0.0  # the tracker thread's CPU seconds (its reads, the series, the tracker's calls)
        self.points = 0
        self.series: set[str] = set()
        self.failures: list[str] = []
        self.failed_points = 0
        self.last_x: int | None = None
        self.texts = 0
        self.notes: list[str] = []
        self.used: list[tuple[str, str, bool]] = []  # (backend, where, the script's own run)
        self.closed_at: float | None = None  # when the script last closed the run rlbench logged into

    # --- running ----------------------------------------------------------------------------------------------------
    def start(self) -> Tracking:
        from rlbench.profiling import follow
        from rlbench.profiling.autohooks import PostImport

        h = self.session.hooks
        if h is not None and self.log_to is not None:
            h.user_runs = self.runs
            PostImport(h, USER_RUN_PATCHES, "rlbench --log-to: not watching").watch()
        follow.FORK_SNAPSHOT_S = min(self.every, LIVE_EVERY_S) if self.follow_dir is not None else 0.0
        self.thread = threading.Thread(target=self._loop, name=TRACKER_THREAD, daemon=True)
        self.thread.start()
        return self

    def _loop(self) -> None:
        now = time.perf_counter()
        next_live = now + (LIVE_EVERY_S if self.live else math.inf)
        next_log = now + (self.every if self.log_to is not None else math.inf)
        while not self.done.wait(max(min(next_live, next_log) - time.perf_counter(), 0.0)):
            now = time.perf_counter()
            live, log = now >= next_live, now >= next_log
            if live:
                next_live = now + LIVE_EVERY_S
            if log:
                next_log = now + self.every
            self._tick(live=live, log=log)

    def _tick(self, *, live: bool, log: bool, final: bool = False) -> None:
        if os.getpid() != self.pid:  # a fork of the script's process (its copy of rlbench's state): it logs nothing
            return
        c0 = time.thread_time()
        try:
            with self.lock:
                from rlbench.profiling.live import session_views, snapshot_views

                mine = session_views(self.session, self.pid)
                if live and self.live_dir is not None:
                    self._publish(mine)
                if log:
                    theirs = snapshot_views(self.follow_dir, self.pid) if self.follow_dir is not None else []
                    self._log(mine, theirs, final=final)
        except Exception as exc:  # never into the script: said in the result
            self._failed("the figures", exc)
        finally:
            self.cpu_s += time.thread_time() - c0

    def _publish(self, mine: list[dict[str, Any]]) -> None:
        from rlbench.profiling.live import write_json

        assert self.live_dir is not None
        data = {"pid": self.pid, "t": time.perf_counter(), "views": mine, "step": self.runs.step, "logging": self.summary()}
        write_json(self.live_dir / f"live-{self.pid}.json", data)

    def _x(self, mine: list[dict[str, Any]], final: bool) -> int | None:
        """The point's step: the script's own (``None`` while it has not moved on, or has yet to log its first), else
        the agent steps (where the script opened no run, or logs without a step)."""
        runs = self.runs
        if runs.wandb_run() is not None:
            runs.saw_run()
        if runs.step is None and runs.opened is not None and not runs.unstepped and not final:
            return None  # the script's run is open and its first step is coming: rlbench's points go at its steps
        if self.runs.step is not None:
            x = self.runs.step
            if self.last_x is not None and x <= self.last_x:
                return self.last_x if final else None
            return x
        steps = mine[0]["steps"] if mine else 0
        return max(steps, self.last_x or 0)

    def _log(self, mine: list[dict[str, Any]], theirs: list[dict[str, Any]], final: bool = False) -> None:
        from rlbench.profiling.live import hooks_share, series

        if self.log_to is None or not mine or mine[0].get("started") is None:
            return
        x = self._x(mine, final)
        if x is None:
            return
        backend = self._backend(final)  # (resolved first: an interval waits whole for the run it goes to)
        if backend is None:
            return
        figures = self.window.update([*mine, *theirs])
        if not figures:
            return
        values = series(figures, PREFIX)
        if self.costs is None:
            self.costs = _costs(self.session)
        share = hooks_share(mine, self.costs)
        if math.isfinite(share):
            values[f"{PREFIX}/cost/hooks_pct"] = 100.0 * share
        elapsed = time.perf_counter() - self.t0
        if elapsed > 0:
            values[f"{PREFIX}/cost/logging_pct"] = 100.0 * self.cpu_s / elapsed
        try:
            backend.scalars(values, x)
        except Exception as exc:
            self.failed_points += 1
            self._failed(f"{len(values)} series at step {x} to {backend.name}", exc)
            return
        self.points += 1
        self.series.update(values)
        self.last_x = x

    def _backend(self, final: bool = False) -> Backend | None:
        """The script's run where it opened one (its newest), else rlbench's own; opened on first use (W&B's and
        MLflow's only at the end where the script imported the library and has yet to open its run)."""
        assert self.log_to is not None
        name = self.log_to.backend
        chosen: Backend | None = None
        try:
            if name == "tensorboard":
                found = self.runs.writer()
                if found is not None:
                    w, _kind, logdir = found
                    if w is not None:
                        if not (isinstance(self.backend, UserWriter) and self.backend.writer() is w):
                            chosen = UserWriter(w, logdir)
                    elif not (isinstance(self.backend, EventFile) and self.backend.where == logdir):
                        chosen = self._own_in(logdir)
            elif name == "wandb":
                run = self.runs.wandb_run()
                if run is not None and id(run) not in OWN_RUNS:
                    if not (isinstance(self.backend, Wandb) and self.backend.run is run):
                        chosen = Wandb(run, user=True)
                elif isinstance(self.backend, Wandb) and self.backend.user:
                    return None  # the script finished its run: nothing more goes to W&B
            elif self.runs.mlflow is not None:
                uri, run_id = self.runs.mlflow
                if not (isinstance(self.backend, Mlflow) and self.backend.run_id == run_id):
                    chosen = Mlflow(uri, run_id, user=True)
            if chosen is None and self.backend is None:
                if not final and name in ("wandb", "mlflow") and name in sys.modules:
                    return None  # the script imported it: its own run is likely coming (two inits at once would race)
                chosen = self.own = self._open_own()
        except Exception as exc:
            self._failed(f"opening the {name} run", exc)
            return self.backend
        if chosen is not None:
            self.backend = chosen
            self.used.append((chosen.name, chosen.where, chosen.user))
        return self.backend

    def _own_in(self, logdir: str) -> Backend:
        if isinstance(self.own, EventFile) and self.own.where == logdir:
            return self.own
        self.own = EventFile(logdir, user=True)
        return self.own

    def _open_own(self) -> Backend:
        assert self.log_to is not None
        before = set(threading.enumerate())
        backend = own_backend(self.log_to, self.run_name)
        _own_threads(before, self.session)
        return backend

    def _before_close(self, what: str, handle: Any) -> None:
        """The script is closing its writer or finishing its run: rlbench's figures so far go in first, with the
        steady state's table."""
        b = self.backend
        if b is None or not b.user or os.getpid() != self.pid:
            return
        if (what == "tensorboard" and isinstance(b, UserWriter) and b.writer() is handle) or (
            what == "wandb" and isinstance(b, Wandb) and b.run is handle
        ):
            self._tick(live=False, log=True, final=True)
            self._table()
            self.closed_at = time.perf_counter()
            if what == "wandb":
                self.notes.append(
                    f"the script finished its W&B run ({b.where}) before its end: nothing after that went to W&B"
                )

    def _table(self) -> None:
        from rlbench.profiling.live import bottleneck_table, session_views, snapshot_views, steady

        b = self.backend
        if b is None:
            return
        views = session_views(self.session, self.pid)
        if self.follow_dir is not None:
            views += snapshot_views(self.follow_dir, self.pid)
        try:
            b.text(f"{PREFIX}/bottlenecks", bottleneck_table(steady(views)), self.last_x or 0)
            self.texts += 1
        except Exception as exc:
            self._failed(f"the bottleneck table to {b.name}", exc)

    def _failed(self, what: str, exc: BaseException) -> None:
        line = f"{what}: {type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        if not self.failures:
            print(f"rlbench: warning: --log-to could not log {line}; the profile goes on", file=sys.stderr, flush=True)
        self.failures.append(line)

    # --- ending ------------------------------------------------------------------------------------------------------
    def finish(self, status: str) -> dict[str, Any]:
        """The last interval and the bottleneck table logged, rlbench's own run closed; what logging did and cost."""
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=10.0)
        # the script closed its run at its end, and got rlbench's last figures and the table then: nothing is left
        closed_at_end = self.closed_at is not None and time.perf_counter() - self.closed_at < self.every
        if self.log_to is not None:
            c0 = time.thread_time()
            if not closed_at_end:
                self._tick(live=False, log=True, final=True)
            with self.lock:
                b = self.backend
                done = closed_at_end or (isinstance(b, Wandb) and b.user and id(b.run) in self.runs.finished)
                if b is not None and not done:
                    self._table()
                for backend in {id(x): x for x in (self.own, self.backend) if x is not None}.values():
                    try:
                        backend.close()
                    except Exception as exc:
                        self._failed(f"closing the {backend.name} run", exc)
            self.cpu_s += time.thread_time() - c0
        return self.summary(status)

    def summary(self, status: str | None = None) -> dict[str, Any]:
        return {
            "log_to": self.log_to.describe() if self.log_to else None,
            "every_s": self.every,
            "live": self.live,
            "runs": [{"backend": n, "where": w, "user": u} for n, w, u in self.used],
            "points": self.points,
            "failed_points": self.failed_points,
            "series": len(self.series),
            "texts": self.texts,
            "step": "the script's" if self.runs.step is not None else "agent steps",
            "failures": self.failures[:20],
            "failures_n": len(self.failures),
            "notes": self.notes,
            "cpu_s": self.cpu_s,
            "wall_s": time.perf_counter() - self.t0,
            "status": status,
        }


def _costs(session: Any) -> dict[str, float] | None:
    """The hooks' per-event costs, measured once in this thread (a few milliseconds), for the hooks' live cost."""
    try:
        from rlbench.profiling.session import measure_costs

        return measure_costs(session.settings, n=500, repeats=3)
    except Exception:
        return None


def _own_threads(before: set[threading.Thread], session: Any) -> None:
    """Threads a tracker library started for rlbench's own run are rlbench's: named ``rlbench-...`` (never followed)
    and nothing they booked kept."""
    threads = session.threads
    for t in threading.enumerate():
        if t in before or t.name.startswith("rlbench-"):
            continue
        with contextlib.suppress(Exception):
            t.name = f"rlbench-{t.name}"
        if threads is not None and t.ident is not None:
            with threads.lock:
                threads.live.pop(t.ident, None)


def logging_metric(summary: dict[str, Any]) -> Any:
    """What ``--log-to`` / ``--live`` logged and cost in one repeat, as the ``profile/logging_s`` record (its CPU
    seconds; the meta says what was logged where, and what was not)."""
    from rlbench.results.metrics import PROFILE_LOGGING_S, Metric

    return Metric(PROFILE_LOGGING_S, "s", "none", [float(summary.get("cpu_s") or 0.0)], meta=dict(summary))


# --- rlbench run --log-to: rlbench's own loops ----------------------------------------------------------------------
def _exclusive(seconds: dict[str, float]) -> dict[str, float]:
    """rlbench's loops time a phase with its sub-phases inside (``collect`` holds ``collect/env``): each one's own."""
    out = {}
    for p, s in seconds.items():
        children = sum(v for q, v in seconds.items() if q.startswith(p + "/") and "/" not in q[len(p) + 1 :])
        out[p] = max(s - children, 0.0)
    return out


class RunTracker:
    """``rlbench run --log-to``: a training callback (:class:`~rlbench.instrument.callbacks.Callback`'s protocol) that
    logs each ``every`` seconds of training (rate-limited: it runs at an iteration's end, never per step) into a run it
    opens at TARGET: SPS, each phase's share and time per iteration, on the agent-step axis."""

    def __init__(self, log_to: LogTo, every: float, run_name: str) -> None:
        self.log_to, self.every, self.run_name = log_to, every, run_name
        self.backend: Backend | None = None
        self.acc: dict[str, float] = {}
        self.iters = 0
        self.last_elapsed = 0.0
        self.last_steps = 0
        self.points = 0
        self.failures: list[str] = []
        self.seen = (0.0, 0)  # the last iteration's (elapsed seconds, agent steps)

    def on_train_start(self, info: dict[str, Any]) -> None:
        return None

    def on_iteration_end(self, it: Any) -> bool | None:
        for k, v in it.phase_s.items():
            self.acc[k] = self.acc.get(k, 0.0) + v
        self.iters += 1
        self.seen = (float(it.elapsed_s), int(it.env_steps))
        if it.elapsed_s - self.last_elapsed >= self.every:
            self._log(*self.seen)
        return None

    def on_train_end(self, summary: dict[str, Any]) -> None:
        try:
            if self.iters:
                self._log(*self.seen)
        finally:
            if self.backend is not None:
                with contextlib.suppress(Exception):
                    self.backend.close()

    def _log(self, elapsed: float, steps: int) -> None:
        from rlbench.profiling.live import phase_name

        wall = elapsed - self.last_elapsed
        if wall <= 0 or not self.iters:
            return
        own = _exclusive(self.acc)
        values = {f"{PREFIX}/share/{phase_name(p)}": s / wall for p, s in own.items()}
        values[f"{PREFIX}/share/other"] = max(1.0 - sum(own.values()) / wall, 0.0)
        values.update({f"{PREFIX}/iter_ms/{phase_name(p)}": 1000.0 * s / self.iters for p, s in own.items()})
        if steps > self.last_steps:
            values[f"{PREFIX}/sps"] = (steps - self.last_steps) / wall
        try:
            if self.backend is None:
                self.backend = own_backend(self.log_to, self.run_name)
            self.backend.scalars(values, steps)
            self.points += 1
        except Exception as exc:
            line = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
            if not self.failures:
                print(f"rlbench: warning: --log-to could not log ({line}); the run goes on", file=sys.stderr, flush=True)
            self.failures.append(line)
        self.acc, self.iters = {}, 0
        self.last_elapsed, self.last_steps = elapsed, steps

"""pytest-benchmark files run in a subprocess, their JSON turned into records.

The micro suites (``rlbench.suites.micro``) and a user's own file (``rlbench run path/to/test_x.py``) both run here:
pytest in a child process with ``--benchmark-json``, every benchmark one ``time/call`` metric per (group, impl, size).
The child keeps pytest and the timed code away from the CLI's own state; a benchmark that fails is named in the
records' notes and the others keep their timings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.core.children import child_pythonpath, remove_orphan_dirs, run_child
from rlbench.core.devices import SKIP_SUFFIX
from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option
from rlbench.results.metrics import TIME_CALL, Metric
from rlbench.run.registry import BenchmarkSpec, RunContext


def skip_notes(output: str) -> list[str]:
    """The device-matrix skip reasons (e.g. ``"cuda: not available on this machine (12 cases)"``) in pytest's ``-rs``."""
    counts: dict[str, int] = {}
    for m in re.finditer(r"^SKIPPED \[(\d+)\] [^\n]*?: ([^\n]*)$", output, re.MULTILINE):
        if m.group(2).endswith(SKIP_SUFFIX):
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
    return [f"{reason} ({n} case{'s' if n > 1 else ''} skipped)" for reason, n in sorted(counts.items())]


def failed_tests(output: str) -> list[str]:
    """``"<test id> failed: <error>"`` for each benchmark pytest reports as failed (its ``-rf`` summary)."""
    out = []
    for m in re.finditer(r"^FAILED \S+?::(\S+)(?: - (.*))?$", output, re.MULTILINE):
        out.append(f"{m.group(1)} failed: {m.group(2) or 'see pytest output'}")
    return out


OUTER_PYTEST_STATE = ("PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
"""Variables a running pytest (or a pytest-xdist worker) sets for itself. A child pytest that inherits them takes itself
for an xdist worker, and pytest-benchmark then disables every benchmark: ``rlbench run`` inside a test of a user's
xdist-parallel suite failed with "Can't have both --benchmark-only and --benchmark-disable"."""


def child_pytest_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``extra`` on top, less the state of any pytest this process runs under."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_PYTEST_STATE}
    return {**env, **(extra or {})}


def run_group_files(
    files: list[Path],
    config: Any,
    *,
    rootdir: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    backstop: float = 3600.0,
    autoload_plugins: bool = True,
) -> dict[str, Any]:
    """Run pytest-benchmark on ``files`` in a subprocess; return its JSON (device skip notes under ``"rlbench_notes"``).

    Args:
        files: The pytest-benchmark files.
        config: Options (``max_time``, ``select``, ``threads``).
        rootdir: pytest's rootdir: a suite's directory, or a user's file's directory (its ``conftest.py`` then applies).
        cwd: The child's working directory (default: a temporary directory).
        env: Extra environment variables for the child (a suite's own settings).
        backstop: Seconds after which a child that hangs where no per-benchmark alarm reaches it is ended.
        autoload_plugins: Let pytest load every plugin installed in the environment (a user's file may use them).
            False loads pytest-benchmark alone (rlbench's own suites need nothing else): another plugin only adds
            start-up time to each group's child, and touches the process being timed (hypothesis's imports the whole
            of hypothesis at the session's end, about 1 s a child).

    Returns:
        pytest-benchmark's JSON; its ``"benchmarks"`` list is empty when no benchmark ran (none collected or selected).

    Raises:
        RuntimeError: If pytest fails (its last output lines are in the message).
    """
    remove_orphan_dirs("rlbench-micro-")  # what a kill -9 of an earlier run could not remove
    with tempfile.TemporaryDirectory(prefix=f"rlbench-micro-{os.getpid()}-") as tmp:
        out = Path(tmp) / "bench.json"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *map(str, files),
            "--benchmark-only",
            f"--benchmark-json={out}",
            "--benchmark-save-data",
            f"--benchmark-max-time={config.max_time}",
            "--benchmark-min-rounds=5",
            # rounds of >= 50 µs: a microsecond call is then timed over many iterations per clock read, so the
            # harness's per-round cost (a Python call and two timer reads, ~1-2 µs here) is not in the figure
            "--benchmark-min-time=0.00005",
            "-q",
            "-rfs",
            "-p",
            "no:cacheprovider",
            # not the project's own addopts: `--benchmark-disable` (kept there so that plain test runs are quick) or
            # xdist's `-n` would turn every benchmark off; its conftest.py, markers and other settings still apply
            "-o",
            "addopts=",
            "--rootdir",
            str(rootdir),
        ]
        if config.select:
            cmd += ["-k", config.select]
        child_env = child_pytest_env(env)
        child_env["PYTHONPATH"] = child_pythonpath()  # the working directory and a relative PYTHONPATH still import
        # torch's pool size, read at its start
        child_env["OMP_NUM_THREADS"] = child_env["MKL_NUM_THREADS"] = str(config.threads)
        if not autoload_plugins:
            cmd += ["-p", "pytest_benchmark.plugin"]
            child_env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        try:
            proc = run_child(cmd, cwd=str(cwd or tmp), env=child_env, timeout=backstop)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"pytest-benchmark did not finish within {backstop:g} s and was ended") from None
        failures = failed_tests(proc.stdout)
        if (proc.returncode == 0 and not out.is_file()) or proc.returncode == 5:  # nothing ran: all skipped or deselected
            return {"benchmarks": [], "rlbench_notes": skip_notes(proc.stdout)}
        # exit 1 = some benchmarks failed: keep the others' timings and name the failures; anything else is fatal
        if proc.returncode not in (0, 1) or not out.is_file() or (proc.returncode == 1 and not failures):
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise RuntimeError(f"pytest-benchmark exited {proc.returncode}: {tail}")
        data = json.loads(out.read_text())
        data["rlbench_notes"] = skip_notes(proc.stdout) + failures
        for line in failures:
            warnings.warn(line, stacklevel=2)
        return data


def metrics_from_json(data: dict[str, Any], fallback_group: str | None = None) -> list[Metric]:
    """One ``time/call`` metric per benchmark, with its group, impl and size as case parameters.

    Args:
        data: pytest-benchmark's JSON.
        fallback_group: For files that set no ``extra_info`` (a user's): the cases are then filled in, group from
            pytest-benchmark's own group or else this name, impl from the test function's name, size from the
            parametrization id or ``"-"``.
    """
    metrics = []
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        stats = b.get("stats") or {}
        samples = stats.get("data") or [stats.get("median")]
        params = {"group": info.get("group"), "impl": info.get("impl"), "size": info.get("size") or b.get("param")}
        if fallback_group is not None:
            test = str(b.get("name") or "").partition("[")[0]
            params["group"] = params["group"] or b.get("group") or fallback_group
            params["impl"] = params["impl"] or test or "-"
            params["size"] = str(params["size"]) if params["size"] not in (None, "") else "-"
        for key in ("op", "device"):
            if key in info:
                params[key] = info[key]
        meta = {"elements": info.get("elements"), "test": b.get("name"), "rounds": stats.get("rounds")}
        meta.update({k: v for k, v in info.items() if k not in ("group", "impl", "size", "elements", "op", "device")})
        if data.get("rlbench_notes"):
            meta["notes"] = data["rlbench_notes"]
        metrics.append(Metric(TIME_CALL, "s", "lower", [float(v) for v in samples], meta=meta, params=params))
    return metrics


@dataclass
class FileConfig:
    """Options of a user's pytest-benchmark file run by ``rlbench run path/to/test_x.py``."""

    select: str = option("pytest -k expression selecting benchmarks of the file", default="")
    max_time: float = option("seconds pytest-benchmark spends per benchmark (more: tighter medians)", default=0.3)
    threads: int = option("torch/OpenMP intra-op threads in the benchmark process", default=1)
    seed: int = option("unused by pytest-benchmark files; kept for repeat numbering", default=0)

    def validate(self) -> None:
        """Check values.

        Raises:
            UsageError: On a non-positive ``max_time`` or ``threads``.
        """
        check_choices(self)  # any field that declares its values (none today)
        if not self.max_time > 0:
            raise UsageError(f"--max-time must be positive, got {self.max_time}")
        if self.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.threads}")


def file_spec(path: Path, source: str | None = None) -> BenchmarkSpec:
    """The benchmark of a user's pytest-benchmark file: named after its stem, timed like a micro group.

    pytest runs in a subprocess from the working directory with the file's directory as rootdir (its ``conftest.py``
    applies); cases come from the benchmarks' ``extra_info`` (``group``, ``impl``, ``size``, ``elements``) when set,
    else from the file and test names (see :func:`metrics_from_json`).

    Args:
        path: The file.
        source: How ``rlbench list`` and its messages name it (default: the path as given).
    """
    resolved = path.resolve()
    shown = source or str(path)

    def run(config: FileConfig, ctx: RunContext) -> list[Metric]:
        data = run_group_files([resolved], config, rootdir=resolved.parent, cwd=Path.cwd())
        metrics = metrics_from_json(data, fallback_group=resolved.stem)
        if not metrics:
            raise UsageError(
                f"pytest-benchmark ran no benchmark in {shown}: its tests must take the `benchmark` fixture"
                + (" (check --select)" if config.select else "")
            )
        return metrics

    return BenchmarkSpec(
        name=resolved.stem,
        summary=f"pytest-benchmark file {shown}",
        config_factory=FileConfig,
        run=run,
        report="micro",
        source=shown,
        torch_device=False,  # pytest runs the benchmarks in a child: this process needs no torch for them
    )

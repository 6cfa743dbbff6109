"""Micro-benchmark groups: pytest-benchmark suites run in a subprocess, their JSON turned into records.

``rlbench run gae | buffers | envs | forward | estimators | update-ops`` runs one group, ``rlbench run micro`` all of
them. Each group is a pytest-benchmark file in ``suites/micro/`` (installed as ``rlbench.suites.micro``, so it runs from any
directory); every benchmark in it sets ``extra_info`` with ``group``, ``impl``, ``size`` (a label) and
``elements`` (a number for scaling plots). The subprocess keeps pytest and the timed code away from
the CLI's own state; its ``--benchmark-json`` output (raw timings included) becomes one record per
(group, impl, size), metric ``time/call`` in seconds.

``rlbench run path/to/test_x.py`` runs a user's own pytest-benchmark file the same way (:func:`file_spec`): its
benchmark is named after the file, its cases come from ``extra_info`` when set, else from the test names.

User implementations (``--impl package.module:function``, repeatable) join a group's comparison after a
correctness check against the group's reference; one that disagrees is rejected, with the largest
difference, and not timed. Contracts per group are in :mod:`rlbench.suites.micro.user_impls`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlbench.children import child_pythonpath, remove_orphan_dirs, run_child
from rlbench.errors import UsageError
from rlbench.metrics import TIME_CALL, Metric
from rlbench.options import option
from rlbench.registry import BenchmarkSpec, RunContext

MICRO_DIR = Path(__file__).resolve().parent
GROUPS = {
    "gae": ("test_gae.py", "GAE implementations (reference, NumPy, torch, numba) at T x N in {128x8, 2048x64, 1024x1024}"),
    "buffers": ("test_buffers.py", "replay buffers: add and sample, uniform / prioritized / trajectory / memmap"),
    "envs": ("test_envs.py", "vectorized env step: NumPy CartPole and Pendulum, gymnasium sync / async / native"),
    "forward": ("test_forward.py", "policy forward: separate vs fused, NumPy snapshot, no_grad vs inference_mode"),
    "estimators": ("test_estimators.py", "TD(lambda), group-relative advantages, token-level KL estimators"),
    "update-ops": ("test_update_ops.py", "PPO minibatch step and its ops that are slow at small shapes: torch's vs rlbench's"),
}
USER_IMPLS_ENV = "RLBENCH_USER_IMPLS"
USER_TIMEOUT_ENV = "RLBENCH_USER_TIMEOUT"  # seconds per benchmark of a user implementation (conftest.py enforces it)


@dataclass
class MicroConfig:
    """Options of a micro-benchmark group."""

    impl: tuple[str, ...] = option("your implementation to compare, as package.module:function (repeatable)", default=())
    group: tuple[str, ...] = option(
        "group to run, of this benchmark's (repeatable; default: all of them); `--backend ray` runs each group as a case",
        default=(),
    )
    select: str = option("pytest -k expression selecting benchmarks, e.g. 'numpy or numba'", default="")
    max_time: float = option("seconds pytest-benchmark spends per benchmark (more: tighter medians)", default=0.3)
    threads: int = option(
        "torch/OpenMP intra-op threads in the benchmark process (1: on 2 shared cores an idle-spinning pool beside "
        "microsecond calls slowed numba GAE 3.6 -> 6.1 us and NumPy GAE 36 -> 57 us)",
        default=1,
    )
    timeout: float = option(
        "seconds your implementation (--impl) may take for its import and correctness check, and for each of its "
        "benchmarks; past it, it fails (named in the report) and the other implementations keep their timings",
        default=60.0,
    )
    seed: int = option("unused by micro-benchmarks (inputs are fixed); kept for repeat numbering", default=0)

    def validate(self) -> None:
        """Check values.

        Raises:
            UsageError: On a non-positive ``max_time`` or ``threads``.
        """
        if not self.max_time > 0:
            raise UsageError(f"--max-time must be positive, got {self.max_time}")
        if not self.timeout > 0:
            raise UsageError(f"--timeout must be positive, got {self.timeout}")
        if self.threads < 1:
            raise UsageError(f"--threads must be at least 1, got {self.threads}")
        unknown = [g for g in self.group if g not in GROUPS]
        if unknown:
            raise UsageError(f"unknown --group {unknown[0]!r}; choose from {', '.join(GROUPS)}")


def available_groups() -> list[str]:
    """Groups whose suite file is present in this installation."""
    return [g for g, (f, _) in GROUPS.items() if (MICRO_DIR / f).is_file()]


def skip_notes(output: str) -> list[str]:
    """The device-matrix skip reasons (e.g. ``"cuda: not available on this machine (12 cases)"``) in pytest's ``-rs``."""
    from rlbench.suites.micro.devices import SKIP_SUFFIX

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


def run_group_files(
    files: list[Path],
    config: MicroConfig | FileConfig,
    user_impls: dict[str, str],
    *,
    rootdir: Path = MICRO_DIR,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Run pytest-benchmark on ``files`` in a subprocess; return its JSON (device skip notes under ``"rlbench_notes"``).

    Args:
        files: The pytest-benchmark files.
        config: Options (``max_time``, ``select``, ``threads``; ``timeout`` for users' implementations).
        user_impls: ``--impl`` implementations that passed their check, passed to the group files.
        rootdir: pytest's rootdir: the micro suites' directory, or a user's file's directory (its ``conftest.py`` then
            applies).
        cwd: The child's working directory (default: a temporary directory).

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
            "--rootdir",
            str(rootdir),
        ]
        if config.select:
            cmd += ["-k", config.select]
        env = dict(os.environ)
        env[USER_IMPLS_ENV] = json.dumps(user_impls)
        env["PYTHONPATH"] = child_pythonpath()  # the working directory and a relative PYTHONPATH still import
        timeout = getattr(config, "timeout", 60.0)
        env[USER_TIMEOUT_ENV] = str(timeout)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(config.threads)  # torch's pool size, read at its start
        # a backstop for code that hangs where the per-benchmark alarm cannot reach it (inside a C call)
        backstop = 3600 + 20 * timeout * max(len(user_impls), 1)
        try:
            proc = run_child(cmd, cwd=str(cwd or tmp), env=env, timeout=backstop)
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


def make_run(groups: list[str]):
    """The ``run`` function of a spec covering ``groups``."""

    def run(config: MicroConfig, ctx: RunContext) -> list[Metric]:
        from rlbench.suites.micro.user_impls import check_user_impls

        present = [g for g in _selected(groups, config) if g in available_groups()]
        if not present:
            raise UsageError(f"no suite file for {', '.join(_selected(groups, config))} in this installation")
        user = check_user_impls(config.impl, present, config.timeout)
        data = run_group_files([MICRO_DIR / GROUPS[g][0] for g in present], config, user)
        metrics = metrics_from_json(data)
        if not metrics:
            raise RuntimeError("pytest-benchmark ran no benchmark (check --select)")
        return metrics

    return run


def _selected(groups: list[str], config: MicroConfig) -> list[str]:
    """The groups of ``groups`` that ``--group`` keeps (all when it names none).

    Raises:
        UsageError: When ``--group`` names a group this benchmark does not hold.
    """
    if not config.group:
        return list(groups)
    outside = [g for g in config.group if g not in groups]
    if outside:
        raise UsageError(f"--group {outside[0]} is not part of this benchmark; it holds {', '.join(groups)}")
    return [g for g in groups if g in config.group]


def make_cases(groups: list[str]):
    """The ``cases`` function of a spec covering ``groups``: one case per selected group present here."""

    def cases(config: MicroConfig) -> list[tuple[str, MicroConfig]]:
        return [(g, replace(config, group=(g,))) for g in _selected(groups, config) if g in available_groups()]

    return cases


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
        data = run_group_files([resolved], config, {}, rootdir=resolved.parent, cwd=Path.cwd())
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
    )


BENCHMARKS = [
    *(
        BenchmarkSpec(
            name=name,
            summary=f"micro: {summary}",
            config_factory=MicroConfig,
            run=make_run([name]),
            report="micro",
            cases=make_cases([name]),
        )
        for name, (file, summary) in GROUPS.items()
        if (MICRO_DIR / file).is_file()
    ),
    BenchmarkSpec(
        name="micro",
        summary="micro: every micro-benchmark group",
        config_factory=MicroConfig,
        run=make_run(list(GROUPS)),
        report="micro",
        cases=make_cases(list(GROUPS)),
    ),
]

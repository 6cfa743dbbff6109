"""Micro-benchmark groups: pytest-benchmark suites run in a subprocess, their JSON turned into records.

``rlbench run gae | buffers | envs | forward | estimators | update-ops | target-update`` runs one group, ``rlbench run
micro`` all of them. Each group is a pytest-benchmark file in ``suites/micro/`` (installed as ``rlbench.suites.micro``,
so it runs from any directory); every benchmark in it sets ``extra_info`` with ``group``, ``impl``, ``size`` (a label) and
``elements`` (a number for scaling plots). The subprocess keeps pytest and the timed code away from
the CLI's own state; its ``--benchmark-json`` output (raw timings included) becomes one record per
(group, impl, size), metric ``time/call`` in seconds (:mod:`rlbench.run.pytest_bench`, which also runs a user's own
file for ``rlbench run path/to/test_x.py``).

User implementations (``--impl package.module:function``, repeatable) join a group's comparison after a
correctness check against the group's reference; one that disagrees is rejected, with the largest
difference, and not timed. Contracts per group are in :mod:`rlbench.suites.micro.user_impls`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, option
from rlbench.results.metrics import Metric
from rlbench.run.pytest_bench import metrics_from_json, run_group_files
from rlbench.run.registry import BenchmarkSpec, RunContext

MICRO_DIR = Path(__file__).resolve().parent
GROUPS = {
    "gae": ("test_gae.py", "GAE implementations (reference, NumPy, torch, numba) at T x N in {128x8, 2048x64, 1024x1024}"),
    "buffers": ("test_buffers.py", "replay buffers: add and sample, uniform / prioritized / trajectory / memmap"),
    "envs": ("test_envs.py", "vectorized env step: NumPy CartPole and Pendulum, gymnasium sync / async / native"),
    "forward": ("test_forward.py", "policy forward: separate vs fused, NumPy snapshot, no_grad vs inference_mode"),
    "estimators": ("test_estimators.py", "TD(lambda), group-relative advantages, token-level KL estimators"),
    "update-ops": ("test_update_ops.py", "PPO minibatch step and its ops that are slow at small shapes: torch's vs rlbench's"),
    "target-update": ("test_target_update.py", "Polyak target update: CleanRL's copy_, SB3's mul_/add_, lerp_, foreach lerp"),
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
        "torch/OpenMP intra-op threads in the benchmark process (default 1: an idle-spinning thread pool beside "
        "microsecond calls slows them on a machine with few cores; measure both with --threads)",
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
        check_choices(self)  # any field that declares its values (none today)
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


def make_run(groups: list[str]):
    """The ``run`` function of a spec covering ``groups``."""

    def run(config: MicroConfig, ctx: RunContext) -> list[Metric]:
        from rlbench.suites.micro.user_impls import check_user_impls

        present = [g for g in _selected(groups, config) if g in available_groups()]
        if not present:
            raise UsageError(f"no suite file for {', '.join(_selected(groups, config))} in this installation")
        user = check_user_impls(config.impl, present, config.timeout)
        env = {USER_IMPLS_ENV: json.dumps(user), USER_TIMEOUT_ENV: str(config.timeout)}
        # a backstop for code that hangs where the per-benchmark alarm cannot reach it (inside a C call)
        backstop = 3600 + 20 * config.timeout * max(len(user), 1)
        files = [MICRO_DIR / GROUPS[g][0] for g in present]
        # pytest-benchmark is the only plugin these files use: none other is loaded into the timed process
        data = run_group_files(files, config, rootdir=MICRO_DIR, env=env, backstop=backstop, autoload_plugins=False)
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


BENCHMARKS = [
    *(
        BenchmarkSpec(
            name=name,
            summary=f"micro: {summary}",
            config_factory=MicroConfig,
            run=make_run([name]),
            report="micro",
            cases=make_cases([name]),
            torch_device=False,  # the benchmarks run in a pytest child: this process needs no torch for them
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
        torch_device=False,
    ),
]

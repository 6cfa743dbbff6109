"""Benchmark specs: what a benchmark is called, its configuration dataclass and how one repeat runs.

A spec's ``run`` takes a resolved config (seed set for the repeat) and a :class:`RunContext`, and
returns :class:`Metric` objects; the runner turns them into records. Specs import their heavy
dependencies (torch, ...) inside ``run`` so that ``rlbench list`` and ``--help`` stay instant.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from rlbench.errors import UsageError


@dataclass
class Metric:
    """One measured quantity of one repeat (becomes one record).

    Attributes:
        name: Slash-namespaced metric name.
        unit: Unit of the samples.
        direction: ``higher``, ``lower`` or ``none``.
        samples: Raw measurements.
        x: Optional abscissa per sample.
        meta: Free-form context (labels, paths).
        params: Case parameters added to the benchmark's own (e.g. ``impl`` and ``size`` of a micro-benchmark).
    """

    name: str
    unit: str
    direction: str
    samples: list[float]
    x: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the runner hands a benchmark repeat besides its config.

    Attributes:
        device: Resolved torch device.
        callback: Training callback (progress bar, history), may be ``None``.
        profiler: A started pyinstrument profiler when ``--profile`` was given, else ``None``.
    """

    device: Any
    callback: Any = None
    profiler: Any = None


@dataclass(frozen=True)
class BenchmarkSpec:
    """A registered benchmark.

    Attributes:
        name: Kebab-case id (``ppo-cartpole``).
        summary: One line for ``rlbench list``.
        config_factory: Returns the default config dataclass instance.
        run: ``run(config, context) -> list[Metric]`` for one repeat.
        version: Bumped whenever the benchmark's meaning changes (part of the definition hash).
        report: Name of the report renderer for its records (``"training"``).
    """

    name: str
    summary: str
    config_factory: Callable[[], Any]
    run: Callable[[Any, RunContext], list[Metric]]
    version: int = 1
    report: str = "training"

    def defaults(self) -> dict[str, Any]:
        """The default parameters as a plain dict."""
        cfg = self.config_factory()
        return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


_REGISTRY: dict[str, BenchmarkSpec] = {}


def register(spec: BenchmarkSpec) -> BenchmarkSpec:
    """Add a spec to the registry (ids are unique)."""
    if spec.name in _REGISTRY:
        raise ValueError(f"benchmark {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def _load_builtins() -> None:
    # importing a suite module registers its benchmarks (once: Python caches modules); a test or user that imported
    # one suite directly must not hide the others, so always import them all
    from rlbench.suites import e2e, external, micro_runner, offpolicy, transports  # noqa: F401  (built-in benchmarks)


def all_specs() -> list[BenchmarkSpec]:
    """Every registered benchmark, sorted by name."""
    _load_builtins()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def get_spec(name: str) -> BenchmarkSpec:
    """Look a benchmark up by id.

    Raises:
        UsageError: For an unknown id, suggesting close names and ``rlbench list``.
    """
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise UsageError(f"unknown benchmark {name!r}: {hint}(`rlbench list` shows all benchmarks)")

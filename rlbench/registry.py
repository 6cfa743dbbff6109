"""Benchmark specs and their discovery through the ``rlbench.suites`` entry-point group.

A suite is a module (or any object) named by an entry point of the group ``rlbench.suites``; it holds a
``BENCHMARKS`` list of :class:`BenchmarkSpec` (a single spec, a list, or a callable returning either work too).
rlbench declares its own suites there, in its ``pyproject.toml``, exactly as a third-party package would::

    [project.entry-points."rlbench.suites"]
    my-suite = "mypkg.benchmarks"

A spec's ``run`` takes a resolved config (seed set for the repeat) and a :class:`RunContext`, and returns
:class:`~rlbench.metrics.Metric` objects; the runner turns them into records. Suites import their heavy
dependencies (torch, ...) inside ``run`` so that ``rlbench list`` and ``--help`` stay instant. The registry imports
no suite itself: discovery goes through the installed packages' metadata, so there is no import cycle between
the two.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from rlbench.errors import UsageError
from rlbench.metrics import Metric

ENTRY_POINT_GROUP = "rlbench.suites"


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
    """A benchmark.

    Attributes:
        name: Kebab-case id (``ppo-cartpole``).
        summary: One line for ``rlbench list``.
        config_factory: Returns the default config dataclass instance.
        run: ``run(config, context) -> list[Metric]`` for one repeat.
        version: Bumped whenever the benchmark's meaning changes (part of the definition hash).
        report: Name of the report renderer for its records (``"training"``).
        check: ``check(config)`` validates what needs imports (env ids, optional libraries) before anything runs;
            raises :class:`~rlbench.errors.UsageError`. Optional.
        source: Where the spec came from (the entry point's distribution and module); set by discovery.
    """

    name: str
    summary: str
    config_factory: Callable[[], Any]
    run: Callable[[Any, RunContext], list[Metric]]
    version: int = 1
    report: str = "training"
    check: Callable[[Any], None] | None = None
    source: str = ""

    def defaults(self) -> dict[str, Any]:
        """The default parameters as a plain dict."""
        cfg = self.config_factory()
        return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


@dataclass
class _Discovered:
    specs: dict[str, BenchmarkSpec]
    errors: list[str]


_CACHE: list[_Discovered] = []


def _specs_of(obj: Any) -> list[BenchmarkSpec]:
    if isinstance(obj, BenchmarkSpec):
        return [obj]
    if hasattr(obj, "BENCHMARKS"):
        return _specs_of(obj.BENCHMARKS)
    if isinstance(obj, (list, tuple)) and all(isinstance(s, BenchmarkSpec) for s in obj):
        return list(obj)
    if callable(obj):
        return _specs_of(obj())
    raise TypeError(f"expected BenchmarkSpec objects (or a module with BENCHMARKS), got {type(obj).__name__}")


def _discover() -> _Discovered:
    if _CACHE:
        return _CACHE[0]
    specs: dict[str, BenchmarkSpec] = {}
    errors: list[str] = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.value, e.name)):
        dist = getattr(ep.dist, "name", None) or "?"
        try:
            found = _specs_of(ep.load())
        except Exception as exc:  # a broken plugin must not take rlbench down: name it, keep the others
            errors.append(f"suite {ep.name!r} ({ep.value}, from {dist}) failed to load: {type(exc).__name__}: {exc}")
            continue
        for spec in found:
            if spec.name in specs:
                errors.append(f"benchmark {spec.name!r} from {ep.value} is already defined by {specs[spec.name].source}")
                continue
            specs[spec.name] = replace(spec, source=spec.source or (ep.value if dist == "rlbench" else f"{ep.value} ({dist})"))
    _CACHE.append(_Discovered(specs, errors))
    return _CACHE[0]


def all_specs() -> list[BenchmarkSpec]:
    """Every discovered benchmark, sorted by name."""
    found = _discover().specs
    return [found[k] for k in sorted(found)]


def load_errors() -> list[str]:
    """One line per suite that failed to load (shown by ``rlbench list``)."""
    return list(_discover().errors)


def get_spec(name: str) -> BenchmarkSpec:
    """Look a benchmark up by id.

    Raises:
        UsageError: For an unknown id, suggesting close names and ``rlbench list``.
    """
    found = _discover().specs
    if name in found:
        return found[name]
    close = difflib.get_close_matches(name, list(found), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    broken = f"; {len(_discover().errors)} suite(s) failed to load" if _discover().errors else ""
    raise UsageError(f"unknown benchmark {name!r}: {hint}(`rlbench list` shows all benchmarks{broken})")

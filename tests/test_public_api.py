"""The public API stays where users find it, and import paths the docs gave before the layout change keep working
for one release with a DeprecationWarning that names the new one."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_top_level_names() -> None:
    import rlbench
    from rlbench.results.store import load
    from rlbench.run.registry import BenchmarkSpec, RunContext
    from rlbench.run.userbench import benchmark

    assert rlbench.BenchmarkSpec is BenchmarkSpec and rlbench.RunContext is RunContext
    assert rlbench.benchmark is benchmark and rlbench.load is load
    assert callable(rlbench.phase) and callable(rlbench.session) and callable(rlbench.record)
    assert {"BenchmarkSpec", "RunContext", "benchmark", "load", "phase", "record", "session"} <= set(dir(rlbench))


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("rlbench.registry", "BenchmarkSpec", "rlbench.run.registry"),
        ("rlbench.integrations.sb3", "RlbenchCallback", "rlbench.profiling.sb3"),
    ],
)
def test_old_import_paths_warn_and_still_work(old: str, name: str, new: str) -> None:
    if name == "RlbenchCallback":
        pytest.importorskip("stable_baselines3")
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)

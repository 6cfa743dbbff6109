"""A user's project: ``./suites/`` found by ``rlbench list`` and ``rlbench run``, file and module targets, a
pytest-benchmark file run end to end, and an entry point of a throwaway installed package."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.core.devices import cuda_may_be_present
from rlbench.results.store import read_records
from rlbench.run import registry
from tests.cli.cli_helpers import one_line_error, run_cli_timing_imports

DECORATED = """
import mypkg
from rlbench.run.userbench import benchmark

print("user suite says hello")  # must not end up in `rlbench list --json`


@benchmark(summary="sum of a range, the user's way")
def range_sum(n: int = 100, scale: float = 1.0) -> dict:
    return {"total": mypkg.total(n) * scale}
"""

PYTEST_FILE = """
import pytest


@pytest.mark.parametrize("n", [10, 1000])
def test_sum(benchmark, n, data):
    benchmark(sum, data[:n])


def test_labelled(benchmark, data):
    benchmark.extra_info.update({"group": "sums", "impl": "builtin", "size": "1k", "elements": 1000})
    benchmark(sum, data)


def test_not_a_benchmark():
    assert True
"""

CONFTEST = """
import pytest


@pytest.fixture
def data():
    return list(range(1000))
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A user project in ``tmp_path`` (the working directory): ``mypkg`` and ``suites/`` with the given files."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "_USER_CACHE", {})
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("def total(n):\n    return float(sum(range(n)))\n")
    (tmp_path / "suites").mkdir()

    def write(files: dict[str, str]) -> Path:
        for rel, text in files.items():
            (tmp_path / rel).write_text(textwrap.dedent(text))
        return tmp_path

    yield write
    for name in [m for m in sys.modules if m.startswith((registry.USER_MODULE_PREFIX, "mypkg"))]:
        del sys.modules[name]


def test_rlbench_list_shows_user_suites_and_names_a_broken_one(project, capsys: pytest.CaptureFixture[str]) -> None:
    project(
        {
            "suites/ranges.py": DECORATED,
            "suites/broken.py": "raise RuntimeError('half-written suite')\n",
            "suites/test_speed.py": PYTEST_FILE,
        }
    )
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "range-sum" in out and "./suites/ranges.py" in out and "ppo-cartpole" in out
    assert "test_speed" in out and "./suites/test_speed.py" in out
    assert "warning: user suite ./suites/broken.py failed to import: RuntimeError: half-written suite" in " ".join(out.split())
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)  # the suite's print went to stderr
    rows = {r["name"]: r for r in listed["benchmarks"]}
    assert rows["range-sum"]["source"] == "./suites/ranges.py"
    assert rows["range-sum"]["summary"] == "sum of a range, the user's way"
    assert rows["test_speed"]["source"] == "./suites/test_speed.py"
    assert rows["ppo-cartpole"]["source"] == "rlbench.suites.ppo"
    (error,) = listed["errors"]
    assert "./suites/broken.py" in error and "broken.py:1" in error


@pytest.mark.slow
def test_rlbench_list_with_a_user_suite_never_imports_torch(project) -> None:
    root = project({"suites/ranges.py": DECORATED})
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlbench", "list", "--json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["range-sum"]["source"] == "./suites/ranges.py"
    assert "user suite says hello" in proc.stderr and "| mypkg" in proc.stderr  # it was imported ...
    assert "torch" not in proc.stderr  # ... and torch was not


@pytest.mark.slow
def test_rlbench_run_of_a_benchmark_without_torch_never_imports_torch(project) -> None:
    """An ``@rlbench.benchmark`` function takes no device: on the CPU rlbench does not import torch for it (2-3 s of
    CPU per run), and its records say ``cpu`` as before."""
    root = project({"suites/ranges.py": DECORATED})
    proc, imported = run_cli_timing_imports(["run", "range-sum", "--store", "st", "--json", "--quiet"], root, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| mypkg" in proc.stderr, proc.stderr[-2000:]  # the suite was imported (and ran) ...
    # ... and torch was not, at any depth (on a machine that may have an NVIDIA GPU, it is, for the records to name it)
    assert imported == cuda_may_be_present()
    assert json.loads(proc.stdout)["device"] == "cpu"
    assert {r.device for r in read_records(root / "st")} == {"cpu"}


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("suites/missing.py", "no such file: 'suites/missing.py'"),
        ("suites/ranges.py:nope", "./suites/ranges.py has no attribute 'nope'; it defines range-sum"),
        ("suites/broken.py:x", "importing ./suites/broken.py failed: RuntimeError: half-written suite (broken.py:1)"),
        ("mypkg:total", "mypkg:total is a plain function: decorate it with @rlbench.benchmark"),
        ("mypkg.absent:x", "no module named 'mypkg.absent'"),
        ("suites/ranges.py:benchmark", "a plain function"),
        ("range-summ", "unknown benchmark 'range-summ': did you mean 'range-sum'?"),
    ],
)
def test_bad_targets_exit_2_with_one_line(project, capsys: pytest.CaptureFixture[str], target: str, message: str) -> None:
    quiet = DECORATED.replace('print("user suite says hello")', "")
    project({"suites/ranges.py": quiet, "suites/broken.py": "raise RuntimeError('half-written suite')\n"})
    assert main(["run", target]) == 2
    err = capsys.readouterr().err
    one_line_error(subprocess.CompletedProcess([], 2, "", err))
    assert message in err


@pytest.fixture
def chart_workers(monkeypatch: pytest.MonkeyPatch) -> list[list[bool]]:
    """What each chart worker `rlbench run` starts (in this process) is asked to draw: one list of `draw` results per
    worker started."""
    from rlbench.report import plots

    started: list[list[bool]] = []

    class Watched(plots.ChartWorker):
        def __init__(self) -> None:
            super().__init__()
            self.drawn: list[bool] = []
            started.append(self.drawn)

        def draw(self, jobs, timeout: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
            self.drawn.append(super().draw(jobs, timeout))
            return self.drawn[-1]

    monkeypatch.setattr(plots, "ChartWorker", Watched)
    return started


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("rlbench.profiling") is None, reason="rlbench.profiling.session not there yet")
def test_run_a_decorated_function_by_file_target_and_by_name(
    project, capsys: pytest.CaptureFixture[str], chart_workers: list[list[bool]]
) -> None:
    root = project({"suites/ranges.py": DECORATED})
    assert main(["run", "./suites/ranges.py:range_sum", "--n", "10", "--scale", "2", "--store", "st", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["benchmark"] == "range-sum" and summary["total"] == 90.0
    records = read_records(root / summary["records"])
    total = next(r for r in records if r.metric == "total")
    assert total.samples == [90.0] and total.params == {"n": 10, "scale": 2.0} and total.benchmark == "range-sum"
    assert (root / summary["report"]).is_file()
    assert main(["run", "range-sum", "--store", "st", "--quiet"]) == 0  # ./suites/ by name
    assert chart_workers == []  # its report draws no matplotlib chart: no worker imports matplotlib for nothing
    with pytest.raises(SystemExit):
        main(["run", "./suites/ranges.py:range_sum", "--help"])
    assert "--scale X" in capsys.readouterr().out


@pytest.mark.slow
def test_pytest_benchmark_file_runs_end_to_end(
    project, capsys: pytest.CaptureFixture[str], chart_workers: list[list[bool]]
) -> None:
    root = project({"suites/test_speed.py": PYTEST_FILE, "suites/conftest.py": CONFTEST})
    code = main(["run", "./suites/test_speed.py", "--store", "st", "--max-time", "0.005", "--json", "--report", "r/speed.md"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["benchmark"] == "test_speed"
    cases = {(c["group"], c["impl"], c["size"]) for c in summary["cases"]}
    assert cases == {("test_speed", "test_sum", "10"), ("test_speed", "test_sum", "1000"), ("sums", "builtin", "1k")}
    records = [r for r in read_records(root / summary["records"]) if r.metric == "time/call"]
    assert {r.benchmark for r in records} == {"test_speed"} and len(records) == 3
    assert all(r.samples and r.unit == "s" for r in records)
    labelled = next(r for r in records if r.params["impl"] == "builtin")
    assert labelled.meta["elements"] == 1000
    report = (root / "r" / "speed.md").read_text()
    assert "## test_speed" in report and "## sums" in report and "`test_sum`" in report and "`builtin`" in report
    assert (root / "r" / "speed-sums-call.png").is_file()  # the group with `elements` gets its scaling chart
    if (os.cpu_count() or 1) >= 2:  # drawn by the chart worker that imported matplotlib while the benchmarks ran
        assert chart_workers == [[True]]
    assert main(["report", summary["records"], "-o", "-"]) == 0  # re-rendered from the records alone
    assert "`test_sum`" in capsys.readouterr().out


def test_pytest_benchmark_file_runs_inside_an_xdist_worker_and_past_the_projects_addopts(
    project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rlbench run` called from a test of an xdist-parallel suite, in a project whose pytest settings keep benchmarks
    off for plain test runs: the child pytest must take itself neither for an xdist worker nor for such a run
    (pytest-benchmark then disables every benchmark and refuses --benchmark-only)."""
    ini = "[pytest]\naddopts = --benchmark-disable\n"
    root = project({"suites/test_speed.py": PYTEST_FILE, "suites/conftest.py": CONFTEST, "pytest.ini": ini})
    for name, value in {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2", "PYTEST_CURRENT_TEST": "t"}.items():
        monkeypatch.setenv(name, value)
    code = main(["run", "./suites/test_speed.py", "--store", "st", "--max-time", "0.002", "--select", "labelled", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = [r for r in read_records(root / json.loads(captured.out)["records"]) if r.metric == "time/call"]
    assert len(records) == 1 and records[0].samples


@pytest.mark.slow
def test_pytest_benchmark_file_without_benchmarks_is_a_usage_error(project, capsys: pytest.CaptureFixture[str]) -> None:
    project({"suites/test_plain.py": "def test_nothing_timed():\n    assert True\n"})
    assert main(["run", "test_plain", "--store", "st", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "pytest-benchmark ran no benchmark in ./suites/test_plain.py" in err


ENTRY_POINT_PACKAGE = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "tiny-rlbench-plugin"
        version = "0.0.1"

        [project.entry-points."rlbench.suites"]
        tiny = "tiny_rlbench_plugin.bench"

        [tool.setuptools]
        packages = ["tiny_rlbench_plugin"]
    """,
    "tiny_rlbench_plugin/__init__.py": "",
    "tiny_rlbench_plugin/bench.py": """
        from rlbench.run.userbench import benchmark


        @benchmark(summary="a plugin's benchmark")
        def tiny_plugin_sum(n: int = 10) -> dict:
            return {"total": float(sum(range(n)))}
    """,
}


@pytest.mark.slow
def test_entry_point_of_an_installed_package_is_listed(tmp_path: Path) -> None:
    pkg, site = tmp_path / "pkg", tmp_path / "site"
    for rel, text in ENTRY_POINT_PACKAGE.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(textwrap.dedent(text))
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    proc = subprocess.run([*pip, "--target", str(site), str(pkg)], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:  # no pip or setuptools here: the installed metadata by hand is what pip would write
        dist = site / "tiny_rlbench_plugin-0.0.1.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-rlbench-plugin\nVersion: 0.0.1\n")
        (dist / "entry_points.txt").write_text("[rlbench.suites]\ntiny = tiny_rlbench_plugin.bench\n")
        (site / "tiny_rlbench_plugin").mkdir()
        for rel in ("tiny_rlbench_plugin/__init__.py", "tiny_rlbench_plugin/bench.py"):
            (site / rel).write_text(textwrap.dedent(ENTRY_POINT_PACKAGE[rel]))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    proc = subprocess.run(
        [sys.executable, "-m", "rlbench", "list", "--json"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    rows = {r["name"]: r for r in (listed if isinstance(listed, list) else listed["benchmarks"])}
    assert rows["tiny-plugin-sum"]["source"] == "tiny_rlbench_plugin.bench (tiny-rlbench-plugin)"
    assert rows["tiny-plugin-sum"]["summary"] == "a plugin's benchmark"
    assert "ppo-cartpole" in rows

"""pyproject.toml lists every package (they are listed, not found), every suite entry point loads, the wheel ships
what users run and not the repository's harnesses, and the suites run from a checkout as well as from an install."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench.run.pytest_bench import child_pytest_env
from tests.cli.cli_helpers import run_together

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _packages_under(directory: Path, dotted: str) -> set[str]:
    return {
        ".".join([dotted, *init.parent.relative_to(directory).parts])
        for init in directory.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


CHECKOUT_ONLY = "rlbench.suites.scripts"  # harnesses that regenerate this repository's reports: not installed


def _on_disk() -> set[str]:
    found = _packages_under(ROOT / "rlbench", "rlbench")
    for package, directory in PYPROJECT["tool"]["setuptools"].get("package-dir", {}).items():
        found |= _packages_under(ROOT / directory, package)
    return {p for p in found if p != CHECKOUT_ONLY and not p.startswith(CHECKOUT_ONLY + ".")}


def test_suites_are_installed_from_the_top_level_directory() -> None:
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"rlbench.suites": "suites"}
    assert not (ROOT / "rlbench" / "suites").exists()  # one source of rlbench.suites only


def test_every_package_is_listed_and_every_listed_package_exists() -> None:
    listed = PYPROJECT["tool"]["setuptools"]["packages"]
    assert len(listed) == len(set(listed)), "a package is listed twice"
    on_disk = _on_disk()
    assert {"rlbench", "rlbench.suites", "rlbench.suites.micro"} <= on_disk  # the walk finds both trees
    missing, stale = on_disk - set(listed), set(listed) - on_disk
    assert not missing, f"packages with an __init__.py missing from [tool.setuptools] packages: {sorted(missing)}"
    assert not stale, f"listed packages with no __init__.py: {sorted(stale)}"


def test_every_suite_entry_point_loads_and_has_benchmarks() -> None:
    eps = PYPROJECT["project"]["entry-points"]["rlbench.suites"]
    assert eps, "no suite declared"
    for name, value in eps.items():
        module_name, _, attr = value.partition(":")
        module = importlib.import_module(module_name)
        target = getattr(module, attr) if attr else module
        assert hasattr(target, "BENCHMARKS"), f"entry point {name} = {value!r} has no BENCHMARKS"
        assert module_name.rsplit(".", 1)[0] in _on_disk() or module_name in _on_disk(), value  # shipped in a package


def _checkout_copy(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked and new, nothing ignored: no build output)."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode} in {cwd}:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    )
    return proc


def _run_together(runs: list[tuple[list[str], Path, dict[str, str]]]) -> None:
    """:func:`_run` of every ``(cmd, cwd, env)`` at the same time; each must exit 0."""
    for proc, (cmd, cwd, _) in zip(run_together(runs, timeout=600), runs, strict=True):
        out, err = proc.stdout, proc.stderr
        assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode} in {cwd}:\n{out[-2000:]}{err[-3000:]}"


@pytest.mark.slow
def test_suites_run_from_a_fresh_checkout_with_an_install_and_an_editable_install(tmp_path: Path) -> None:
    """The micro suites' pytest files run from a clone's root and from elsewhere, and `rlbench import` stores their
    JSON, both beside a normal install of that clone (whose `rlbench/` the clone's root would shadow) and beside
    this environment's editable one; the installed wheel holds the suites and none of the harnesses."""
    clone = _checkout_copy(tmp_path / "clone")
    site = tmp_path / "site"  # `pip install .` of the clone, without touching this environment
    _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), "."],
        clone,
        dict(os.environ),
    )
    assert (site / "rlbench" / "suites" / "micro" / "test_gae.py").is_file()
    assert not (site / "rlbench" / "suites" / "scripts").exists()  # harnesses stay in the repository
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # as from a user's shell: not inside this pytest (under pytest-xdist, a child pytest that sees the worker's
    # variables takes itself for a worker, and pytest-benchmark turns every benchmark off)
    shell = child_pytest_env()
    installed = {**shell, "PYTHONPATH": str(site)}
    editable = {k: v for k, v in shell.items() if k != "PYTHONPATH"}
    # no cache folder in the clone, and not hypothesis's plugin (it imports all of hypothesis at the end: ~1 s a run)
    plugins = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    test = ["suites/micro/test_gae.py", "--benchmark-max-time", "0.01", "-q", *plugins, "-k", "numpy"]
    cases = [("installed", installed, clone), ("installed", installed, elsewhere), ("editable", editable, clone)]
    timed, imports = [], []
    for label, env, cwd in cases:
        out = tmp_path / f"{label}-{cwd.name}.json"
        path = test[0] if cwd == clone else str(clone / test[0])
        timed.append(([sys.executable, "-m", "pytest", path, *test[1:], f"--benchmark-json={out}"], cwd, env))
        imports.append(
            ([sys.executable, "-m", "rlbench", "import", str(out), "--store", str(tmp_path / "st")], elsewhere, env)
        )
    # the built-in micro group by name, from a directory that is no checkout, with the installed copy
    run_gae = [sys.executable, "-m", "rlbench", "run", "gae", "--max-time", "0.01", "--select", "numpy"]
    timed.append(([*run_gae, "--quiet", "--store", str(tmp_path / "st")], elsewhere, installed))
    _run_together(timed)  # independent runs, at once (what they measure is not checked here)
    for cmd, cwd, env in imports:  # each pytest run's JSON, through the same installation
        _run(cmd, cwd, env)
    runs = list((tmp_path / "st").glob("*.jsonl"))
    assert len(runs) == 4, runs  # three imports and one run

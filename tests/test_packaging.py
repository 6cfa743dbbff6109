"""pyproject.toml lists every package (they are listed, not found) and every suite entry point loads."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

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


def _on_disk() -> set[str]:
    found = _packages_under(ROOT / "rlbench", "rlbench")
    for package, directory in PYPROJECT["tool"]["setuptools"].get("package-dir", {}).items():
        found |= _packages_under(ROOT / directory, package)
    return found


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

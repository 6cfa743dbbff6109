"""rlbench's numba kernels cache in the user's cache folder, never inside the installed package (issue 57, newcomer 1).

numba caches a ``cache=True`` kernel beside its source when it can write there: inside ``site-packages/rlbench`` for
an installed rlbench, where files pip never installed outlived a reinstall and turned ``rlbench`` into an empty
namespace package. ``.ci/run`` runs the README's two commands in one venv and a user suite after them; these tests
check the mechanism, :func:`rlbench.core.jit.njit`.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import rlbench
from rlbench.core import jit

numba = pytest.importorskip("numba")
from numba.core import config  # noqa: E402

KERNELS = """
def plus_one(x):
    return x + 1


def times_two(x):
    return 2 * x
"""


def _module(folder: Path):
    """A module in ``folder`` standing for an installed package's kernels."""
    folder.mkdir(parents=True)
    (folder / "kern.py").write_text(KERNELS)
    spec = importlib.util.spec_from_file_location(f"kern_{abs(hash(folder))}", folder / "kern.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cached(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc"))


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(config, "CACHE_DIR", "")  # as numba is without NUMBA_CACHE_DIR
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(jit.sys, "platform", "linux")
    return tmp_path / "cache" / "rlbench" / "numba"


def test_an_rlbench_kernel_caches_in_the_user_folder_and_a_users_kernel_where_numba_puts_it(
    tmp_path: Path, user_cache: Path
) -> None:
    package = tmp_path / "site-packages" / "pkg"
    kern = _module(package)
    ours = jit.njit(kern.plus_one, "int64(int64)")
    assert ours(41) == 42
    assert _cached(package) == [] and _cached(user_cache), (_cached(package), _cached(user_cache))
    assert config.CACHE_DIR == ""  # set only while rlbench's kernel was declared
    theirs = numba.njit("int64(int64)", cache=True)(kern.times_two)  # the user's own kernel, after ours
    assert theirs(21) == 42
    assert [n for n in _cached(package) if "times_two" in n] and not [n for n in _cached(package) if "plus_one" in n]


def test_an_unwritable_cache_folder_means_no_disk_cache_not_one_inside_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config, "CACHE_DIR", "")
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # its rlbench/ folder cannot be made
    monkeypatch.setattr(jit.sys, "platform", "linux")
    package = tmp_path / "site-packages" / "pkg"
    kern = _module(package)
    assert jit.njit(kern.plus_one, "int64(int64)")(1) == 2
    assert _cached(tmp_path) == []


def test_a_users_numba_cache_dir_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "their-cache"
    monkeypatch.setattr(config, "CACHE_DIR", str(theirs))
    kern = _module(tmp_path / "site-packages" / "pkg")
    assert jit.njit(kern.plus_one, "int64(int64)")(1) == 2
    assert _cached(theirs) and _cached(tmp_path / "site-packages") == [] and str(theirs) == config.CACHE_DIR


def test_every_numba_kernel_of_rlbench_goes_through_the_one_helper() -> None:
    """No ``cache=True`` in rlbench's code but the helper's own: a new kernel cannot cache beside its source."""
    root = Path(rlbench.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path == root / "core" / "jit.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "cache":
                found.append(f"{path.relative_to(root)}:{node.value.lineno}")
    assert found == []

"""Benchmark specs and their discovery: the ``rlbench.suites`` entry points, the project's ``./suites/``, and targets.

A suite is a module (or any object) named by an entry point of the group ``rlbench.suites``; it holds a
``BENCHMARKS`` list of :class:`BenchmarkSpec` (a single spec, a list, or a callable returning either work too), or
functions decorated with :func:`rlbench.benchmark <rlbench.run.userbench.benchmark>`. rlbench declares its own suites
there, in its ``pyproject.toml``, exactly as a third-party package would::

    [project.entry-points."rlbench.suites"]
    my-suite = "mypkg.benchmarks"

A project need not be installed: as asv finds ``benchmarks/`` and pytest finds tests, the registry also imports every
``./suites/*.py`` of the working directory (by file path; names starting with ``_``, ``conftest.py`` and the
pytest-benchmark files ``test_*.py`` excepted), with the working directory on ``sys.path`` so that they can import the
project's own packages. Entry points come first: a later benchmark of the same name is reported, not run. A module
that fails to import is named by ``rlbench list`` and hides nothing else.

:func:`resolve_target` also takes what is not a name: ``path/to/file.py:NAME``, ``package.module:NAME`` and
``path/to/file.py`` (its one benchmark, or a pytest-benchmark file, which the caller knows how to run).

A spec's ``run`` takes a resolved config (seed set for the repeat) and a :class:`RunContext`, and returns
:class:`~rlbench.results.metrics.Metric` objects; the runner turns them into records. Suites import their heavy
dependencies (torch, ...) inside ``run`` so that ``rlbench list`` and ``--help`` stay instant. The registry imports
no suite itself: discovery goes through the installed packages' metadata, so there is no import cycle between
the two.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rlbench.core.errors import UsageError
from rlbench.results.metrics import Metric

ENTRY_POINT_GROUP = "rlbench.suites"
USER_SUITES_DIR = "suites"  #: the project directory whose ``*.py`` files hold the user's benchmarks
SPEC_ATTRIBUTE = "__rlbench_spec__"  #: set by ``@rlbench.benchmark`` on the function it decorates
USER_MODULE_PREFIX = "rlbench_user_suite_"  #: ``sys.modules`` names of modules imported by file path


@dataclass
class RunContext:
    """What the runner hands a benchmark repeat besides its config.

    Attributes:
        device: Resolved torch device.
        callback: Training callback (progress bar, history), may be ``None``.
        profiler: A started pyinstrument profiler when ``--pyinstrument`` was given, else ``None``.
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
            raises :class:`~rlbench.core.errors.UsageError`. Optional.
        source: Where the spec came from (the entry point's module and distribution, ``./suites/x.py``); set by
            discovery.
        cases: ``cases(config) -> [(label, config)]`` splits one repeat into independent parts whose metrics together
            are the repeat's (a micro suite's groups), so ``--backend ray`` can run them as separate tasks. Optional:
            without it a repeat is one case.
        torch_device: Whether ``run`` needs ``context.device`` as a ``torch.device``. ``False`` for
            ``@rlbench.benchmark`` functions, which take no device, and for micro suites, whose benchmarks run in a
            pytest child: on the CPU (``--device auto`` or ``cpu``) they get the string ``"cpu"``
            (:func:`~rlbench.core.devices.resolve_device`), and torch is imported only if their own code imports it
            (or where an NVIDIA GPU may be, for the records to name it).
    """

    name: str
    summary: str
    config_factory: Callable[[], Any]
    run: Callable[[Any, RunContext], list[Metric]]
    version: int = 1
    report: str = "training"
    check: Callable[[Any], None] | None = None
    source: str = ""
    cases: Callable[[Any], list[tuple[str, Any]]] | None = None
    torch_device: bool = True

    def defaults(self) -> dict[str, Any]:
        """The default parameters as a plain dict."""
        cfg = self.config_factory()
        return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


@dataclass
class _Discovered:
    specs: dict[str, BenchmarkSpec]
    errors: list[str]
    pytest_files: list[Path] = field(default_factory=list)


_CACHE: list[_Discovered] = []  # the entry points' benchmarks: found once per process
_USER_CACHE: dict[str, _Discovered] = {}  # ./suites/ of each working directory looked at


def reset_cache() -> None:
    """Forget every discovery (entry points and ``./suites/``) and the modules imported by file path.

    The next lookup discovers again; tests that change the working directory or write suite files call it.
    """
    _CACHE.clear()
    _USER_CACHE.clear()
    for name in [m for m in sys.modules if m.startswith(USER_MODULE_PREFIX)]:
        del sys.modules[name]


def _decorated_in(module: types.ModuleType) -> list[BenchmarkSpec]:
    """The specs of the ``@rlbench.benchmark`` functions in a module's namespace, in definition order."""
    found: dict[int, BenchmarkSpec] = {}
    for value in list(vars(module).values()):
        spec = getattr(value, SPEC_ATTRIBUTE, None) if isinstance(value, types.FunctionType) else None
        if isinstance(spec, BenchmarkSpec):
            found.setdefault(id(spec), spec)
    return list(found.values())


def _spec_of_decorated(obj: Any) -> BenchmarkSpec | None:
    spec = getattr(obj, SPEC_ATTRIBUTE, None) if callable(obj) and not isinstance(obj, type) else None
    return spec if isinstance(spec, BenchmarkSpec) else None


def _specs_of(obj: Any) -> list[BenchmarkSpec]:
    if isinstance(obj, BenchmarkSpec):
        return [obj]
    decorated = _spec_of_decorated(obj)
    if decorated is not None:
        return [decorated]
    if hasattr(obj, "BENCHMARKS"):
        listed = _specs_of(obj.BENCHMARKS)
        extra = _decorated_in(obj) if isinstance(obj, types.ModuleType) else []
        return listed + [s for s in extra if all(s is not t for t in listed)]
    if isinstance(obj, types.ModuleType):
        found = _decorated_in(obj)
        if found:
            return found
        raise TypeError(
            f"expected BenchmarkSpec objects: module {obj.__name__} has no BENCHMARKS list and no @rlbench.benchmark function"
        )
    if isinstance(obj, (list, tuple)):
        items = [_spec_of_decorated(s) or s for s in obj]
        if all(isinstance(s, BenchmarkSpec) for s in items):
            return list(items)
    elif callable(obj):
        return _specs_of(obj())
    raise TypeError(f"expected BenchmarkSpec objects (or a module with BENCHMARKS), got {type(obj).__name__}")


def _discover() -> _Discovered:
    """The entry points' benchmarks (cached; independent of the working directory)."""
    if _CACHE:
        return _CACHE[0]
    specs: dict[str, BenchmarkSpec] = {}
    originals: dict[str, BenchmarkSpec] = {}
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
                if originals[spec.name] is not spec:  # one module re-exporting another's benchmark is no clash
                    errors.append(f"benchmark {spec.name!r} from {ep.value} is already defined by {specs[spec.name].source}")
                continue
            originals[spec.name] = spec
            specs[spec.name] = replace(spec, source=spec.source or (ep.value if dist == "rlbench" else f"{ep.value} ({dist})"))
    _CACHE.append(_Discovered(specs, errors))
    return _CACHE[0]


def _rlbench_suites_dirs() -> set[Path]:
    """Where the ``rlbench.suites`` package lives (found without importing it, so without torch)."""
    try:
        found = importlib.util.find_spec("rlbench.suites")
    except (ImportError, ValueError):
        return set()
    locations = (found.submodule_search_locations or []) if found is not None else []
    return {Path(p).resolve() for p in locations}


def user_suites_dir(cwd: Path | None = None) -> Path | None:
    """The project's ``./suites/`` directory, or ``None`` if there is none.

    rlbench's own checkout has a top-level ``suites/`` too (installed as ``rlbench.suites``): run from there, it is not
    a user suite directory.

    Args:
        cwd: The project directory (default: the working directory).
    """
    directory = (cwd or Path.cwd()) / USER_SUITES_DIR
    if not directory.is_dir() or directory.resolve() in _rlbench_suites_dirs() or _is_rlbench_checkout(directory.parent):
        return None
    return directory


def _is_rlbench_checkout(project: Path) -> bool:
    """Whether ``project`` is a checkout of rlbench itself (its ``suites/`` are the built-ins, whichever copy of rlbench
    is installed: a non-editable install puts them in site-packages, away from the checkout)."""
    pyproject = project / "pyproject.toml"
    if not (project / "rlbench" / "__init__.py").is_file() or not pyproject.is_file():
        return False
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r'^name\s*=\s*"rlbench"\s*$', text, re.MULTILINE) is not None


def display_path(path: Path) -> str:
    """``./suites/x.py`` for a file under the working directory, else the path as given (absolute if it was)."""
    try:
        return "./" + Path(os.path.abspath(path)).relative_to(Path.cwd()).as_posix()
    except (ValueError, OSError):  # outside the working directory, or the directory is gone
        return str(path)


_BENCHMARK_FIXTURE = re.compile(r"^\s*(?:async\s+)?def\s+test\w*\s*\([^)]*\bbenchmark\b", re.MULTILINE)


def is_pytest_benchmark_file(path: Path) -> bool:
    """Whether ``path`` is a pytest-benchmark file: named ``test_*.py`` / ``*_test.py``, or with test functions that
    take the ``benchmark`` fixture. Read as text, never imported."""
    if path.name.startswith("test_") or path.name.endswith("_test.py"):
        return True
    try:
        return bool(_BENCHMARK_FIXTURE.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


@contextlib.contextmanager
def cwd_on_path() -> Iterator[None]:
    """Put the working directory first on ``sys.path`` for the block (so the project's own packages import)."""
    entry = os.getcwd()
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    importlib.invalidate_caches()  # files written a moment ago (a test's) must be seen
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def import_file(path: Path) -> types.ModuleType:
    """Import a Python file by path under a unique module name (the working directory on ``sys.path`` meanwhile).

    The module stays in ``sys.modules`` (name: :data:`USER_MODULE_PREFIX` + stem + a hash of the resolved path), so a
    second import of the same file returns the same module. What it prints goes to stderr, so that ``--json`` output
    stays one object.

    Raises:
        Exception: Whatever the module's code raised (``SystemExit`` included); nothing of it stays behind.
    """
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"{USER_MODULE_PREFIX}{re.sub(r'[^0-9a-zA-Z_]', '_', resolved.stem)}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} (not a Python source file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with cwd_on_path(), contextlib.redirect_stdout(sys.stderr):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


_RLBENCH_DIR = str(Path(__file__).resolve().parent) + os.sep


def _why(exc: BaseException) -> str:
    """``Type: message (file.py:line)``: one line naming where the user's code raised."""
    text = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, SystemExit):
        text = f"exit status {exc.code}" if exc.code is not None else "exit"
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if not f.filename.startswith("<") and not f.filename.startswith(_RLBENCH_DIR)]
    if user and not isinstance(exc, SyntaxError):  # a SyntaxError's message names its line already
        where = f" ({Path(user[-1].filename).name}:{user[-1].lineno})"
    return f"{type(exc).__name__}: {text}{where}" if text else f"{type(exc).__name__}{where}"


def _discover_user() -> _Discovered:
    """The benchmarks of the working directory's ``./suites/*.py`` (cached per working directory)."""
    try:
        cwd = Path.cwd()
    except OSError:  # the working directory was removed: no project to look at
        return _Discovered({}, [])
    key = str(cwd.resolve())
    if key in _USER_CACHE:
        return _USER_CACHE[key]
    found = _Discovered({}, [])
    directory = user_suites_dir(cwd)
    taken = _discover().specs
    for path in sorted(directory.glob("*.py")) if directory is not None else []:
        if path.name.startswith("_") or path.name == "conftest.py" or not path.is_file():
            continue
        source = display_path(path)
        if is_pytest_benchmark_file(path):
            found.pytest_files.append(path)
            continue
        try:
            module = import_file(path)
        except (Exception, SystemExit) as exc:  # the user's module must not take rlbench down: name it
            found.errors.append(f"user suite {source} failed to import: {_why(exc)} (fix it, or prefix its name with _)")
            continue
        if not hasattr(module, "BENCHMARKS") and not _decorated_in(module):
            found.errors.append(
                f"user suite {source} defines no benchmark: add a BENCHMARKS list of BenchmarkSpec or an @rlbench.benchmark "
                "function (or prefix its name with _)"
            )
            continue
        try:
            specs = _specs_of(module)
        except Exception as exc:
            found.errors.append(f"user suite {source}: {_why(exc)}")
            continue
        for spec in specs:
            other = taken.get(spec.name) or found.specs.get(spec.name)
            if other is not None:
                found.errors.append(
                    f"benchmark {spec.name!r} from {source} is already defined by {other.source}; rename it (name=...)"
                )
                continue
            found.specs[spec.name] = replace(spec, source=spec.source or source)
    _USER_CACHE[key] = found
    return found


def _all_found() -> dict[str, BenchmarkSpec]:
    user = _discover_user().specs
    return {**_discover().specs, **{k: v for k, v in user.items() if k not in _discover().specs}}


def all_specs() -> list[BenchmarkSpec]:
    """Every discovered benchmark (entry points and ``./suites/``), sorted by name."""
    found = _all_found()
    return [found[k] for k in sorted(found)]


def load_errors() -> list[str]:
    """One line per suite that failed to load or benchmark name defined twice (shown by ``rlbench list``)."""
    return [*_discover().errors, *_discover_user().errors]


def user_pytest_files() -> list[Path]:
    """The pytest-benchmark files (``test_*.py``) of the project's ``./suites/``, sorted."""
    return list(_discover_user().pytest_files)


def _unknown(name: str, candidates: list[str]) -> UsageError:
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    n_errors = len(load_errors())
    broken = f"; {n_errors} suite(s) failed to load" if n_errors else ""
    return UsageError(f"unknown benchmark {name!r}: {hint}(`rlbench list` shows all benchmarks{broken})")


def get_spec(name: str) -> BenchmarkSpec:
    """Look a benchmark up by id.

    Raises:
        UsageError: For an unknown id, suggesting close names and ``rlbench list``.
    """
    if name in _discover().specs:  # entry points win over ./suites/: no need to import the project's modules
        return _discover().specs[name]
    found = _all_found()
    if name in found:
        return found[name]
    raise _unknown(name, list(found))


_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_TARGET_FORMS = "a benchmark name, FILE.py, FILE.py:NAME or package.module:NAME"


def _is_path(text: str) -> bool:
    return text.endswith(".py") or "/" in text or os.sep in text


def resolve_target(target: str, pytest_file: Callable[[Path], BenchmarkSpec] | None = None) -> BenchmarkSpec:
    """The benchmark ``rlbench run TARGET`` means.

    Args:
        target: One of

            * a benchmark name (``ppo-cartpole``, or one defined in ``./suites/``); the stem of a pytest-benchmark file
              of ``./suites/`` (``test_my_gae``) too;
            * ``path/to/file.py:NAME`` or ``package.module:NAME``: the file or module is imported (working directory
              on ``sys.path``) and ``NAME`` is a :class:`BenchmarkSpec`, an ``@rlbench.benchmark`` function, a list of
              specs or a module with ``BENCHMARKS`` holding one spec (``NAME`` may also be a benchmark name defined
              there);
            * ``path/to/file.py``: its one benchmark, or, for a pytest-benchmark file (:func:`is_pytest_benchmark_file`),
              what ``pytest_file`` makes of it.
        pytest_file: ``pytest_file(path) -> BenchmarkSpec`` for pytest-benchmark files (the registry cannot run them).

    Raises:
        UsageError: With one line saying what to do: unknown name, missing file or attribute, a module that fails to
            import, an object that is no benchmark, a file with several benchmarks and no ``:NAME``.
    """
    where, colon, attr = target.rpartition(":")
    if not colon and not _is_path(target):
        if target in _discover().specs:  # entry points win over ./suites/: no need to import the project's modules
            return _discover().specs[target]
        found = _all_found()
        if target in found:
            return found[target]
        files = {p.stem: p for p in user_pytest_files()} if pytest_file is not None else {}
        if target in files:
            return pytest_file(files[target])  # type: ignore[misc]
        if Path(target).exists():  # `rlbench run suites` or `rlbench run bench` (a directory, a file without .py)
            return _file_target(target, Path(target), "", pytest_file)
        raise _unknown(target, [*found, *files])
    if not colon:
        where, attr = target, ""
    elif not where or not attr:
        raise UsageError(f"cannot read the benchmark target {target!r}: give {_TARGET_FORMS}")
    if _is_path(where) or Path(where).is_file():
        return _file_target(target, Path(where), attr, pytest_file)
    if not _MODULE_NAME.match(where):
        raise UsageError(f"{where!r} is neither a .py file nor a package.module name: give {_TARGET_FORMS}")
    return _pick(target, where, _import_module(where), attr)


def _file_target(target: str, path: Path, attr: str, pytest_file: Callable[[Path], BenchmarkSpec] | None) -> BenchmarkSpec:
    if path.is_dir():
        raise UsageError(
            f"{str(path)!r} is a directory: name a .py file in it, or a module as package.module:NAME "
            "(`rlbench list` shows the benchmarks of ./suites/)"
        )
    if not path.is_file():
        raise UsageError(f"no such file: {str(path)!r} (relative to {os.getcwd()}); give {_TARGET_FORMS}")
    if path.suffix != ".py":
        raise UsageError(f"{str(path)!r} is not a Python file: give {_TARGET_FORMS}")
    source = display_path(path)
    if not attr and is_pytest_benchmark_file(path):
        if pytest_file is None:
            raise UsageError(f"{source} is a pytest-benchmark file: run it with `rlbench run {source}`")
        return pytest_file(path)
    try:
        module = import_file(path)
    except (Exception, SystemExit) as exc:
        raise UsageError(
            f"importing {source} failed: {_why(exc)}; fix the file (`python {source}` shows the traceback)"
        ) from None
    return _pick(target, source, module, attr)


def _import_module(name: str) -> types.ModuleType:
    try:
        with cwd_on_path(), contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise UsageError(
                f"no module named {exc.name!r}: run from the directory that holds it, add that directory to PYTHONPATH, "
                "or install its package"
            ) from None
        raise UsageError(f"importing {name} failed: {_why(exc)}; install what it needs") from None
    except (Exception, SystemExit) as exc:
        raise UsageError(f"importing {name} failed: {_why(exc)}; fix the module") from None


def _names(specs: list[BenchmarkSpec]) -> str:
    return ", ".join(s.name for s in specs)


def _pick(target: str, source: str, module: types.ModuleType, attr: str) -> BenchmarkSpec:
    """The one benchmark ``module`` (or its attribute ``attr``) holds, with ``source`` recorded."""
    if not attr:
        try:
            specs = _specs_of(module)
        except Exception:
            raise UsageError(
                f"{source} defines no benchmark: add a BENCHMARKS list of BenchmarkSpec or decorate a function with "
                "@rlbench.benchmark (a pytest-benchmark file needs test functions taking the `benchmark` fixture)"
            ) from None
        if len(specs) > 1:
            raise UsageError(f"{source} defines {len(specs)} benchmarks ({_names(specs)}): pick one with `{source}:NAME`")
        return replace(specs[0], source=specs[0].source or source)
    if hasattr(module, attr):
        obj = getattr(module, attr)
    else:
        try:
            defined = _specs_of(module)
        except Exception:
            defined = []
        by_name = {s.name: s for s in defined}
        if attr not in by_name:
            what = f"; it defines {_names(defined)}" if defined else ""
            raise UsageError(f"{source} has no attribute {attr!r}{what} (`{source}:NAME` names one)")
        obj = by_name[attr]
    if isinstance(obj, types.FunctionType) and _spec_of_decorated(obj) is None and attr != "BENCHMARKS":
        raise UsageError(
            f"{target} is a plain function: decorate it with @rlbench.benchmark (keyword parameters with defaults), "
            "or point at a BenchmarkSpec"
        )
    known = isinstance(obj, (BenchmarkSpec, list, tuple, types.ModuleType, types.FunctionType)) or hasattr(obj, "BENCHMARKS")
    if not known and _spec_of_decorated(obj) is None:
        raise UsageError(
            f"{target} is a {type(obj).__name__}, not a benchmark: expected a BenchmarkSpec, an @rlbench.benchmark "
            "function, or a list or module of BENCHMARKS"
        )
    try:
        specs = _specs_of(obj)
    except Exception as exc:
        raise UsageError(
            f"{target} holds no benchmark ({exc}): point at a BenchmarkSpec or an @rlbench.benchmark function"
        ) from None
    if not specs:
        raise UsageError(f"{target} holds no benchmark: its list is empty")
    if len(specs) > 1:
        raise UsageError(f"{target} holds {len(specs)} benchmarks ({_names(specs)}): pick one with `{source}:NAME`")
    return replace(specs[0], source=specs[0].source or source)

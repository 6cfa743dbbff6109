"""``@rlbench.benchmark``: a plain function becomes a benchmark, its keyword parameters command-line options.

::

    import rlbench

    @rlbench.benchmark(summary="my GAE over a (T, N) rollout")
    def my_gae(steps: int = 2048, envs: int = 64, lam: float = 0.95) -> dict[str, float]:
        \"\"\"My GAE.

        Args:
            steps: rollout length T.
        \"\"\"
        ...
        return {"advantage_mean": float(adv.mean())}

Put it in the project's ``./suites/`` and ``rlbench run my-gae --steps 4096`` runs it (``rlbench run
path/to/file.py:my_gae`` from anywhere): every parameter is an option (help from the docstring's ``Args:``, else
"parameter of my_gae"), every repeat calls the function in-process under rlbench's automatic phase attribution
(:func:`rlbench.profiling.session.profile_call`), and the ``{name: float}`` dict it returns is recorded beside the
phase timings. A function without a ``seed`` parameter still gets ``--seed`` (repeat numbering only; it is not
passed).

A parameter may have any name a built-in benchmark's option has (``activation``, ``precision``, ``threads``, ...):
its own annotation and default decide what ``--activation`` accepts, whatever another benchmark's ``--activation``
allows. ``activation: str = "gelu"`` takes any word; ``activation: Literal["gelu", "silu"] = "gelu"`` takes those
two (they show in ``--help``, and ``--activation relu`` is refused with the allowed values named).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar, overload

from rlbench.core.errors import UsageError
from rlbench.core.options import check_choices, literal_values, option
from rlbench.run.registry import SPEC_ATTRIBUTE, BenchmarkSpec, RunContext, cwd_on_path

F = TypeVar("F", bound=Callable[..., Any])

PARAMETER_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
#: options every ``rlbench run`` has (``timeout``: every ``@rlbench.benchmark``'s): a parameter of the same name would
#: shadow them
RESERVED = ("repeats", "store", "report", "profile", "json", "quiet", "backend", "help", "timeout")
#: the field of rlbench's ``--timeout`` in every ``@rlbench.benchmark``'s config
TIMEOUT = "timeout"


@overload
def benchmark(fn: F, /) -> F: ...


@overload
def benchmark(
    fn: None = None, /, *, name: str | None = None, summary: str | None = None, version: int = 1
) -> Callable[[F], F]: ...


def benchmark(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, summary: str | None = None, version: int = 1
) -> Any:
    """Declare a function as an rlbench benchmark: ``@benchmark`` or ``@benchmark(name=..., summary=..., version=...)``.

    The function is returned unchanged (it can still be called directly), with the attribute ``__rlbench_spec__``
    holding its :class:`~rlbench.run.registry.BenchmarkSpec`; discovery (``./suites/*.py``, entry-point modules) and
    ``rlbench run FILE.py:NAME`` find it there.

    Args:
        fn: The function (when used without parentheses). Every parameter must be a keyword parameter with a default of
            type ``int``, ``float``, ``str`` or ``bool`` (an annotation, if any, must be that type, or a
            ``Literal[...]`` of ``str`` or ``int`` values, the default among them: the values the option allows).
        name: The benchmark's id (default: the function's name with ``_`` turned into ``-``).
        summary: One line for ``rlbench list`` (default: the first line of the docstring).
        version: Bump it when the benchmark's meaning changes (part of the records' definition hash).

    Returns:
        The function, or a decorator when called with keyword arguments only.

    Raises:
        TypeError: When a parameter is positional-only, ``*args``/``**kwargs``, has no default, is of another type, or
            shadows an option of ``rlbench run``.
        ValueError: On a name that cannot be typed as ``rlbench run NAME``.
    """

    def decorate(func: F) -> F:
        spec = make_spec(func, name=name, summary=summary, version=version)
        setattr(func, SPEC_ATTRIBUTE, spec)
        return func

    if fn is None:
        return decorate
    if not callable(fn):
        raise TypeError(f"@rlbench.benchmark decorates a function, got {type(fn).__name__} (keyword arguments only)")
    return decorate(fn)


def make_spec(
    fn: Callable[..., Any], *, name: str | None = None, summary: str | None = None, version: int = 1
) -> BenchmarkSpec:
    """The :class:`~rlbench.run.registry.BenchmarkSpec` that :func:`benchmark` attaches to ``fn`` (arguments as there)."""
    if not inspect.isfunction(fn):
        raise TypeError(f"@rlbench.benchmark decorates a plain function, got {type(fn).__name__}")
    label = fn.__qualname__
    bench = name if name is not None else fn.__name__.replace("_", "-").strip("-")
    if not isinstance(bench, str) or not re.fullmatch(r"[A-Za-z0-9][\w.+-]*", bench) or bench.endswith(".py"):
        raise ValueError(f"@rlbench.benchmark on {label}: name {bench!r} must be letters, digits, '-', '_', '.' or '+'")
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"@rlbench.benchmark on {label}: version must be an int, got {version!r}")
    doc = inspect.getdoc(fn) or ""
    line = summary if summary is not None else next((t.strip() for t in doc.splitlines() if t.strip()), "")
    config_cls, passed = config_class(fn)
    return BenchmarkSpec(
        name=bench,
        summary=line or f"@rlbench.benchmark function {label}",
        config_factory=config_cls,
        run=_runner(fn, passed),
        version=version,
        torch_device=False,  # the function takes no device: a benchmark without torch never imports it
        report="function",  # time per call and returned values (the training report if it runs an RL loop)
    )


def _runner(fn: Callable[..., Any], passed: tuple[str, ...]) -> Callable[[Any, RunContext], list[Any]]:
    def run(config: Any, ctx: RunContext) -> list[Any]:
        from rlbench.profiling.session import profile_call

        kwargs = {k: getattr(config, k) for k in passed}
        limit = getattr(config, TIMEOUT, 0.0) or None
        with cwd_on_path():  # the project's packages import from inside the function too, as they did at import
            return list(profile_call(fn, kwargs, device=ctx.device, callback=ctx.callback, timeout=limit))

    run.__qualname__ = run.__name__ = f"run_{fn.__name__}"
    run.__wrapped__ = fn  # type: ignore[attr-defined]  # the measured code: its file names the commit records carry
    return run


def config_class(fn: Callable[..., Any]) -> tuple[type, tuple[str, ...]]:
    """A dataclass with one field per parameter of ``fn`` (``seed: int = 0`` added if absent), and the names passed.

    Each field's help text is the parameter's line in the docstring's ``Args:`` section, or ``parameter of NAME``;
    ``rlbench run`` adds the default.

    Raises:
        TypeError: On a parameter that cannot be an option (see :func:`benchmark`).
    """
    label = fn.__qualname__
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: fall back to the written ones (checked below)
        hints = dict(getattr(fn, "__annotations__", {}))
    docs = arg_docs(inspect.getdoc(fn) or "")
    specs: list[tuple[str, Any, Any]] = []
    passed: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        where = f"@rlbench.benchmark on {label}: parameter {p.name!r}"
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TypeError(f"{where} must be a keyword parameter with a default (no *args, **kwargs or positional-only)")
        if p.default is p.empty:
            raise TypeError(f"{where} needs a default value (int, float, str or bool): rlbench calls {fn.__name__}(**options)")
        if p.name in RESERVED:
            raise TypeError(f"{where} shadows the `rlbench run` option --{p.name}: rename it")
        if p.name == "validate":
            raise TypeError(f"{where} shadows the config's validate() that `rlbench run` calls: rename it")
        kind, default = _parameter_type(where, hints.get(p.name, p.annotation), p.default)
        if p.name == "seed" and kind is not int:
            raise TypeError(f"{where} must be an int (the repeat's seed)")
        text = docs.get(p.name) or f"parameter of {fn.__name__}"
        specs.append((p.name, kind, option(text, default=default, own=p.name != "seed")))
        passed.append(p.name)
    if "seed" not in passed:
        text = f"repeats use seed..seed+K-1; {fn.__name__} takes no seed, so it only numbers the repeats"
        specs.append(("seed", int, option(text, default=0)))
    text = (
        f"seconds each call of {fn.__name__} may run: one that runs longer is stopped and the run fails (exit 1), the "
        "finished repeats kept; 0: no limit"
    )
    specs.append((TIMEOUT, float, option(text, default=0.0, setting=True)))
    cls_name = "".join(part[:1].upper() + part[1:] for part in fn.__name__.split("_") if part) + "Config"
    cls = dataclasses.make_dataclass(cls_name or "Config", specs, namespace={"validate": _validate})
    cls.__module__ = fn.__module__
    cls.__doc__ = f"Parameters of the benchmark {label} (one ``--option`` each)."
    return cls, tuple(passed)


def _validate(self: Any) -> None:
    """Check the values of parameters annotated ``Literal[...]``, and ``--timeout`` (``rlbench run`` calls this before
    running).

    Raises:
        UsageError: Naming the option and the values it allows.
    """
    check_choices(self)
    limit = getattr(self, TIMEOUT, 0.0)
    if not math.isfinite(limit) or limit < 0:
        raise UsageError(f"--timeout must be a number of seconds >= 0 (0: no limit), got {limit}")


def _parameter_type(where: str, hint: Any, default: Any) -> tuple[Any, Any]:
    """The field type of a parameter and its default (an int default of a float parameter made a float).

    A ``Literal[...]`` annotation is the field's type itself: its values are the option's choices.
    """
    values = literal_values(hint)
    if values is not None:
        kinds = {type(v) for v in values}
        if len(kinds) != 1 or not kinds <= {str, int}:
            raise TypeError(f"{where} is a Literal of {values!r}: its values must all be str or all int (one option each)")
        if default not in values or type(default) not in kinds:
            raise TypeError(f"{where} has default {default!r}, not one of its Literal values {values!r}")
        return hint, default
    if hint is inspect.Parameter.empty or hint is None:
        kind: Any = type(default)
    elif isinstance(hint, str):
        kind = PARAMETER_TYPES.get(hint.strip(), hint)
    else:
        kind = hint
    if kind not in PARAMETER_TYPES.values():
        shown = getattr(kind, "__name__", None) or str(kind)
        raise TypeError(
            f"{where} is of type {shown}: benchmark parameters are int, float, str or bool, or a Literal[...] of str or "
            "int values (one option each)"
        )
    if kind is float and isinstance(default, int) and not isinstance(default, bool):
        default = float(default)
    if not isinstance(default, kind) or (kind is int and isinstance(default, bool)):
        raise TypeError(f"{where} has default {default!r}, not of its type {kind.__name__}")
    return kind, default


def arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style docstring's ``Args:`` section (``name: text`` or ``name (type): text``)."""
    out: dict[str, str] = {}
    lines = iter(doc.splitlines())
    for line in lines:
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            break
    indent: int | None = None
    current = None
    for line in lines:
        if not line.strip():
            continue
        lead = len(line) - len(line.lstrip())
        if lead == 0:
            break  # the next section
        indent = lead if indent is None else indent
        m = re.match(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line.strip())
        if lead == indent and m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current is not None and lead > indent:
            out[current] = f"{out[current]} {line.strip()}".strip()
    return {k: v for k, v in out.items() if v}

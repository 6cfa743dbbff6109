"""Benchmark configuration fields: each field declares its own help text and, where it has them, its allowed values.

An option is declared once, on its config dataclass's field:

* its help text (``--flag``'s help) with :func:`option`;
* its allowed values, if it has a fixed set of them, either as a ``typing.Literal[...]`` annotation (preferred)::

      activation: Literal["tanh", "relu"] = option("hidden activation", default="tanh")

  or, where the values are a constant defined elsewhere, as ``option(..., choices=PRECISIONS)`` on a plain ``str``
  field. A ``tuple[Literal[...], ...]`` field (a repeatable option) allows those values for each of its items.

Everything else is derived from that one declaration: the command line's ``choices`` and ``--help`` text
(:func:`rlbench.cli.parser.add_config_options`), the value check of every config's ``validate()``
(:func:`check_choices`) and of ``--what-if FIELD=VALUE`` (:mod:`rlbench.core.variants`). There is deliberately no
table keyed by a field's bare name: two benchmarks may each have an ``activation`` with different values (a user's
``@rlbench.benchmark`` function's ``activation: str`` takes any value).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable
from dataclasses import Field, field, fields
from typing import Any, Literal

from rlbench.core.errors import UsageError

__all__ = [
    "check_choices",
    "choice_error",
    "choices_of",
    "choices_type",
    "describe_choices",
    "field_choices",
    "literal_values",
    "option",
    "run_setting",
]


def option(
    text: str,
    minimum: int = 1,
    choices: Iterable[Any] | None = None,
    own: bool = False,
    setting: bool = False,
    **kw: Any,
) -> Any:
    """A dataclass field with ``text`` as its command-line help (``rlbench run BENCHMARK --help`` prints it).

    Args:
        text: What the option does, in one phrase (the allowed values and the default are added to the help).
        minimum: For a tuple of integers, the least value the command line accepts (``0`` also lets ``none`` give
            an empty tuple).
        choices: The allowed values, for a field whose annotation is not a ``Literal[...]`` (e.g. a constant of the
            component that implements them). A field has either this or a ``Literal`` annotation, not both.
        own: A user benchmark's own parameter (``@rlbench.benchmark``): rlbench gives its name no meaning of its own,
            so a ``device`` or ``threads`` parameter is the function's, not the torch device or thread count
            (:func:`run_setting`).
        setting: How rlbench runs the benchmark, not what it measures (an ``@rlbench.benchmark``'s ``--timeout``): left
            out of the records' parameters and definition hash, so runs with different settings still compare.
        **kw: Arguments of :func:`dataclasses.field` (``default`` or ``default_factory``).
    """
    metadata: dict[str, Any] = {"help": text, "minimum": minimum, "own": own, "setting": setting}
    if choices is not None:
        metadata["choices"] = tuple(choices)
        if not metadata["choices"]:
            raise TypeError(f"option {text!r}: choices must name at least one value")
    return field(metadata=metadata, **kw)


def literal_values(hint: Any) -> tuple[Any, ...] | None:
    """The values of a ``Literal[...]`` annotation, else ``None``."""
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def choices_type(values: tuple[Any, ...]) -> type:
    """The type of a field's declared values (``str`` when they mix types): what command-line text converts to."""
    kinds = {type(v) for v in values}
    return kinds.pop() if len(kinds) == 1 else str


def field_choices(f: Field[Any], hint: Any) -> tuple[Any, ...] | None:
    """The allowed values of one field: its ``Literal`` annotation's (or its items', for ``tuple[Literal[...], ...]``),
    else its metadata's ``choices``, else ``None`` (any value of its type).

    Raises:
        TypeError: When the field declares its values twice (a ``Literal`` annotation and ``choices=``).
    """
    values = literal_values(hint)
    if values is None and typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        values = literal_values(args[0]) if len(args) == 2 and args[1] is Ellipsis else None
    declared = f.metadata.get("choices")
    if values is not None and declared is not None:
        raise TypeError(f"field {f.name!r} declares its values twice (a Literal annotation and choices=): keep one")
    return values if values is not None else declared


@functools.lru_cache(maxsize=512)
def _choices_of_class(cls: type) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        values = field_choices(f, hints.get(f.name))
        if values is not None:
            out.append((f.name, values))
    return tuple(out)


def choices_of(config: Any) -> dict[str, tuple[Any, ...]]:
    """``{field name: allowed values}`` of a config dataclass (class or instance), for the fields that declare them."""
    return dict(_choices_of_class(config if isinstance(config, type) else type(config)))


def describe_choices(values: Iterable[Any]) -> str:
    """``a or b`` / ``a, b or c``: the allowed values as a message names them."""
    shown = [str(v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def choice_error(name: str, value: Any, values: Iterable[Any]) -> str | None:
    """The one-line message for a value of field ``name`` outside ``values`` (each item, for a tuple), else ``None``."""
    values = tuple(values)
    for item in value if isinstance(value, tuple) else (value,):
        if item not in values or isinstance(item, bool) != any(isinstance(v, bool) for v in values):
            return f"--{name.replace('_', '-')} must be {describe_choices(values)}, got {item!r}"
    return None


def run_setting(config: Any, name: str, default: Any) -> Any:
    """A setting ``rlbench run`` acts on itself (``device``: the torch device; ``threads``: checked against the cores)
    from the config's field of that name; ``default`` when there is none, or when the field is a user benchmark's own
    parameter (declared ``option(..., own=True)``) that merely shares the name.
    """
    f = next((f for f in fields(config) if f.name == name), None)
    return default if f is None or f.metadata.get("own") else getattr(config, name)


def check_choices(config: Any) -> None:
    """Check every field of ``config`` that declares its allowed values (every config's ``validate()`` calls this).

    Raises:
        UsageError: ``--flag must be a, b or c, got 'x'`` for the first field whose value is not allowed.
    """
    for name, values in choices_of(config).items():
        message = choice_error(name, getattr(config, name), values)
        if message:
            raise UsageError(message)

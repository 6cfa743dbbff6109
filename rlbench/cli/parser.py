"""Argument parsing: one-line errors (exit 2), and run options generated from a benchmark's config dataclass."""

from __future__ import annotations

import argparse
import functools
import math
import sys
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

from rlbench.core.errors import UsageError
from rlbench.core.options import choices_type, field_choices


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are a single line naming the ``--help`` to read, exit 2."""

    def error(self, message: str) -> NoReturn:
        """Raise a :class:`UsageError` instead of printing usage (the CLI prints one line)."""
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        """Exit as argparse does (used by ``--help``)."""
        if message:
            sys.stderr.write(message)
        raise SystemExit(status)


def _tuple_of_ints(text: str, minimum: int = 1) -> tuple[int, ...]:
    """Comma-separated integers of at least ``minimum``; with ``minimum`` 0, ``none`` is the empty tuple."""
    if minimum <= 0 and text.strip().lower() == "none":
        return ()
    try:
        values = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 64,64, got {text!r}") from None
    if not values or any(v < minimum for v in values):
        kind = "positive integers like 64,64" if minimum == 1 else f"integers of at least {minimum}, or none"
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}")
    return values


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _int(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def add_config_options(parser: argparse.ArgumentParser, config: Any) -> None:
    """Add ``--field-name`` for every field of ``config`` (a dataclass instance), help from field metadata.

    A field that declares its allowed values (a ``Literal[...]`` annotation or ``option(..., choices=...)``, see
    :mod:`rlbench.core.options`) gets them as the option's ``choices`` and in its help; nothing here knows any field
    by name.
    """
    hints = typing.get_type_hints(type(config))
    group = parser.add_argument_group("benchmark parameters (defaults shown)")
    for f in fields(config):
        default = getattr(config, f.name)  # the benchmark's own setting (its config factory's), not the class default
        flag = "--" + f.name.replace("_", "-")
        text = f.metadata.get("help", "")
        hint = hints.get(f.name)
        choices = field_choices(f, hint)
        allowed = f"one of: {', '.join(map(str, choices))}; " if choices is not None else ""
        kind = _value_type(hint, choices)
        if kind is bool:
            group.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=f"{text} (default: {default})"
            )
        elif isinstance(default, tuple) and (typing.get_args(hint)[:1] == (str,) or _value_type(None, choices) is str):
            group.add_argument(  # a repeatable option of words (each one of the choices, if declared)
                flag,
                dest=f.name,
                action="append",
                choices=choices,
                default=None,
                metavar="VALUE",
                help=f"{text} ({allowed}repeatable)",
            )
        elif isinstance(default, tuple):  # comma-separated integers (declared choices: checked by validate())
            group.add_argument(
                flag,
                dest=f.name,
                type=functools.partial(_tuple_of_ints, minimum=f.metadata.get("minimum", 1)),
                default=None,
                metavar="N,N",
                help=f"{text} (default: {','.join(map(str, default)) or 'none'})",
            )
        elif kind is int:
            group.add_argument(
                flag,
                dest=f.name,
                type=_int,
                choices=choices,
                default=None,
                metavar="N",
                help=f"{text} ({allowed}default: {default:,})",
            )
        elif kind is float:
            shown = "env's threshold" if isinstance(default, float) and math.isnan(default) else default
            group.add_argument(
                flag,
                dest=f.name,
                type=_float,
                choices=choices,
                default=None,
                metavar="X",
                help=f"{text} ({allowed}default: {shown})",
            )
        else:
            group.add_argument(
                flag,
                dest=f.name,
                default=None,
                choices=choices,
                metavar=f.name.upper(),
                help=f"{text} ({allowed}default: {default})",
            )


def _value_type(hint: Any, choices: tuple[Any, ...] | None) -> Any:
    """The type a field's command-line text converts to: that of its declared values if it has them, else its hint."""
    return hint if choices is None else choices_type(choices)


def config_overrides(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """The config fields given on the command line."""
    out = {f.name: getattr(args, f.name) for f in fields(config) if getattr(args, f.name, None) is not None}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in out.items()}


def prepare_output(path: str | None, flag: str) -> Path | None:
    """Make sure an output file can be written before any work starts (its directory is created if missing).

    The rule of :mod:`rlbench.results.outputs`: a regular or absent path is written whole, a character device
    (``/dev/null``) is written through, anything else (a symlink, a FIFO, a directory) is refused.

    Args:
        path: The path given, or ``None`` / ``"-"`` (stdout): nothing to check.
        flag: The option that named it, for the message.

    Raises:
        UsageError: If the path may not or cannot be written.
    """
    if path is None or path == "-":
        return None
    from rlbench.results.outputs import check_output

    return check_output(path, flag)


def write_output(path: Path, text: str, flag: str) -> None:
    """Write an output file prepared by :func:`prepare_output` (whole or not at all; a device written through).

    Raises:
        UsageError: If writing fails after all (disk full, removed directory).
    """
    from rlbench.results.outputs import write_output as write

    write(path, text, flag)

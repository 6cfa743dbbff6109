"""Benchmark configuration fields: a dataclass field whose help text becomes its ``--flag``'s help."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def option(text: str, minimum: int = 1, **kw: Any) -> Any:
    """A dataclass field with ``text`` as its command-line help (``rlbench run BENCHMARK --help`` prints it).

    Args:
        text: What the option does, in one phrase.
        minimum: For a tuple of integers, the least value the command line accepts (``0`` also lets ``none`` give
            an empty tuple).
        **kw: Arguments of :func:`dataclasses.field` (``default`` or ``default_factory``).
    """
    return field(metadata={"help": text, "minimum": minimum}, **kw)

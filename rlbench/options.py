"""Benchmark configuration fields: a dataclass field whose help text becomes its ``--flag``'s help."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def option(text: str, **kw: Any) -> Any:
    """A dataclass field with ``text`` as its command-line help (``rlbench run BENCHMARK --help`` prints it).

    Args:
        text: What the option does, in one phrase.
        **kw: Arguments of :func:`dataclasses.field` (``default`` or ``default_factory``).
    """
    return field(metadata={"help": text}, **kw)

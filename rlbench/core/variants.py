"""What-if variants of a benchmark configuration: ``FIELD=VALUE`` overrides parsed against the config dataclass.

A benchmark whose config has a ``what_if`` tuple runs the baseline and each variant in every repeat; the
records carry the variant label in their parameters (``variant``), ``baseline`` for the setting as given.
``all`` expands to the config class's ``standard_what_ifs``.
"""

from __future__ import annotations

import typing
from dataclasses import fields, replace
from typing import Any

from rlbench.core.errors import UsageError
from rlbench.core.options import choice_error, choices_type, field_choices, literal_values

BASELINE = "baseline"  #: the variant label of the setting as given
__all__ = ["BASELINE", "variant_configs"]
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse_value(name: str, hint: Any, text: str) -> Any:
    values = literal_values(hint)
    if values is not None:  # a Literal field: the text is one of its values, converted to their type
        hint = choices_type(values)
    try:
        if hint is bool:
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError
            return text.lower() in _TRUE
        if hint is int:
            return int(text.replace("_", ""))
        if hint is float:
            return float(text)
        if typing.get_origin(hint) is tuple:
            item = typing.get_args(hint)[:1]
            if item == (str,) or (item and literal_values(item[0]) is not None):  # words: a,b
                return tuple(v.strip() for v in text.split(",") if v.strip())
            return tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
        return text
    except ValueError:
        raise UsageError(f"--what-if {name}={text}: {text!r} is not a valid value for {name}") from None


def variant_configs(config: Any) -> list[tuple[str, Any]]:
    """``[(label, config)]``: the baseline first, then one config per ``--what-if`` entry (each validated).

    Raises:
        UsageError: For a malformed entry, an unknown or forbidden field, a bad value or a variant equal to the baseline.
    """
    entries: list[str] = []
    for item in config.what_if:
        entries += list(config.standard_what_ifs) if item == "all" else [item]
    hints = typing.get_type_hints(type(config))
    declared = {f.name: f for f in fields(config)}
    names = [name for name in declared if name not in ("what_if", "seed", "device")]
    out: list[tuple[str, Any]] = [(BASELINE, replace(config, what_if=()))]
    for entry in dict.fromkeys(entries):
        name, sep, text = entry.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not text:
            raise UsageError(f"--what-if expects FIELD=VALUE (e.g. polyak=loop) or 'all', got {entry!r}")
        if name not in names:
            raise UsageError(f"--what-if {entry}: unknown field {name!r}; choose from {', '.join(names)}")
        value = _parse_value(name, hints[name], text.strip())
        choices = field_choices(declared[name], hints[name])  # the field's own declared values, as on the command line
        message = choice_error(name, value, choices) if choices is not None else None
        if message:
            raise UsageError(f"--what-if {entry}: {message}")
        variant = replace(config, what_if=(), **{name: value})
        if getattr(variant, name) == getattr(config, name):
            raise UsageError(f"--what-if {entry} is the baseline setting already; pick another value")
        variant.validate()
        out.append((f"{name}={text.strip()}", variant))
    return out

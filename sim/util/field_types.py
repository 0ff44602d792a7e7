"""Strict type checks of config dataclass fields against their annotations.

YAML gives bools, ints, floats, strings, None, lists and mappings; a config field takes only what
its annotation says, with no coercion: `int` takes an int (never a bool, a float such as 8.0 or a
numeric string), `float` an int or a float (never a bool or NaN), `str` a string, `bool` only
true / false. `X | None` also takes None; `tuple[X, ...]`, `list[X]` and `Sequence[X]` take a
list of X; `Mapping[...]` / `dict[...]` any mapping; `Literal['a', 'b']` one of the choices.
Annotations it does not understand (another dataclass, `Any`) are left to the dataclass's own
`__post_init__` checks, as is a union that contains one.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import numbers
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Callable, Optional

from sim.util.errors import ConfigError

Check = Callable[[object], bool]


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_float(value: object) -> bool:
    if _is_int(value):
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and not math.isnan(value)


SIMPLE: dict[str, Check] = {
    "int": _is_int, "float": _is_float, "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool), "None": lambda v: v is None,
    "Any": lambda v: True,
}
SEQUENCES = ("tuple", "list", "Sequence")
MAPPINGS = ("Mapping", "dict")


def split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets, parts stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


@lru_cache(maxsize=None)
def compile_annotation(text: str) -> Optional[Check]:
    """A check for annotation `text`, or None when it names a type this module does not know."""
    options = split_top(text, "|")
    if len(options) > 1:
        checks = [compile_annotation(option) for option in options]
        if any(check is None for check in checks):
            return None
        return lambda v: any(check(v) for check in checks)  # type: ignore[misc]
    text = options[0]
    if text in SIMPLE:
        return SIMPLE[text]
    head, _, rest = text.partition("[")
    if not rest.endswith("]"):
        return None
    inner = split_top(rest[:-1], ",")
    if head in MAPPINGS:
        return lambda v: isinstance(v, Mapping)
    if head == "Literal":
        try:
            choices = tuple(ast.literal_eval(choice) for choice in inner)
        except (ValueError, SyntaxError):
            return None
        return lambda v: isinstance(v, (str, int)) and not isinstance(v, bool) and v in choices
    if head in SEQUENCES:
        return _sequence_check(inner)
    return None


def _sequence_check(inner: list[str]) -> Optional[Check]:
    """A list or tuple whose items match `inner` (`X, ...`, or one annotation per item)."""
    variadic = len(inner) == 2 and inner[1] == "..."
    items = [compile_annotation(item) for item in (inner[:1] if variadic else inner)]
    if any(item is None for item in items):
        return None

    def check(value: object) -> bool:
        if not isinstance(value, (list, tuple)):
            return False
        if variadic or len(items) == 1:
            return all(items[0](item) for item in value)  # type: ignore[misc]
        return len(value) == len(items) and all(c(x) for c, x in zip(items, value))  # type: ignore[misc]

    return check


def annotation_text(annotation: object) -> str:
    """A field's annotation as text (string annotations as written, types by name)."""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def type_error(annotation: object, value: object) -> Optional[str]:
    """Why `value` does not fit `annotation` ("must be int, not bool"), or None when it fits
    or the annotation is not understood."""
    text = annotation_text(annotation)
    check = compile_annotation(text)
    if check is None or check(value):
        return None
    got = "NaN" if isinstance(value, float) and math.isnan(value) else type(value).__name__
    return f"must be {text}, not {got}"


def check_fields(cls: type, where: str, raw: Mapping[str, Any]) -> None:
    """ConfigError `<where>.<field>` for the first value of `raw` whose type does not fit the
    annotation of the dataclass `cls`'s field of that name (other keys are not looked at)."""
    for f in dataclasses.fields(cls):
        if f.name in raw:
            reason = type_error(f.type, raw[f.name])
            if reason is not None:
                raise ConfigError(f"{where}.{f.name}" if where else f.name, raw[f.name], reason)

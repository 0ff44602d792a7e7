"""Small generic checks of parsed YAML values: mappings, lists, positive numbers.

Errors are `ConfigError`s naming the field path and value. A section becomes its validated
dataclass through `sim.util.schema.build` (unknown keys, types, bounds), the one mechanism.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from sim.util.errors import ConfigError


# ---- small checks -------------------------------------------------------------------------
def mapping(where: str, value: object) -> dict[str, Any]:
    """`value` as a dict (None -> {}); ConfigError unless it is a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(where, value, "must be a mapping")
    return dict(value)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_number(where: str, value: object, *, integer: bool = False) -> None:
    """ConfigError unless value is a finite number > 0 (an int when `integer`)."""
    ok = is_int(value) if integer else is_number(value)
    if not ok or not (0 < value < math.inf):  # type: ignore[operator]
        raise ConfigError(where, value, f"must be {'an int' if integer else 'a number'} > 0")


def listed(where: str, value: object) -> list[Any]:
    """`value` as a list (None -> [], a lone scalar -> [scalar])."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        raise ConfigError(where, value, "must be a list")
    return [value]

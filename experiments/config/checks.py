"""Small generic checks and builders that turn parsed YAML into validated config dataclasses.

Errors are `ConfigError`s naming the field path and value; `rebase` places a nested error's
path under its parent's (`workload.synthetic.arrival`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from sim.util.errors import ConfigError, check_keys
from sim.util.field_types import check_fields


# ---- small checks -------------------------------------------------------------------------
def rebase(prefix: str, err: ConfigError) -> ConfigError:
    """`err` with its field path placed under `prefix` (unchanged if already there)."""
    if err.field == prefix or err.field.startswith((prefix + ".", prefix + "[")):
        return err
    return ConfigError(f"{prefix}.{err.field}", err.value, err.reason)


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


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


# ---- builders (plain dicts -> dataclasses) ------------------------------------------------
def listed(where: str, value: object) -> list[Any]:
    """`value` as a list (None -> [], a lone scalar -> [scalar])."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        raise ConfigError(where, value, "must be a list")
    return [value]


def check_types(cls: type, where: str, raw: Mapping[str, Any]) -> None:
    """ConfigError naming `<where>.<field>` and the value for a value of `raw` whose type does
    not fit the field's annotation (strict: no bool for an int, no 8.0 for an int, no NaN)."""
    check_fields(cls, where, raw)


def build(cls: type, where: str, raw: Mapping[str, Any], inner: str = "") -> Any:
    """`cls(**raw)` with unknown keys and bad types reported under `where`; `inner` is a
    prefix that `cls` puts on its own error fields (dropped)."""
    check_keys(where, raw, field_names(cls))
    check_types(cls, where, raw)
    try:
        return cls(**raw)
    except ConfigError as err:
        if inner and err.field.startswith(inner):
            err = rebase(where, ConfigError(err.field.removeprefix(inner), err.value,
                                            err.reason))
        raise rebase(where, err) from None
    except TypeError as exc:  # e.g. comparing a string with a number
        raise ConfigError(where, dict(raw), f"bad value type: {exc}") from None

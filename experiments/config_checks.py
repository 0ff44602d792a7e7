"""Small generic checks and builders that turn parsed YAML into validated config dataclasses.

Errors are `ConfigError`s naming the field path and value; `rebase` places a nested error's
path under its parent's (`workload.synthetic.arrival`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from sim.errors import ConfigError


# ---- small checks -------------------------------------------------------------------------
def rebase(prefix: str, err: ConfigError) -> ConfigError:
    """`err` with its field path placed under `prefix` (unchanged if already there)."""
    if err.field == prefix or err.field.startswith((prefix + ".", prefix + "[")):
        return err
    head = f"{err.field}={err.value!r}: "
    text = str(err)
    reason = text[len(head):] if text.startswith(head) else text
    return ConfigError(f"{prefix}.{err.field}", err.value, reason)


def mapping(where: str, value: object) -> dict[str, Any]:
    """`value` as a dict (None -> {}); ConfigError unless it is a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(where, value, "must be a mapping")
    return dict(value)


def check_keys(where: str, raw: Mapping[str, Any], known: Sequence[str]) -> None:
    """ConfigError naming the first key of `raw` not in `known`."""
    for key in raw:
        if key not in known:
            path = f"{where}.{key}" if where else str(key)
            raise ConfigError(path, raw[key], f"unknown key; known: {', '.join(known)}")


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


SIMPLE_TYPES = {"int": is_int, "float": is_number, "str": lambda v: isinstance(v, str),
                "bool": lambda v: isinstance(v, bool)}


def check_types(cls: type, where: str, raw: Mapping[str, Any]) -> None:
    """ConfigError for a value whose type does not match a simple annotation (int, float...)."""
    for f in dataclasses.fields(cls):
        if f.name not in raw or not isinstance(f.type, str):
            continue
        kinds = [k.strip() for k in f.type.split("|")]
        value = raw[f.name]
        if value is None and "None" in kinds:
            continue
        checks = [SIMPLE_TYPES[k] for k in kinds if k in SIMPLE_TYPES]
        if checks and len(checks) == len([k for k in kinds if k != "None"]) and \
                not any(check(value) for check in checks):
            raise ConfigError(f"{where}.{f.name}", value, f"must be of type {f.type}")


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
                                            str(err).partition(": ")[2]))
        raise rebase(where, err) from None
    except TypeError as exc:  # e.g. comparing a string with a number
        raise ConfigError(where, dict(raw), f"bad value type: {exc}") from None

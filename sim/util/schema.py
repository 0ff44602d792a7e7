"""The one mechanism that checks a config section, calibration-file section or option mapping.

A section is a frozen dataclass: types in its annotations, units in its field comments, bounds
in its `__post_init__` (raising `ConfigError`). `build` turns a mapping into one: it checks
unknown keys, then types (strictly, `sim.util.field_types`), then bounds, every error a
`ConfigError` naming the field path (`workload.synthetic.arrival`) and the value; a `note`
("in FILE") says where the mapping came from.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from sim.util.errors import ConfigError, TraceError, check_keys
from sim.util.field_types import check_fields


def field_names(cls: type) -> tuple[str, ...]:
    """The field names of dataclass `cls`, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def rebase(prefix: str, err: ConfigError) -> ConfigError:
    """`err` with its field path placed under `prefix` (unchanged if already there)."""
    if err.field == prefix or err.field.startswith((prefix + ".", prefix + "[")):
        return err
    return ConfigError(f"{prefix}.{err.field}", err.value, err.reason)


def noted(err: ConfigError, note: str) -> ConfigError:
    """`err` with `(note)` after its reason (unchanged without a note)."""
    return ConfigError(err.field, err.value, f"{err.reason} ({note})") if note else err


def build(cls: type, where: str, raw: Mapping[str, Any], inner: str = "", note: str = "",
          types: bool = True) -> Any:
    """`cls(**raw)` with unknown keys, bad types and bounds reported under `where`; `inner` is a
    prefix that `cls` puts on its own error fields (dropped); `note` (e.g. "in FILE") goes
    after "unknown key" and after every other error's reason. `types=False` leaves the types to
    `cls`'s own checks (a data file whose writer stored an int field as a float)."""
    check_keys(where, raw, field_names(cls), note)
    try:
        if types:
            check_fields(cls, where, raw)
        return _construct(cls, where, raw, inner)
    except ConfigError as err:
        raise noted(err, note) from None


def _construct(cls: type, where: str, raw: Mapping[str, Any], inner: str) -> Any:
    try:
        return cls(**raw)
    except ConfigError as err:
        if inner and err.field.startswith(inner):
            err = rebase(where, ConfigError(err.field.removeprefix(inner), err.value,
                                            err.reason))
        raise rebase(where, err) from None
    except TraceError:  # a file the section names is malformed: named as such
        raise
    except TypeError as exc:  # e.g. comparing a string with a number
        raise ConfigError(where, dict(raw), f"bad value type: {exc}") from None
    except ValueError as exc:  # a bound checked with a bare ValueError
        raise ConfigError(where, dict(raw), f"bad value: {exc}") from None

"""Errors raised for bad input: each names the field and the offending value."""

from __future__ import annotations

import reprlib
from typing import Any, Mapping, Sequence

MAX_VALUE_CHARS = 300  # characters of a value's repr an error message shows at most


def short_repr(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """repr(value) cut to about `limit` characters, in time bounded however large the value
    (nested containers show their first items only)."""
    shortener = reprlib.Repr()
    shortener.maxlevel, shortener.maxdict, shortener.maxlist = 4, 12, 12
    shortener.maxtuple, shortener.maxset = 12, 12
    shortener.maxstring = shortener.maxother = shortener.maxlong = limit
    text = shortener.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ConfigError(ValueError):
    """A configuration field holds an impossible or unknown value."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field  # dotted path of the field (policies[0].params.batch_size)
        self.value = value  # the offending value, as given
        self.reason = reason  # why it is refused
        super().__init__(f"{field}={short_repr(value)}: {reason}")
        self._message = str(self.args[0])
        self.args = (field, value, reason)  # type(e)(*e.args) rebuilds it (SimPy, pickle)

    def __str__(self) -> str:
        return self._message


class TraceError(ValueError):
    """A trace file or DataFrame is malformed; names the file, row and field."""

    def __init__(self, source: str, reason: str, *, row: int | None = None,
                 field: str | None = None, value: object = None) -> None:
        self.source = source
        self.row = row
        self.field = field
        self.value = value
        where = source
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field {field!r}={short_repr(value)}"
        super().__init__(f"{where}: {reason}")
        self._message = str(self.args[0])
        self.args = (source, reason)  # type(e)(*e.args) rebuilds it (SimPy, pickle)
        self._fields = (row, field, value)

    def __str__(self) -> str:
        return self._message

    def __reduce__(self):  # keep row / field / value through pickling (worker processes)
        row, field, value = self._fields
        return _rebuild_trace_error, (self.source, self.args[1], row, field, value)


def _rebuild_trace_error(source: str, reason: str, row: int | None, field: str | None,
                         value: object) -> "TraceError":
    return TraceError(source, reason, row=row, field=field, value=value)


def check_positive(field: str, value: float, *, allow_zero: bool = False) -> None:
    """Raise ConfigError unless value > 0 (or >= 0 with allow_zero)."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        raise ConfigError(field, value, "must be >= 0" if allow_zero else "must be > 0")


def check_fraction(field: str, value: float) -> None:
    """Raise ConfigError unless 0 < value <= 1."""
    if not 0 < value <= 1:
        raise ConfigError(field, value, "must be in (0, 1]")


def check_keys(where: str, raw: Mapping[str, Any], known: Sequence[str], note: str = "") -> None:
    """ConfigError naming the first key of `raw` not in `known` (`where.key`), and the known
    keys; `note` (e.g. "in FILE") goes after "unknown key". The one unknown-key check of every
    config section, calibration file and option mapping."""
    for key in raw:
        if key not in known:
            path = f"{where}.{key}" if where else str(key)
            raise ConfigError(path, raw[key], f"unknown key{' ' + note if note else ''}; known: "
                              f"{', '.join(known)}")

"""Errors raised for bad input: each names the field and the offending value."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration field holds an impossible or unknown value."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field}={value!r}: {reason}")


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
            where += f", field {field!r}={value!r}"
        super().__init__(f"{where}: {reason}")


def check_positive(field: str, value: float, *, allow_zero: bool = False) -> None:
    """Raise ConfigError unless value > 0 (or >= 0 with allow_zero)."""
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        raise ConfigError(field, value, "must be >= 0" if allow_zero else "must be > 0")


def check_fraction(field: str, value: float) -> None:
    """Raise ConfigError unless 0 < value <= 1."""
    if not 0 < value <= 1:
        raise ConfigError(field, value, "must be in (0, 1]")

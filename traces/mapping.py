"""Bring-your-own trace files: a column mapping onto the schema and timestamp parsing.

A `TraceMapping` names, for schema columns (`traces.schema`), the file column that holds them
(`{arrival_s: ts, prompt_tokens: input_len, output_tokens: output_len}`; unmapped schema
columns are read under their own name), and how the arrival column is written
(`TimestampFormat`): epoch numbers in s / ms / us / ns, ISO 8601 text (a timezone offset is
converted to UTC; text without one is read as UTC) or a strftime pattern. Arrivals become
seconds after the earliest, exactly (integer nanoseconds for parsed dates, `traces.times`).

Errors are `TraceError`s naming the file, the first bad row (0-based data row for CSV and
Parquet, file line for JSON lines), the file column and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, TraceError
from traces.class_columns import CLASS_COLUMNS
from traces.columns import BadCells, Lines, bad_cells, is_missing
from traces.files import check_limit, existing_file, iter_jsonl, read_csv_cells
from traces.schema import (BLOCK_COLUMN, BLOCK_TOKENS_COLUMN, REQUIRED_COLUMNS, STRING_COLUMNS,
                           require_rows, validate_trace)
from traces.times import relative_seconds, roll_midnights, time_of_day_only

SCHEMA_COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, *STRING_COLUMNS, BLOCK_COLUMN,
                                   BLOCK_TOKENS_COLUMN, *CLASS_COLUMNS)
UNITS_PER_S: dict[str, float] = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}  # units per second
FORMATS: tuple[str, ...] = ("epoch", "iso8601")  # or a strftime pattern (contains '%')
MAPPED_FILE_FORMATS: tuple[str, ...] = ("csv", "parquet", "jsonl")  # formats a mapping reads


@dataclass(frozen=True)
class TimestampFormat:
    """How the arrival column is written."""

    unit: str = "s"  # s | ms | us | ns: unit of epoch numbers (epoch format only)
    format: str = "epoch"  # epoch (numbers) | iso8601 | a strftime pattern (%d/%m/%Y %H:%M:%S)

    def __post_init__(self) -> None:
        if self.unit not in UNITS_PER_S:
            raise ConfigError("workload.trace.timestamp.unit", self.unit,
                              f"unknown; known: {', '.join(UNITS_PER_S)}")
        if not isinstance(self.format, str) or (self.format not in FORMATS
                                                and "%" not in self.format):
            raise ConfigError("workload.trace.timestamp.format", self.format,
                              "must be epoch, iso8601 or a strftime pattern (with % codes)")
        if self.format != "epoch" and self.unit != "s":
            raise ConfigError("workload.trace.timestamp.unit", self.unit,
                              "only epoch numbers take a unit; dates are parsed to seconds")


@dataclass(frozen=True)
class TraceMapping:
    """Which file column holds each schema column, and how arrivals are written."""

    columns: tuple[tuple[str, str], ...] = ()  # (schema column, file column) pairs
    timestamp: TimestampFormat = TimestampFormat()  # format of the arrival column

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for schema, column in self.columns:
            where = f"workload.trace.columns.{schema}"
            if schema not in SCHEMA_COLUMNS:
                raise ConfigError(where, column, f"unknown schema column {schema!r}; known: "
                                                 f"{', '.join(SCHEMA_COLUMNS)}")
            if not isinstance(column, str) or not column:
                raise ConfigError(where, column, "must be a file column name")
            if column in seen:
                raise ConfigError(where, column, f"file column already mapped to "
                                                 f"{seen[column]!r}")
            seen[column] = schema

    @classmethod
    def from_columns(cls, columns: Mapping[str, str] | None,
                     timestamp: TimestampFormat | None = None) -> TraceMapping:
        """A mapping from a {schema column: file column} dict."""
        pairs = tuple((str(k), v) for k, v in (columns or {}).items())
        return cls(pairs, timestamp or TimestampFormat())

    def file_column(self, schema: str) -> str:
        """The file column read for `schema`."""
        return dict(self.columns).get(schema, schema)


def load_mapped(path: str | Path, fmt: str, mapping: TraceMapping, *,
                limit: int | None = None) -> pd.DataFrame:
    """The trace at `path` (csv, parquet or jsonl) in the schema, read through `mapping`."""
    if fmt not in MAPPED_FILE_FORMATS:
        raise ConfigError("workload.trace.format", fmt, f"a column mapping reads "
                                                        f"{', '.join(MAPPED_FILE_FORMATS)} files")
    path = existing_file(path)
    check_limit(limit)
    raw, lines = read_raw(path, fmt, limit)
    return apply_mapping(raw, mapping, str(path), lines)


def read_raw(path: Path, fmt: str, limit: int | None,
             bad: list[TraceError] | None = None) -> tuple[pd.DataFrame, Lines]:
    """The file's cells as read (CSV: all text), with file lines for JSON lines (whose lines
    that are not JSON objects go to `bad` when given, else raise)."""
    if fmt == "csv":
        return read_csv_cells(path, limit, object), None
    if fmt == "parquet":
        try:
            raw = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several unrelated types for bad files
            raise TraceError(str(path), f"unreadable Parquet: {exc}") from None
        return (raw if limit is None else raw.head(limit)), None
    pairs = list(iter_jsonl(path, limit, bad=bad))
    if not pairs and not bad:
        raise TraceError(str(path), "trace has no requests")
    raw = pd.DataFrame.from_records([obj for _, obj in pairs])
    return raw, np.asarray([line for line, _ in pairs])


def apply_mapping(raw: pd.DataFrame, mapping: TraceMapping, source: str,
                  lines: Lines = None) -> pd.DataFrame:
    """`raw` renamed onto the schema, arrivals parsed to seconds after the earliest, validated.
    The earliest arrival as given (epoch units, or epoch seconds for dates) is kept in
    `attrs["arrival_origin"]`."""
    renames = {column: schema for schema, column in mapping.columns}
    for schema, column in mapping.columns:
        if column not in raw.columns:
            raise TraceError(source, f"mapped column {column!r} (for {schema}) is not in the "
                                     f"file; have {list(map(str, raw.columns))}",
                             field=f"columns.{schema}", value=column)
        if schema in raw.columns and schema not in renames:
            raise TraceError(source, f"the file has a column {schema!r} and maps {column!r} "
                                     f"onto it; drop one", field=f"columns.{schema}", value=column)
    df = raw.rename(columns=renames)
    origin = None
    if "arrival_s" in df.columns:
        column = mapping.file_column("arrival_s")
        df = df.copy()
        df["arrival_s"], origin = parse_arrivals(df["arrival_s"], mapping.timestamp, source,
                                                 column, lines)
    try:
        out = require_rows(validate_trace(df, source, lines=lines), source)
    except TraceError as err:
        raise _file_field(err, mapping) from None
    out.attrs["arrival_origin"] = origin
    return out


def _file_field(err: TraceError, mapping: TraceMapping) -> TraceError:
    """`err` with a mapped schema field named by its file column too."""
    if err.field is None or mapping.file_column(err.field) == err.field:
        return err
    field = f"{mapping.file_column(err.field)} ({err.field})"
    if isinstance(err, BadCells):
        return BadCells(err.source, str(err.args[1]), why=err.why, field=field, rows=err.rows,
                        cells=err.cells)
    return TraceError(err.source, str(err.args[1]), row=err.row, field=field, value=err.value)


def parse_arrivals(values: pd.Series, fmt: TimestampFormat, source: str, column: str,
                   lines: Lines) -> tuple[np.ndarray, float]:
    """Seconds after the earliest of `values` and that earliest value (epoch units as given;
    epoch seconds for dates)."""
    if fmt.format == "epoch":
        return relative_seconds(values, source=source, field=column, lines=lines,
                                units_per_s=UNITS_PER_S[fmt.unit])
    nanos = parse_dates(values, fmt.format, source, column, lines)
    rel, origin_ns = relative_seconds(pd.Series(nanos, dtype=np.int64), source=source,
                                      field=column, lines=lines, units_per_s=1e9)
    return rel, origin_ns / 1e9


def parse_dates(values: pd.Series, fmt: str, source: str, column: str,
                lines: Lines) -> list[int]:
    """Integer UTC nanoseconds since the epoch of each date; TraceError at the first cell that
    is missing or does not parse as `fmt` (iso8601 or a strftime pattern)."""
    pattern = "ISO8601" if fmt == "iso8601" else fmt
    missing = [i for i, v in enumerate(values) if is_missing(v)]
    if missing:
        raise bad_cells(source, column, values, missing, lines, "missing timestamp", False)
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        utc = values.dt.tz_localize if values.dt.tz is None else values.dt.tz_convert
        stamps = utc("UTC")
        return [int(t.value) for t in stamps]
    text = values.map(lambda v: str(v).strip())
    try:
        parsed = pd.to_datetime(text, utc=True, format=pattern, errors="coerce")
    except (ValueError, TypeError, OverflowError):
        parsed = pd.Series([_one_date(t, pattern) for t in text], index=values.index)
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        raise bad_cells(source, column, values, bad, lines, f"does not parse as {fmt}")
    nanos = [int(t.value) for t in parsed]
    if fmt != "iso8601" and time_of_day_only(fmt):  # one date for all: roll at midnights
        return roll_midnights(nanos, source=source, field=column, values=values, lines=lines)
    return nanos


def _one_date(text: str, pattern: str) -> pd.Timestamp | None:
    """One parsed UTC timestamp, None when it does not parse."""
    try:
        return pd.to_datetime(text, utc=True, format=pattern)
    except (ValueError, TypeError, OverflowError):
        return None

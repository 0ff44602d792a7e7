"""Loaders for files already in the schema's own columns (CSV, Parquet, JSON lines).

Columns are those of `traces.schema`. Times are shifted so the earliest arrival is 0, exactly
(decimal text and integers are subtracted before rounding, `traces.times`); the earliest value as
given is kept in `df.attrs["arrival_origin"]`. Raw `arrival_s` values must still be >= 0. In CSV,
`block_ids` cells are JSON lists such as `"[1, 2, 3]"`; a file with `block_ids` needs
`block_tokens` too. Files may be gzip-compressed (detected by magic bytes, whatever the name).
CSV errors report the data row (0-based, header excluded) because quoted text may span lines;
JSON-lines errors report the file line.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from sim.util.errors import TraceError
from traces.class_columns import CLASS_COLUMNS
from traces.columns import Lines
from traces.files import (check_limit, existing_file, is_gzip, iter_jsonl, open_binary,
                          read_csv_cells)
from traces.schema import STRING_COLUMNS, require_rows, validate_trace
from traces.times import relative_seconds

ARRIVAL = "arrival_s"  # the schema's arrival column (seconds)


def load_csv(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """A schema CSV; `limit` keeps the first rows."""
    path = existing_file(path)
    check_limit(limit)
    return finish(read_csv_raw(path, limit), str(path))


def read_csv_raw(path: Path, limit: int | None = None) -> pd.DataFrame:
    """A schema CSV's first `limit` rows as read (text columns and arrivals as written)."""
    dtypes = {c: object for c in (*STRING_COLUMNS, *CLASS_COLUMNS, ARRIVAL)}  # text as written
    # (arrival_s: an exact shift; class: "007" stays a name)
    return read_csv_cells(path, limit, dtypes)


def load_parquet(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """A schema Parquet file (gzip-compressed allowed); `limit` keeps the first rows."""
    path = existing_file(path)
    check_limit(limit)
    return finish(read_parquet_raw(path, limit), str(path))


def read_parquet_raw(path: Path, limit: int | None = None) -> pd.DataFrame:
    """A Parquet file's first `limit` rows as read (gzip-compressed allowed)."""
    try:
        if is_gzip(path):
            with open_binary(path) as fh:
                raw = pd.read_parquet(io.BytesIO(fh.read()))
        else:
            raw = pd.read_parquet(path)
    except Exception as exc:  # pyarrow / gzip raise several unrelated types for bad files
        raise TraceError(str(path), f"unreadable Parquet: {exc}") from None
    return raw if limit is None else raw.head(limit)


def load_jsonl(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """A schema JSON-lines file (one object per request); `limit` keeps the first records."""
    path = existing_file(path)
    check_limit(limit)
    raw, lines = read_jsonl_raw(path, limit)
    if not len(raw):
        raise TraceError(str(path), "trace has no requests")
    return finish(raw, str(path), lines)


def read_jsonl_raw(path: Path, limit: int | None = None,
                   bad: list[TraceError] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """A JSON-lines file's first `limit` records and their file lines (lines that are not
    JSON objects go to `bad` when given, else raise)."""
    records: list[dict] = []
    lines: list[int] = []
    for lineno, obj in iter_jsonl(path, limit, bad=bad):
        records.append(obj)
        lines.append(lineno)
    raw = pd.DataFrame.from_records(records)
    if ARRIVAL in raw.columns:  # the exact values (ExactFloat keeps the decimal text)
        raw[ARRIVAL] = pd.Series([r.get(ARRIVAL) for r in records], dtype=object)
    return raw, np.asarray(lines, dtype=np.int64)


def finish(raw: pd.DataFrame, source: str, lines: Lines = None) -> pd.DataFrame:
    """`raw` with arrivals shifted to start at 0, validated; TraceError when it has no rows."""
    origin = None
    if ARRIVAL in raw.columns:
        raw = raw.copy()
        raw[ARRIVAL], origin = relative_seconds(raw[ARRIVAL], source=source, field=ARRIVAL,
                                                lines=lines, minimum=0.0)
    out = require_rows(validate_trace(raw, source, lines=lines), source)
    out.attrs["arrival_origin"] = origin
    return out

"""Loaders for files already in the schema's own columns (CSV, Parquet, JSON lines).

Columns are those of `traces.schema`; times are used as given (not shifted). In CSV, `block_ids`
cells are JSON lists such as `"[1, 2, 3]"`. CSV errors report the data row (0-based, header
excluded) because quoted text may span lines; JSON-lines errors report the file line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import TraceError
from traces.files import check_limit, existing_file, iter_jsonl
from traces.schema import STRING_COLUMNS, require_rows, validate_trace


def load_csv(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """A schema CSV; `limit` keeps the first rows."""
    path = existing_file(path)
    check_limit(limit)
    dtypes = {c: object for c in STRING_COLUMNS}
    try:
        raw = pd.read_csv(path, nrows=limit, dtype=dtypes)
    except pd.errors.EmptyDataError:
        raise TraceError(str(path), "empty file; expected a header row") from None
    except pd.errors.ParserError as exc:
        raise TraceError(str(path), f"malformed CSV: {exc}") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    return require_rows(validate_trace(raw, str(path)), str(path))


def load_parquet(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """A schema Parquet file; `limit` keeps the first rows."""
    path = existing_file(path)
    check_limit(limit)
    try:
        raw = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several unrelated types for bad files
        raise TraceError(str(path), f"unreadable Parquet: {exc}") from None
    if limit is not None:
        raw = raw.head(limit)
    return require_rows(validate_trace(raw, str(path)), str(path))


def load_jsonl(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """A schema JSON-lines file (one object per request); `limit` keeps the first records."""
    path = existing_file(path)
    check_limit(limit)
    records: list[dict] = []
    lines: list[int] = []
    for lineno, obj in iter_jsonl(path, limit):
        records.append(obj)
        lines.append(lineno)
    if not records:
        raise TraceError(str(path), "trace has no requests")
    raw = pd.DataFrame.from_records(records)
    return require_rows(validate_trace(raw, str(path), lines=np.asarray(lines)), str(path))


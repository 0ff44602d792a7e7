"""Loader for the Azure LLM inference trace 2023 (Azure/AzurePublicDataset, CC-BY 4.0).

Format: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP like
`2023-11-16 18:17:03.9799600` (7 fractional digits). Arrivals become seconds after the earliest
row (the first row, in the sorted public files). Errors name the file and its 1-based line
(header = line 1). Blank lines are skipped; a row with the wrong number of fields is an error.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import TraceError
from traces.columns import count_rows, is_missing, to_token_counts
from traces.files import check_limit, existing_file, open_text
from traces.schema import require_rows, validate_trace

AZURE_COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def load_azure(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """The trace at `path` in the schema; `limit` keeps only the first rows of the file."""
    path = existing_file(path)
    check_limit(limit)
    source = str(path)
    raw, lines = read_raw(path, limit)
    df = pd.DataFrame({
        "arrival_s": parse_timestamps(raw["TIMESTAMP"], source=source, lines=lines),
        "prompt_tokens": to_token_counts(raw["ContextTokens"], source=source,
                                         field="ContextTokens", lines=lines),
        "output_tokens": to_token_counts(raw["GeneratedTokens"], source=source,
                                         field="GeneratedTokens", lines=lines),
    })
    return require_rows(validate_trace(df, source, lines=lines), source)


def read_raw(path: Path, limit: int | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """The Azure columns as strings, and each row's 1-based file line; blank lines skipped."""
    source = str(path)
    with open_text(path) as fh:
        reader = csv.reader(fh)
        header = [c.strip() for c in next(reader, [])]
        for col in AZURE_COLUMNS:
            if col not in header:
                raise TraceError(source, f"missing column {col!r} in header {header}",
                                 row=1, field=col)
        keep = [header.index(col) for col in AZURE_COLUMNS]
        cells: list[list[str]] = []
        lines: list[int] = []
        for row in reader:
            if limit is not None and len(cells) >= limit:
                break
            if not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                _wrong_width(source, header, row, reader.line_num)
            cells.append([row[k] for k in keep])
            lines.append(reader.line_num)
    raw = pd.DataFrame(cells, columns=list(AZURE_COLUMNS), dtype=object)
    return raw, np.asarray(lines, dtype=np.int64)


def _wrong_width(source: str, header: list[str], row: list[str], line: int) -> None:
    """Raise TraceError for a row with too few (names the first missing field) or many fields."""
    if len(row) < len(header):
        raise TraceError(source, f"missing field at line {line}: expected {len(header)} fields, "
                                 f"got {len(row)} in {','.join(row)[:80]!r}",
                         row=line, field=header[len(row)], value=None)
    raise TraceError(source, f"expected {len(header)} fields, got {len(row)} at line {line}",
                     row=line, value=",".join(row)[:80])


def parse_timestamps(values: pd.Series, *, source: str, lines: np.ndarray) -> np.ndarray:
    """Seconds after the earliest timestamp; TraceError names the first unparsable cell."""
    text = values.astype(object).map(lambda v: v.strip() if isinstance(v, str) else v)
    stamps = pd.to_datetime(text, format="ISO8601", errors="coerce")
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        value = values.iloc[i]
        reason = "missing value" if is_missing(value) else "not a timestamp"
        raise TraceError(source, f"{reason} at line {int(lines[i])} ({count_rows(bad.size)})",
                         row=int(lines[i]), field="TIMESTAMP", value=value)
    if len(stamps) == 0:
        return np.empty(0, dtype=np.float64)
    return ((stamps - stamps.min()).dt.total_seconds()).to_numpy(dtype=np.float64)

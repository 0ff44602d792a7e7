"""Loader for the Azure LLM inference trace 2023 (Azure/AzurePublicDataset, CC-BY 4.0).

Format: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP like
`2023-11-16 18:17:03.9799600` (7 fractional digits). Arrivals become seconds after the earliest
row (the first row, in the sorted public files), computed in integer nanoseconds;
`df.attrs["arrival_origin"]` keeps the earliest timestamp (ISO text). Timestamps with UTC offsets
(`+00:00`, `-05:00`, `Z`) are converted to UTC, so mixed offsets are fine; naive timestamps mixed
with offset ones are ambiguous and an error. Errors name the file and its 1-based line
(header = line 1). Blank lines are skipped; a row with the wrong number of fields is an error.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from sim.util.errors import TraceError
from traces.columns import BadCells, bad_cells, is_missing, to_token_counts
from traces.files import check_limit, existing_file, open_text
from traces.schema import require_rows, validate_trace
from traces.times import MAX_SPAN_S

AZURE_COLUMNS: tuple[str, ...] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def load_azure(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """The trace at `path` in the schema; `limit` keeps only the first rows of the file."""
    path = existing_file(path)
    check_limit(limit)
    raw, lines = read_raw(path, limit)
    return azure_frame(raw, str(path), lines)


def azure_frame(raw: pd.DataFrame, source: str, lines: np.ndarray) -> pd.DataFrame:
    """The Azure columns of `raw` (as `read_raw` gives them) in the schema."""
    stamps = parse_timestamps(raw["TIMESTAMP"], source=source, lines=lines)
    df = pd.DataFrame({
        "arrival_s": seconds_after_first(stamps, raw["TIMESTAMP"], source=source, lines=lines),
        "prompt_tokens": to_token_counts(raw["ContextTokens"], source=source,
                                         field="ContextTokens", lines=lines),
        "output_tokens": to_token_counts(raw["GeneratedTokens"], source=source,
                                         field="GeneratedTokens", lines=lines),
    })
    out = require_rows(validate_trace(df, source, lines=lines), source)
    out.attrs["arrival_origin"] = stamps.min().isoformat()
    return out


def read_raw(path: Path, limit: int | None = None,
             bad: list[TraceError] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """The Azure columns as strings, and each row's 1-based file line; blank lines skipped. A
    row with the wrong number of fields goes to `bad` when given (counting toward `limit`),
    else raises."""
    source = str(path)
    with open_text(path, "azure") as fh:
        reader = csv.reader(fh)
        header = [c.strip() for c in next(reader, [])]
        empty = "empty file: " if not header else ""
        for col in AZURE_COLUMNS:
            if col not in header:
                raise TraceError(source, f"{empty}missing column {col!r} in header {header}",
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
                try:
                    _wrong_width(source, header, row, reader.line_num)
                except TraceError as err:
                    if bad is None:
                        raise
                    bad.append(err)
                    limit = None if limit is None else limit - 1
                    continue
            cells.append([row[k] for k in keep])
            lines.append(reader.line_num)
    raw = pd.DataFrame(cells, columns=list(AZURE_COLUMNS), dtype=object)
    return raw, np.asarray(lines, dtype=np.int64)


def _wrong_width(source: str, header: list[str], row: list[str], line: int) -> None:
    """Raise TraceError (BadCells) for a row with too few (names the first missing field) or
    many fields."""
    got = f"expected {len(header)} fields, got {len(row)}"
    if len(row) < len(header):
        raise BadCells(source, f"missing field at line {line}: {got} in {','.join(row)[:80]!r}",
                       why=f"missing field: {got}", field=header[len(row)], rows=[line],
                       cells=[None])
    raise BadCells(source, f"{got} at line {line}", why=got, field=None, rows=[line],
                   cells=[",".join(row)[:80]])


def parse_timestamps(values: pd.Series, *, source: str, lines: np.ndarray) -> pd.Series:
    """The timestamps (naive, or all converted to UTC); TraceError names the first unparsable
    cell, or the first naive / offset cell that disagrees with the first row."""
    text = values.astype(object).map(lambda v: v.strip() if isinstance(v, str) else v)
    try:
        stamps = pd.to_datetime(text, format="ISO8601", errors="coerce")
    except ValueError:  # "Mixed timezones detected": several offsets, or naive and offsets
        _check_one_kind(text, source=source, lines=lines)
        stamps = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    unparsed = stamps.isna().to_numpy()
    missing = np.fromiter((is_missing(v) for v in values), bool, len(values))
    first = np.flatnonzero(unparsed)
    if first.size:  # the first bad cell's reason, with every cell that has it
        kind = missing if missing[first[0]] else unparsed & ~missing
        why = "missing value" if missing[first[0]] else "not a timestamp"
        raise bad_cells(source, "TIMESTAMP", values, np.flatnonzero(kind), lines, why)
    return stamps


def _check_one_kind(text: pd.Series, *, source: str, lines: np.ndarray) -> None:
    """TraceError when naive timestamps and timestamps with a UTC offset are mixed."""
    aware = [_has_offset(v) for v in text]
    kinds = [a for a in aware if a is not None]
    if not kinds or all(kinds) or not any(kinds):
        return
    first = kinds[0]
    other = [k for k, a in enumerate(aware) if a is not None and a != first]
    has = "has a UTC offset" if aware[other[0]] else "has no UTC offset"
    raise bad_cells(source, "TIMESTAMP", text, other, lines,
                    f"timestamp {has}, unlike the first row's: naive and offset timestamps "
                    f"mixed are ambiguous; give every TIMESTAMP an offset, or none")


def _has_offset(value: object) -> bool | None:
    """Whether a timestamp cell carries a UTC offset; None when it is not a timestamp."""
    try:
        return pd.Timestamp(value).tzinfo is not None
    except (TypeError, ValueError):
        return None


def seconds_after_first(stamps: pd.Series, values: pd.Series, *, source: str,
                        lines: np.ndarray) -> np.ndarray:
    """Seconds after the earliest timestamp (exact integer differences, rounded once); a span
    over MAX_SPAN_S is a TraceError naming the latest row."""
    if len(stamps) == 0:
        return np.empty(0, dtype=np.float64)
    seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    i = int(np.argmax(seconds))
    if seconds[i] > MAX_SPAN_S:
        raise bad_cells(source, "TIMESTAMP", values, [i], lines,
                        f"timestamps span {seconds[i]:.6g} s, over {MAX_SPAN_S:g} s: float64 "
                        f"cannot resolve microseconds of simulated time", counted=False)
    return seconds

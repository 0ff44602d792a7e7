"""Loading a trace file with malformed rows: drop them, count them by reason, say which.

`load_skipping(path, fmt, mapping, limit=...)` reads a trace as `traces.registry.load_trace`
(or, with a column mapping, `traces.mapping.load_mapped`) does, but a row that fails a check is
dropped instead of stopping the load: a missing, non-numeric, non-finite, negative or
non-integer cell, an unparsable or out-of-range timestamp, bad block ids or class cells, a line
that is not a JSON object, an Azure row with the wrong number of fields, a Mooncake record
without a key. Problems of the file itself are still errors: a missing column, an unreadable
file, a CSV pandas cannot parse (a ragged row), block_ids without block_tokens. A trace whose
every row is bad is an error too. `limit` counts the rows read, bad ones included.

Rows are named as the loaders' errors name them: the file line for JSON lines and the Azure CSV,
the 0-based data row (header excluded) for CSV and Parquet. The file is read into raw cells once;
the conversion runs on them, and each failed check (`traces.columns.BadCells`) names every row
that fails it: those rows are dropped and the conversion runs again, once per failing check.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, TraceError, short_repr
from traces.azure import azure_frame
from traces.azure import read_raw as read_azure
from traces.columns import BadCells
from traces.files import check_limit, existing_file
from traces.generic import finish, read_csv_raw, read_jsonl_raw, read_parquet_raw
from traces.mapping import MAPPED_FILE_FORMATS, TraceMapping, apply_mapping, read_raw
from traces.mooncake import mooncake_frame, read_records

SHOWN_ROWS = 5  # bad rows a report lists
VALUE_CHARS = 80  # characters of a bad cell's repr a report shows


@dataclass(frozen=True)
class BadRow:
    """One dropped row."""

    row: int  # file line (JSON lines, Azure CSV) or 0-based data row (CSV, Parquet)
    field: str | None  # the column it failed on (None: the whole line)
    value: object  # the cell (or line) as read
    reason: str  # why it was dropped

    def text(self) -> str:
        """`row 7, field 'prompt_tokens'=-3: token count must be >= 1`."""
        where = f"row {self.row}"
        if self.field is not None:
            where += f", field {self.field!r}={short_repr(self.value, VALUE_CHARS)}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class SkippedRows:
    """The rows a load dropped."""

    source: str  # the trace file
    rows_read: int  # rows read from the file, bad ones included
    bad: tuple[BadRow, ...]  # the dropped rows, in row order

    def by_reason(self) -> dict[str, int]:
        """{"<field>: <reason>": rows}, most frequent first."""
        keys = Counter(f"{r.field}: {r.reason}" if r.field else r.reason for r in self.bad)
        return dict(keys.most_common())

    def report(self, shown: int = SHOWN_ROWS) -> list[str]:
        """Console lines: the count, the count by reason (the `shown` most frequent), the
        first `shown` rows."""
        if not self.bad:
            return []
        lines = [f"{self.source}: skipped {len(self.bad)} bad row(s) of {self.rows_read} read "
                 f"(workload.trace.skip_bad_rows)"]
        lines += [f"  {count} x {reason}" for reason, count in self.reasons(shown)]
        lines.append(f"  first {min(shown, len(self.bad))}:")
        lines += [f"    {row.text()}" for row in self.bad[:shown]]
        return lines

    def reasons(self, shown: int) -> list[tuple[str, int]]:
        """The `shown` most frequent (reason, rows), and one ("other reasons", rows) for the
        rest."""
        counts = list(self.by_reason().items())
        rest = sum(count for _, count in counts[shown:])
        return counts[:shown] + ([(f"{len(counts) - shown} other reason(s)", rest)]
                                 if rest else [])

    def note(self, shown: int = SHOWN_ROWS) -> str | None:
        """One line for a run's summary (None when no row was dropped): the count and the
        count by reason (the `shown` most frequent)."""
        if not self.bad:
            return None
        reasons = "; ".join(f"{count} x {reason}" for reason, count in self.reasons(shown))
        return (f"skipped_bad_rows={len(self.bad)} of {self.rows_read} rows read from "
                f"{self.source} (workload.trace.skip_bad_rows): {reasons}")


def load_skipping(path: str | Path, fmt: str, mapping: TraceMapping | None = None, *,
                  limit: int | None = None) -> tuple[pd.DataFrame, SkippedRows]:
    """The trace at `path` (format `fmt`, read through `mapping` when given) without its bad
    rows, and what was dropped; TraceError when every row is bad."""
    path = existing_file(path)
    check_limit(limit)
    source = str(path)
    read_bad: list[TraceError] = []
    cells = read_cells(path, fmt, mapping, limit, read_bad)
    bad = [row for err in read_bad for row in bad_rows(err)]
    rows_read = len(cells.raw) + len(bad)
    df, dropped = drop_failing(cells, source, bad)
    skipped = SkippedRows(source, rows_read, tuple(sorted(bad + dropped, key=lambda r: r.row)))
    return df, skipped


@dataclass(frozen=True)
class RawCells:
    """A trace file's cells as read, and how they become a trace."""

    raw: pd.DataFrame  # the cells, one row per request read
    names: np.ndarray  # each row's name: its file line, or its 0-based data row
    convert: Callable[[pd.DataFrame, np.ndarray | None], pd.DataFrame]  # (cells, lines) -> trace
    positional: bool  # True: rows are named by position (CSV, Parquet), convert gets no lines


def read_cells(path: Path, fmt: str, mapping: TraceMapping | None, limit: int | None,
               bad: list[TraceError]) -> RawCells:
    """The file's raw cells and their conversion to the schema; rows that cannot even be read
    (a line that is not JSON, a row of the wrong width) go to `bad`."""
    source = str(path)
    if mapping is not None:
        fmt = "csv" if fmt == "azure" else fmt
        if fmt not in MAPPED_FILE_FORMATS:
            raise ConfigError("workload.trace.format", fmt, "a column mapping reads "
                                                            f"{', '.join(MAPPED_FILE_FORMATS)}")
        raw, lines = read_raw(path, fmt, limit, bad)
        return _cells(raw, lines, lambda cells, names: apply_mapping(cells, mapping, source,
                                                                     names))
    if fmt in ("csv", "parquet"):
        raw = read_csv_raw(path, limit) if fmt == "csv" else read_parquet_raw(path, limit)
        return _cells(raw, None, lambda cells, names: finish(cells, source, names))
    readers = {"jsonl": (read_jsonl_raw, finish), "azure": (read_azure, azure_frame),
               "mooncake": (read_records, mooncake_frame)}
    if fmt not in readers:
        raise ConfigError("workload.trace.skip_bad_rows", True, f"not for {fmt} files; for "
                          f"csv, parquet, {', '.join(readers)}")
    read, frame = readers[fmt]
    raw, lines = read(path, limit, bad)
    return _cells(raw, lines, lambda cells, names: frame(cells, source, names))


def _cells(raw: pd.DataFrame, lines: Any, convert: Callable[..., pd.DataFrame]) -> RawCells:
    if lines is None:
        return RawCells(raw, np.arange(len(raw)), convert, True)
    return RawCells(raw, np.asarray(lines, dtype=np.int64), convert, False)


def drop_failing(cells: RawCells, source: str,
                 earlier: list[BadRow]) -> tuple[pd.DataFrame, list[BadRow]]:
    """The trace of `cells` once the rows each failed check names are dropped, and those rows;
    TraceError when none is left (`earlier`: the rows dropped before, for the message)."""
    raw, names, dropped = cells.raw, cells.names, []
    while len(raw):
        try:
            return cells.convert(raw, None if cells.positional else names), dropped
        except BadCells as err:
            rows = np.asarray(err.rows, dtype=np.int64)
            if cells.positional:  # positions in the cells converted: back to data rows
                if rows.min() < 0 or rows.max() >= len(names):
                    raise
                rows = names[rows]
            drop = np.isin(names, rows)
            if not drop.any():  # names no row of these cells: not a row's fault
                raise
            dropped.extend(bad_rows(err, rows))
            raw, names = raw[~drop].reset_index(drop=True), names[~drop]
    every = sorted(earlier + dropped, key=lambda r: r.row)
    if not every:
        raise TraceError(source, "trace has no requests")
    first = every[0]
    raise TraceError(source, f"every row is bad ({len(every)} rows; skip_bad_rows keeps the "
                             f"good ones, and there are none); first: {first.text()}",
                     row=first.row, field=first.field, value=first.value)


def bad_rows(err: TraceError, rows: np.ndarray | None = None) -> list[BadRow]:
    """The rows a failed check names (one for a plain TraceError); `rows` renames them."""
    if isinstance(err, BadCells):
        names = err.rows if rows is None else rows.tolist()
        return [BadRow(int(row), err.field, cell, err.why)
                for row, cell in zip(names, err.cells)]
    assert err.row is not None, err
    return [BadRow(err.row, err.field, err.value, str(err.args[1]))]

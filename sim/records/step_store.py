"""Step columns on disk: what `StepLog` (sim/records/recorder.py) spills once a run has many steps.

A million-request run executes about 2.7 million steps; their 14 columns kept in memory need
~300 MB, and building the steps DataFrame from them doubled it. `StepStore` appends each folded
chunk of a column to an anonymous temporary file (numeric and bool chunks; a chunk numpy holds as
objects stays in memory) and reads any range of rows back, each chunk cast to the column's final
dtype: the dtype `np.concatenate` of every chunk gives, so the columns read back are exactly the
in-memory ones. `write_parquet` writes them in row groups of pyarrow's default size, one row group
in memory at a time; its bytes are those of `DataFrame.to_parquet(path, index=False)` on the whole
frame (the pandas metadata does not depend on the row count when no index is kept).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from sim.records.gap_store import _read, _write

ROW_GROUP = 1 << 20  # rows per parquet row group: pyarrow's default (DataFrame.to_parquet)


class _Column:
    """One column's chunks: (dtype, first item in the file, rows) or an in-memory array."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="servesim-steps-")
        self.fd = self.file.fileno()
        self.chunks: list[tuple[np.dtype, int, int] | np.ndarray] = []
        self.starts: list[int] = []  # first row of each chunk
        self.bytes = 0  # bytes written to the file
        self.dtype: np.dtype | None = None  # np.result_type of every chunk so far

    def add(self, values: np.ndarray, row: int) -> None:
        """Append one chunk whose first row is `row`."""
        self.starts.append(row)
        self.dtype = values.dtype if self.dtype is None else np.result_type(self.dtype,
                                                                             values.dtype)
        if values.dtype.kind not in "biuf":  # objects, strings: kept as they are
            self.chunks.append(values)
            return
        size = values.dtype.itemsize
        if self.bytes % size:  # keep every chunk aligned to its own item size
            pad = size - self.bytes % size
            _write(self.fd, np.zeros(pad, dtype=np.uint8))
            self.bytes += pad
        self.chunks.append((values.dtype, self.bytes // size, len(values)))
        _write(self.fd, values)
        self.bytes += values.nbytes

    def _chunk(self, i: int, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of chunk i (relative to the chunk), as stored."""
        chunk = self.chunks[i]
        if isinstance(chunk, np.ndarray):
            return chunk[start:stop]
        dtype, first, _ = chunk
        return _read(self.fd, dtype, first + start, first + stop)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop), every chunk cast to the final dtype (as np.concatenate would)."""
        parts = []
        for i, first in enumerate(self.starts):
            n = len(self.chunks[i]) if isinstance(self.chunks[i], np.ndarray) else \
                self.chunks[i][2]
            lo, hi = max(start, first), min(stop, first + n)
            if lo < hi:
                parts.append(self._chunk(i, lo - first, hi - first))
        if not parts:
            return np.empty(0, dtype=self.dtype)
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        out = out.astype(self.dtype, copy=False)
        return out if out.flags.writeable else out.copy()  # never a read-only buffer

    def close(self) -> None:
        self.file.close()


class StepStore:
    """Folded step columns in temporary files (removed when closed)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)  # column names, in order
        self._columns = {name: _Column() for name in self.names}
        self.num_rows = 0  # rows stored

    def add(self, columns: Sequence[np.ndarray]) -> None:
        """Append one chunk of every column (same length, in `names` order)."""
        for name, values in zip(self.names, columns):
            self._columns[name].add(np.asarray(values), self.num_rows)
        self.num_rows += len(columns[0])

    def read(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows [start, stop) of column `name`."""
        return self._columns[name].read(start, self.num_rows if stop is None else stop)

    def close(self) -> None:
        """Remove the files."""
        for column in self._columns.values():
            column.close()


def write_parquet(path: Path | str, num_rows: int, names: Sequence[str],
                  read: Callable[[str, int, int], np.ndarray]) -> None:
    """Write `num_rows` rows of columns `names` to `path` as DataFrame.to_parquet(index=False)
    writes the whole frame, building one row group (ROW_GROUP rows) at a time from
    `read(name, start, stop)`."""
    frames = (pd.DataFrame({name: read(name, start, min(start + ROW_GROUP, num_rows))
                            for name in names}, columns=list(names), copy=False)
              for start in range(0, max(num_rows, 1), ROW_GROUP))
    write_frames(path, frames)


def write_frames(path: Path | str, frames: Iterable[pd.DataFrame],
                 sample: pd.DataFrame | None = None) -> None:
    """Write `frames` (row groups of ROW_GROUP rows, the last one shorter) to `path` as
    DataFrame.to_parquet(index=False) writes their concatenation, holding one frame at a time.
    The schema (arrow types, pandas metadata) is `sample`'s, a frame with the whole frame's
    dtypes and value types (default: the first frame's, right when it has them all)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        for frame in frames:
            if writer is None:
                schema = pa.Schema.from_pandas(frame if sample is None else sample,
                                               preserve_index=False)
                writer = pq.ParquetWriter(path, schema, compression="snappy")
            writer.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
            del frame
    finally:
        if writer is not None:
            writer.close()


def write_or_keep(frame: pd.DataFrame, path: Path | str) -> pd.DataFrame | None:
    """`frame.to_parquet(path, index=False)`; None when written, the frame when the write
    failed (OSError, a full disk: the file is removed and the caller's own write of the frame
    names the error)."""
    try:
        frame.to_parquet(path, index=False)
    except OSError:
        Path(path).unlink(missing_ok=True)
        return frame
    return None

"""Table chunks on disk whose final column dtypes are known only when the table is complete.

A run's records and events are built row by row as Python values; the whole-run frame today is
`pd.DataFrame` of whole lists (or of `record_log.compact` chunks joined), so a column's dtype is
what pandas infers from every value: int64 only when every chunk is, str when every value is a
string or missing, float64 once one NaN or float joins ints, object otherwise. `ColumnSpool`
takes the chunks as they come (int64 / float64 arrays written raw, other chunks pickled, all to
one anonymous temporary file), keeps one sample value of each Python type a column held, and at
the end gives the whole-frame dtype of each column (`dtypes`), the whole-frame schema (`sample`)
and any range of rows as a frame with those dtypes (`frame`): the same values the whole frame
holds in those rows, one row group in memory at a time.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from sim.records.gap_store import _read, _write

NUMERIC = (np.dtype(np.int64), np.dtype(np.float64))  # chunk dtypes written raw


class ColumnSpool:
    """Chunks of columns `names` (every chunk has every column, same length) in a temporary
    file removed when closed."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)  # column names, in order
        self._file = tempfile.TemporaryFile(prefix="servesim-table-")
        self._fd = self._file.fileno()
        self._bytes = 0  # bytes written
        self._chunks: list[dict[str, tuple]] = []  # per chunk, column -> (kind, dtype, off, n)
        self._starts: list[int] = []  # first row of each chunk
        self._lengths: list[int] = []  # rows of each chunk
        self._arrays: dict[str, set[np.dtype]] = {n: set() for n in self.names}  # raw dtypes
        self._samples: dict[str, dict[type, object]] = {n: {} for n in self.names}  # of lists
        self.num_rows = 0  # rows stored

    def add(self, columns: Mapping[str, np.ndarray | list]) -> None:
        """Append one chunk (`record_log.compact` values: int64 / float64 arrays or lists)."""
        entry = {}
        n = len(columns[self.names[0]])
        for name in self.names:
            values = columns[name]
            if isinstance(values, np.ndarray) and values.dtype in NUMERIC:
                self._arrays[name].add(values.dtype)
                size = values.dtype.itemsize
                self._pad(size)
                entry[name] = ("a", values.dtype, self._bytes // size, n)
                _write(self._fd, values)
                self._bytes += values.nbytes
                continue
            values = values.tolist() if isinstance(values, np.ndarray) else list(values)
            samples = self._samples[name]
            for v in values:
                samples.setdefault(type(v), v)
            data = np.frombuffer(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
            entry[name] = ("p", None, self._bytes, len(data))
            _write(self._fd, data)
            self._bytes += len(data)
        self._chunks.append(entry)
        self._starts.append(self.num_rows)
        self._lengths.append(n)
        self.num_rows += n

    def _pad(self, size: int) -> None:
        """Align the next write to `size` bytes."""
        if self._bytes % size:
            pad = size - self._bytes % size
            _write(self._fd, np.zeros(pad, dtype=np.uint8))
            self._bytes += pad

    def _sample(self, name: str) -> list:
        """One value of each Python type column `name` held (what pandas infers a dtype from)."""
        values = list(self._samples[name].values())
        values += [dtype.type(0).item() for dtype in sorted(self._arrays[name], key=str)]
        return values

    def dtypes(self) -> dict[str, object]:
        """Each column's dtype in the whole frame: `join`'s rule when every chunk was an array
        (float64 if any was, else int64), else what pandas infers from the values' types."""
        out: dict[str, object] = {}
        for name in self.names:
            if not self._samples[name]:
                out[name] = np.dtype(np.float64) if np.dtype(np.float64) in self._arrays[name] \
                    else np.dtype(np.int64)
            else:
                out[name] = pd.Series(self._sample(name)).dtype
        return out

    def sample(self) -> pd.DataFrame:
        """A small frame with the whole frame's dtypes and every Python type each column held:
        the whole frame's parquet schema (types, pandas metadata) is this frame's."""
        dtypes = self.dtypes()
        samples = {name: self._sample(name) for name in self.names}
        size = max((len(v) for v in samples.values()), default=0)
        return pd.DataFrame({name: pd.Series(v + [v[0]] * (size - len(v)), dtype=dtypes[name])
                             for name, v in samples.items()}, columns=list(self.names))

    def _part(self, name: str, i: int, lo: int, hi: int) -> np.ndarray | list:
        """Rows [lo, hi) (within the chunk) of column `name` of chunk i."""
        kind, dtype, offset, size = self._chunks[i][name]
        if kind == "a":
            return _read(self._fd, dtype, offset + lo, offset + hi)
        values = pickle.loads(os.pread(self._fd, size, offset))
        return values[lo:hi]

    def frame(self, start: int, stop: int, dtypes: Mapping[str, object]) -> pd.DataFrame:
        """Rows [start, stop) with `dtypes` (from `dtypes()`), values as the whole frame's."""
        parts: dict[str, list] = {name: [] for name in self.names}
        for i, (first, n) in enumerate(zip(self._starts, self._lengths)):
            lo, hi = max(start, first), min(stop, first + n)
            if lo < hi:
                for name in self.names:
                    parts[name].append(self._part(name, i, lo - first, hi - first))
        columns = {}
        for name in self.names:  # each column's parts freed once it is joined
            columns[name] = _column(parts.pop(name), dtypes[name])
        return pd.DataFrame(columns, columns=list(self.names), copy=False)

    def close(self) -> None:
        """Remove the file."""
        self._file.close()


def _column(parts: list, dtype: object) -> pd.Series:
    """Chunk parts joined as one column of `dtype`."""
    if parts and all(isinstance(p, np.ndarray) for p in parts):
        joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return pd.Series(joined.astype(dtype, copy=False), copy=False)
    values: list = []
    for p in parts:
        values.extend(p.tolist() if isinstance(p, np.ndarray) else p)
    return pd.Series(values, dtype=dtype)

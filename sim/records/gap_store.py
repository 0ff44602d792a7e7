"""Inter-token gaps on disk: what `GapLog` (sim/records/recorder.py) spills once a run has many.

A million-request run records about fifty million gaps; kept in memory they alone need ~400 MB,
and their exact percentiles a sort order as large again. `GapFile` appends folded gaps (float64)
and their weights (int64) to anonymous temporary files, and single weight-1 gaps to a third, and
reads any range back without mapping the files (`os.pread`), so a pass over the gaps holds one
chunk at a time. Its values are, in order, every chunk's gaps then every single gap, exactly the
order `GapLog.arrays` gives.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

F8 = np.dtype(np.float64)  # gap values on disk
I8 = np.dtype(np.int64)  # gap weights on disk


def _write(fd: int, array: np.ndarray) -> None:
    """Append `array`'s bytes to the file `fd`."""
    data = memoryview(np.ascontiguousarray(array)).cast("B")
    while len(data):
        data = data[os.write(fd, data):]


def _read(fd: int, dtype: np.dtype, start: int, stop: int) -> np.ndarray:
    """Items [start, stop) of a file of `dtype` items."""
    n = max(0, stop - start)
    raw = os.pread(fd, n * dtype.itemsize, start * dtype.itemsize)
    if len(raw) != n * dtype.itemsize:
        raise OSError(f"gap file read {len(raw)} of {n * dtype.itemsize} bytes")
    return np.frombuffer(raw, dtype=dtype)


class GapFile:
    """Gap chunks with weights, then single gaps, in temporary files removed when closed."""

    def __init__(self) -> None:
        self._files = [tempfile.TemporaryFile(prefix="servesim-gaps-") for _ in range(3)]
        self._values, self._weights, self._scalars = (f.fileno() for f in self._files)
        self.num_chunk_values = 0  # gaps of chunks (weights given)
        self.num_scalars = 0  # single gaps of weight 1

    @property
    def num_values(self) -> int:
        """Gaps stored."""
        return self.num_chunk_values + self.num_scalars

    def add(self, values: np.ndarray, weights: np.ndarray) -> None:
        """Append gaps (float64) with one weight (int64) each."""
        _write(self._values, np.asarray(values, dtype=F8))
        _write(self._weights, np.asarray(weights, dtype=I8))
        self.num_chunk_values += len(values)

    def add_scalars(self, values: np.ndarray) -> None:
        """Append single gaps of weight 1 (they follow every chunk's gaps when read)."""
        _write(self._scalars, np.asarray(values, dtype=F8))
        self.num_scalars += len(values)

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Gaps [start, stop) and their weights, chunk gaps first, then single gaps."""
        nc = self.num_chunk_values
        parts_v, parts_w = [], []
        if start < nc:
            parts_v.append(_read(self._values, F8, start, min(stop, nc)))
            parts_w.append(_read(self._weights, I8, start, min(stop, nc)))
        if stop > nc:
            v = _read(self._scalars, F8, max(start, nc) - nc, stop - nc)
            parts_v.append(v)
            parts_w.append(np.ones(len(v), dtype=I8))
        if len(parts_v) == 1:
            return parts_v[0], parts_w[0]
        return (np.concatenate(parts_v) if parts_v else np.empty(0, F8),
                np.concatenate(parts_w) if parts_w else np.empty(0, I8))

    def close(self) -> None:
        """Remove the files."""
        for f in self._files:
            f.close()

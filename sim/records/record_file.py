"""A run's records read a few columns at a time: from its frame, or from its records file.

A run that writes its records to a parquet file (`run_simulation(records_path=...)`) never
builds the whole records frame: what is computed from the records after the run (the summary,
per-class metrics, SLO, steady state, cost, bench.json) reads only the columns it needs, one or
a few at a time (8 bytes a request each: 80 MB a column at ten million requests). The values
and dtypes read back are the frame's (parquet keeps both), so every figure is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

Source = pd.DataFrame | Path  # a records frame, or the path of its parquet file
BATCH_ROWS = 2**18  # rows read at once by `batches` and `isin`


class RecordColumns:
    """Columns of a run's records by name, from a frame (no copy) or its parquet file."""

    def __init__(self, source: Source | str | "RecordColumns") -> None:
        if isinstance(source, RecordColumns):
            source = source.source
        self.source: Source = source if isinstance(source, pd.DataFrame) else Path(source)
        self._names: list[str] | None = None
        self._rows: int | None = None

    @property
    def names(self) -> list[str]:
        """The records' column names, in order."""
        if self._names is None:
            if isinstance(self.source, pd.DataFrame):
                self._names = list(self.source.columns)
            else:
                import pyarrow.parquet as pq

                self._names = list(pq.read_schema(self.source).names)
        return self._names

    def __len__(self) -> int:
        if self._rows is None:
            if isinstance(self.source, pd.DataFrame):
                self._rows = len(self.source)
            else:
                import pyarrow.parquet as pq

                self._rows = pq.ParquetFile(self.source).metadata.num_rows
        return self._rows

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> pd.Series:
        """One column (the frame's own Series, or read from the file)."""
        if isinstance(self.source, pd.DataFrame):
            return self.source[name]
        return _read(self.source, [name])[name]

    def frame(self, names: Iterable[str]) -> pd.DataFrame:
        """A frame holding at least those of `names` the records have: the frame itself, or
        just those columns read from the file."""
        if isinstance(self.source, pd.DataFrame):
            return self.source
        return _read(self.source, [n for n in dict.fromkeys(names) if n in self.names])

    def batches(self, names: Iterable[str], rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
        """Those of `names` the records have, `rows` rows at a time, in order (each batch's
        index is its row positions): memory bounded by a batch whatever the run's size."""
        names = [n for n in dict.fromkeys(names) if n in self.names]
        if isinstance(self.source, pd.DataFrame):
            for i in range(0, len(self.source), rows):
                part = self.source[names].iloc[i:i + rows]
                yield part.set_axis(pd.RangeIndex(i, i + len(part)))
            return
        import pyarrow.parquet as pq

        i = 0
        for batch in pq.ParquetFile(self.source).iter_batches(batch_size=rows, columns=names):
            part = batch.to_pandas()
            yield part.set_axis(pd.RangeIndex(i, i + len(part)))
            i += len(part)
        _release()

    def value_counts(self, name: str) -> dict[str, int]:
        """Rows holding each value of string column `name` (nulls not counted), in one pass a
        batch at a time: every `isin(name, (v,)).sum()` at once."""
        if isinstance(self.source, pd.DataFrame):
            return {str(k): int(n) for k, n in self.source[name].value_counts().items()}
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        counts: dict[str, int] = {}
        for batch in pq.ParquetFile(self.source).iter_batches(batch_size=BATCH_ROWS,
                                                              columns=[name]):
            for item in pc.value_counts(batch.column(0)).to_pylist():
                if item["values"] is not None:
                    counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
        _release()
        return counts

    def isin(self, name: str, values: Sequence[str]) -> np.ndarray:
        """`self[name].isin(values)` as a bool array, the column compared a batch at a time
        (a file's strings compared in arrow: no Python string a row)."""
        if isinstance(self.source, pd.DataFrame):
            return self.source[name].isin(values).to_numpy(dtype=bool)
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        if not len(self):
            return np.zeros(0, dtype=bool)
        wanted = pa.array(list(values), type=pa.string())
        parts = [pc.is_in(batch.column(0), value_set=wanted).to_numpy(zero_copy_only=False)
                 for batch in pq.ParquetFile(self.source).iter_batches(
                     batch_size=BATCH_ROWS, columns=[name])]
        _release()
        return np.concatenate(parts).astype(bool, copy=False)


def _read(path: Path, names: list[str]) -> pd.DataFrame:
    """Columns `names` of the parquet file, as `pd.read_parquet` gives them, each arrow
    column freed as it is converted (no second copy of the columns read), and the freed
    arrow memory handed back (`_release`)."""
    frame = pd.read_parquet(path, columns=names,
                            to_pandas_kwargs={"self_destruct": True, "split_blocks": True})
    _release()
    return frame


def _release() -> None:
    """Hand arrow's freed buffers back to the system: its allocator keeps them otherwise, so
    every column read after a run would add its size to the process's resident memory."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def record_frame(source: Source | RecordColumns, names: Iterable[str]) -> pd.DataFrame:
    """`RecordColumns(source).frame(names)`: the columns a computation reads, as a frame."""
    return RecordColumns(source).frame(names)

"""Records of a run that writes them to a file: kept in request-id order as the run goes, and
spooled to disk past a threshold, so a run of millions of requests never holds its records.

Requests reach a final state out of order. `RecordStream` holds a final request only until
every lower id is final too (a heap: bounded by the requests in flight around it), then folds
the in-order run into column chunks (`RecordLog`'s), and past `spill_after` folded records moves
every chunk to a `ColumnSpool` (sim/records/column_spool.py) and sends later ones there.
`write_parquet` writes the records file: as `RecordLog` and the whole frame do when nothing was
spooled; else one row group at a time from the spool, each with the whole frame's dtypes and its
derived columns computed by `derive` (per row, so per row group gives the same values), the
schema from the spool's sample: the bytes `derive(whole frame).to_parquet(path, index=False)`
gives.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from sim.core.request import Request
from sim.records import step_store
from sim.records.column_spool import ColumnSpool
from sim.records.record_log import RecordLog, compact, record_columns

RECORD_SPILL = 1 << 18  # folded records kept in memory; past it they go to a temporary file
Derive = Callable[[pd.DataFrame], pd.DataFrame]  # base record columns -> the records frame


class RecordStream(RecordLog):
    """A RecordLog whose chunks are in request-id order and spooled past `spill_after`."""

    def __init__(self, extra: tuple[str, ...] = (), spill_after: int | None = None) -> None:
        super().__init__(extra)
        self.spill_after = RECORD_SPILL if spill_after is None else spill_after  # folded
        # records held in memory before spooling
        self.spool: ColumnSpool | None = None  # the spooled chunks, once there are that many
        self._heap: list[tuple[int, int, Request]] = []  # (id, arrival order, request)
        self._seq = 0  # final requests taken so far
        self._next = 0  # the lowest id not yet released (ids are the trace's rows: 0, 1, ...)

    def add(self, requests: Iterable[Request]) -> None:
        """Take final requests; release, in id order, every one whose lower ids are all final."""
        heap = self._heap
        for r in requests:
            if r.request_id < self._next:
                raise RuntimeError(f"request {r.request_id} recorded after a higher id")
            heapq.heappush(heap, (r.request_id, self._seq, r))
            self._seq += 1
        released = []
        while heap and heap[0][0] == self._next:
            released.append(heapq.heappop(heap)[2])
            self._next += 1
        if released:
            super().add(released)

    def _release_all(self) -> None:
        """Release every held request (the run is over), in id order."""
        rest = [heapq.heappop(self._heap)[2] for _ in range(len(self._heap))]
        if rest:
            self._next = rest[-1].request_id + 1
            RecordLog.add(self, rest)

    def _fold(self) -> None:
        if not self._pending:
            return
        if self.spool is None and self.num_records + len(self._pending) <= self.spill_after:
            super()._fold()
            return
        if self.spool is None:  # move every folded chunk to the spool, in order
            super()._fold()
            names = list(self._chunks)
            self.spool = ColumnSpool(names)
            for chunk in zip(*(self._chunks[n] for n in names)):
                self.spool.add(dict(zip(names, chunk)))
            self._chunks = {}
            return
        columns = {n: compact(v) for n, v in record_columns(self._pending, self.extra).items()}
        self.spool.add(columns)
        self.num_records += len(self._pending)
        self._pending = []

    def columns(self) -> dict:
        """Every column in request-id order (RecordLog.columns), when nothing was spooled."""
        self._release_all()
        if self.spool is not None:
            raise RuntimeError("the records were spooled: read them with write_parquet")
        return super().columns()

    def write_parquet(self, path: Path | str, derive: Derive) -> pd.DataFrame | None:
        """Write `derive(records frame)` to `path` as DataFrame.to_parquet(index=False) does,
        one row group at a time when the records were spooled; then drop them. None when
        written; the frame when they were in memory and the write failed (OSError: a full
        disk; the file is removed, and the caller's own write of the frame names the error)."""
        self._release_all()
        self._fold()
        spool = self.spool
        if spool is None:
            return step_store.write_or_keep(derive(pd.DataFrame(super().columns())), path)
        dtypes = spool.dtypes()
        rows = step_store.ROW_GROUP
        frames = (derive(spool.frame(start, start + rows, dtypes))
                  for start in range(0, spool.num_rows, rows))
        try:
            step_store.write_frames(path, frames, derive(spool.sample()))
        finally:
            spool.close()
            self.spool = None
        return None

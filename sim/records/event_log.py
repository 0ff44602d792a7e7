"""Scheduler events of a run that writes them to a file: spooled to disk past a threshold.

`Recorder.events` is a list of (time_s, kind, request_id, info) tuples and the events frame
`pd.DataFrame` of it. A run that streams its events (`Recorder.event_spill` set) moves the list
to a `ColumnSpool` (sim/records/column_spool.py) every `event_spill` events, as columns
(`record_log.compact`: int64 / float64 where pandas infers those); `write_events` writes the
events file: the whole frame's `to_parquet(path, index=False)` when nothing was spooled, else
one row group at a time with the whole frame's dtypes and schema (the same bytes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from sim.records import step_store
from sim.records.column_spool import ColumnSpool
from sim.records.record_log import compact

EVENT_COLUMNS = ("time_s", "kind", "request_id", "info")  # seconds, str, int, str
EVENT_SPILL = 1 << 18  # events kept in memory by a streaming run before they are spooled


def events_frame(events: Sequence[tuple]) -> pd.DataFrame:
    """The events frame of a list of event tuples."""
    return pd.DataFrame(events, columns=list(EVENT_COLUMNS))


def spool_events(spool: ColumnSpool | None, events: list[tuple]) -> ColumnSpool:
    """Append `events` (then cleared) to `spool` (a new one when None) as column chunks."""
    spool = ColumnSpool(EVENT_COLUMNS) if spool is None else spool
    if events:
        spool.add({name: compact(list(values))
                   for name, values in zip(EVENT_COLUMNS, zip(*events))})
        events.clear()
    return spool


def write_events(path: Path | str, events: list[tuple],
                 spool: ColumnSpool | None) -> pd.DataFrame | None:
    """Write every event (the spooled ones, then `events`) to `path` as
    `events_frame(all events).to_parquet(path, index=False)` does. None when written; the
    frame when none were spooled and the write failed (OSError: the file is removed, and the
    caller's own write of the frame names the error)."""
    if spool is None:
        return step_store.write_or_keep(events_frame(events), path)
    spool = spool_events(spool, events)
    dtypes = spool.dtypes()
    rows = step_store.ROW_GROUP
    frames = (spool.frame(start, start + rows, dtypes)
              for start in range(0, spool.num_rows, rows))
    try:
        step_store.write_frames(path, frames, spool.sample())
    finally:
        spool.close()
    return None

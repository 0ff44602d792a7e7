"""What the engine and policies record while a simulation runs: inter-token gaps, steps, events.

Gaps are stored as (value, weight) chunks: a run of decode iterations shared by a batch is one
array of gaps with the batch size as weight, so ITL percentiles are exact without one Python
float per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from sim.records.column_spool import ColumnSpool
from sim.records.event_log import events_frame, spool_events, write_events
from sim.records.gap_store import GapFile
from sim.records.record_log import RecordLog
from sim.records.step_store import ROW_GROUP, StepStore, write_parquet

STEP_COLUMNS = ("instance_id", "start_s", "duration_s", "num_iterations", "num_seqs",
                "num_new_tokens", "num_context_tokens", "num_computed_tokens", "kv_tokens",
                "reserved_kv_tokens", "oom", "sched_s", "sched_gap_s", "policy_host_s")
# sched_s: modelled scheduler CPU seconds of the step's iterations (sim.cost.overhead); sched_gap_s:
# the part of it the GPU sat idle; policy_host_s: measured host seconds of the policy's
# next_step + update for the step (time.perf_counter; not deterministic: in memory only, written
# to host_timing.parquet, never to steps.parquet; sim/metrics/host_timing.py)


FOLD = 4096  # pending adds (or scalar gaps) folded into flat arrays at a time
SPILL = 1 << 21  # folded gaps kept in memory; past it every fold goes to a temporary file
STEP_SPILL = 1 << 18  # folded step rows kept in memory; past it they go to temporary files


class GapLog:
    """Weighted samples of inter-token latency (seconds).

    Adds are folded, every FOLD of them, into one float64 array of values and a run-length
    encoding of their weights (a decode jump's gaps share one weight), so memory is about 8 bytes
    per gap however many steps there are; `arrays` returns exactly what keeping every add would.
    Past `spill_after` folded gaps they all move to temporary files (sim/records/gap_store.py) and later
    folds follow them there: memory stays bounded, and `store` reads them back in chunks."""

    def __init__(self, spill_after: int = SPILL) -> None:
        self._values: list[np.ndarray | list[float]] = []  # pending gaps, not yet folded
        self._weights: list[int | np.ndarray] = []  # an int applies to every value of its chunk
        self._scalars: list[float] = []  # single gaps of weight 1, batched for speed
        self._flat: list[np.ndarray] = []  # folded gaps, float64, in add order
        self._run_weights: list[np.ndarray] = []  # folded weights as runs: weight of each run
        self._run_lengths: list[np.ndarray] = []  # folded weights as runs: values in each run
        self._flat_scalars: list[np.ndarray] = []  # folded single gaps, float64
        self._num_folded = 0  # gaps in the flat arrays (chunks and single gaps)
        self.spill_after = spill_after  # folded gaps held in memory before spilling
        self.store: GapFile | None = None  # the spilled gaps, once there are that many

    def add(self, gaps: np.ndarray | list[float] | float, weight: int | np.ndarray = 1) -> None:
        """Record gaps (an array, a list of floats kept as given, or one float); `weight` is
        the number of tokens that saw each gap."""
        if isinstance(gaps, float):
            if weight == 1:
                self._scalars.append(gaps)
                if len(self._scalars) >= FOLD:
                    self._fold_scalars()
                return
            gaps = np.array((gaps,))
        self._values.append(gaps)
        self._weights.append(weight)
        if len(self._values) >= FOLD:
            self._fold()

    def _fold_scalars(self) -> None:
        """Move the pending single gaps into a flat array (or the spill files)."""
        values = np.asarray(self._scalars, dtype=np.float64)
        self._scalars = []
        if self.store is not None:
            self.store.add_scalars(values)
            return
        self._flat_scalars.append(values)
        self._num_folded += len(values)
        if self._num_folded > self.spill_after:
            self._spill()

    def _fold(self) -> None:
        """Move the pending adds into the flat arrays (or the spill files)."""
        values, weights = self._pending()
        self._values, self._weights = [], []
        if self.store is not None:
            self.store.add(values, weights)
            return
        run_weights, run_lengths = runs(weights)
        self._flat.append(values)
        self._run_weights.append(run_weights)
        self._run_lengths.append(run_lengths)
        self._num_folded += len(values)
        if self._num_folded > self.spill_after:
            self._spill()

    def _spill(self) -> None:
        """Move every folded gap to temporary files; later folds go there too."""
        self.store = GapFile()
        for values, w, n in zip(self._flat, self._run_weights, self._run_lengths):
            self.store.add(values, np.repeat(w, n))
        for values in self._flat_scalars:
            self.store.add_scalars(values)
        self._flat, self._run_weights, self._run_lengths, self._flat_scalars = [], [], [], []

    def finish(self) -> GapFile | None:
        """Fold what is pending; the spill files when the gaps went there, else None."""
        if self.store is not None:
            if self._values:
                self._fold()
            if self._scalars:
                self._fold_scalars()
        return self.store

    def _pending(self) -> tuple[np.ndarray, np.ndarray]:
        """The pending adds' gaps (float64) and weights (int64), one value each."""
        if self._values and all(type(w) is int for w in self._weights) and all(
                type(v) is list or type(v) is np.ndarray and v.ndim == 1
                for v in self._values):  # the usual adds (lists of floats, 1-d arrays)
            return (np.concatenate(self._values).astype(np.float64, copy=False),
                    np.repeat(np.array(self._weights, dtype=np.int64),
                              [len(v) for v in self._values]))
        values = [np.asarray(v, dtype=np.float64).ravel() for v in self._values]
        weights = [np.broadcast_to(np.asarray(w, dtype=np.int64), np.shape(v)).ravel()
                   for v, w in zip(self._values, self._weights)]
        return (np.concatenate(values) if values else np.empty(0, dtype=np.float64),
                np.concatenate(weights) if weights else np.empty(0, dtype=np.int64))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All gaps and their weights: chunks in add order, then single gaps in add order."""
        store = self.finish()
        if store is not None:
            return store.read(0, store.num_values)
        pending_values, pending_weights = self._pending()
        scalars = self._flat_scalars + [np.asarray(self._scalars, dtype=np.float64)]
        values = np.concatenate(self._flat + [pending_values] + scalars)
        pending_runs = runs(pending_weights)
        num_scalars = np.array([sum(len(a) for a in scalars)], dtype=np.int64)
        run_weights = np.concatenate(self._run_weights + [pending_runs[0], np.ones(1, np.int64)])
        run_lengths = np.concatenate(self._run_lengths + [pending_runs[1], num_scalars])
        return values, np.repeat(run_weights.astype(np.int64), run_lengths)


def runs(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run-length encoding of `weights`: the weight of each run of equal ones, and its length."""
    starts = np.flatnonzero(np.diff(weights)) + 1  # where a new run begins
    starts = np.concatenate(([0], starts)) if len(weights) else starts
    return weights[starts], np.diff(np.append(starts, len(weights))).astype(np.int64)


class StepLog:
    """Step rows kept as columns: the latest rows as tuples (one append a step), numpy arrays
    before, every FOLD rows (each column's dtype inferred by numpy as pandas would infer it from
    the list). Past `spill_after` folded rows the folded columns move to temporary files
    (sim/records/step_store.py) and later folds follow them: memory stays bounded, and `write_parquet`
    writes the steps file one row group at a time."""

    def __init__(self, spill_after: int = STEP_SPILL) -> None:
        self._rows: list[tuple] = []  # latest rows, in STEP_COLUMNS order
        self._arrays: dict[str, list[np.ndarray]] = {c: [] for c in STEP_COLUMNS}  # folded
        self.num_rows = 0  # rows recorded
        self._num_folded = 0  # rows in the folded arrays (in memory)
        self.spill_after = spill_after  # folded rows held in memory before spilling
        self.store: StepStore | None = None  # the spilled rows, once there are that many

    def append(self, row: tuple) -> None:
        """One step's values, in STEP_COLUMNS order."""
        rows = self._rows
        rows.append(row)
        self.num_rows += 1
        if len(rows) >= FOLD:
            self._fold()

    def _fold(self) -> None:
        """Move the latest rows into the folded arrays (or the spill files)."""
        columns = [np.asarray(values) for values in zip(*self._rows)]
        self._rows = []
        if self.store is not None:
            self.store.add(columns)
            return
        for column, values in zip(STEP_COLUMNS, columns):
            self._arrays[column].append(values)
        self._num_folded += len(columns[0])
        if self._num_folded > self.spill_after:
            self.store = StepStore(STEP_COLUMNS)
            for chunks in zip(*(self._arrays[c] for c in STEP_COLUMNS)):
                self.store.add(chunks)
            self._arrays = {c: [] for c in STEP_COLUMNS}
            self._num_folded = 0

    def column(self, name: str) -> np.ndarray | list:
        """Every value of column `name`, in row order (a list while nothing is folded)."""
        i = STEP_COLUMNS.index(name)
        tail = [row[i] for row in self._rows]
        folded = self._arrays[name]
        if self.store is not None:
            folded = [self.store.read(name)]
        if not folded:
            return tail
        return np.concatenate(folded + ([np.asarray(tail)] if tail else []))

    def column_parts(self, name: str, rows: int = ROW_GROUP) -> Iterator[np.ndarray | list]:
        """`column(name)` in row order, at most `rows` rows a part once spilled (bounded
        memory), else the in-memory parts as they are."""
        if self.store is not None:
            for start in range(0, self.store.num_rows, rows):
                yield self.store.read(name, start, min(start + rows, self.store.num_rows))
        else:
            yield from self._arrays[name]
        i = STEP_COLUMNS.index(name)
        tail = [row[i] for row in self._rows]
        if tail:
            yield tail

    def as_dict(self) -> dict[str, np.ndarray | list]:
        return {c: self.column(c) for c in STEP_COLUMNS}

    def frame(self) -> pd.DataFrame:
        """Every step as a DataFrame (STEP_COLUMNS)."""
        return pd.DataFrame(self.as_dict(), columns=list(STEP_COLUMNS), copy=False)

    def write_parquet(self, path: Path | str) -> None:
        """`self.frame().to_parquet(path, index=False)`, byte for byte, holding one row group
        at a time when the rows were spilled."""
        if self.store is None:
            self.frame().to_parquet(path, index=False)
            return
        if self._rows:
            self._fold()  # the tail joins the store (np.concatenate casts it the same way)
        write_parquet(path, self.num_rows, STEP_COLUMNS, self.store.read)

    def close(self) -> None:
        """Drop every row (and remove the spill files)."""
        if self.store is not None:
            self.store.close()
        self.__init__(self.spill_after)


@dataclass
class Recorder:
    """Per-simulation log shared by the engine (steps) and policies (gaps, events)."""

    gaps: GapLog = field(default_factory=GapLog)  # inter-token latencies
    step_log: StepLog = field(default_factory=StepLog)  # one row per step (STEP_COLUMNS)
    num_oom_events: int = 0  # steps that ran out of KV memory
    events: list[tuple[float, str, int, str]] = field(default_factory=list)  # (t, kind, id, info)
    records: RecordLog | None = None  # final requests' records, when the run keeps no objects
    counters: dict[str, float] = field(default_factory=dict)  # run totals a feature that is on
    # keeps (KV tiers: bytes moved per tier); added to the run summary as they are
    event_spill: int | None = None  # events held before they are spooled to disk (a run that
    # writes its events file: sim/records/event_log.py); None: all kept in `events`
    event_spool: ColumnSpool | None = None  # the spooled events, oldest first

    def add_record_columns(self, names: tuple[str, ...]) -> None:
        """Record the Request attributes `names` as extra columns (a feature that is on)."""
        if self.records is not None:
            self.records.add_columns(names)

    def record_step(self, instance_id: int, start_s: float, duration_s: float,
                    num_iterations: int, num_seqs: int, num_new_tokens: int,
                    num_context_tokens: int, num_computed_tokens: int, kv_tokens: int,
                    reserved_kv_tokens: int, oom: bool, sched_s: float = 0.0,
                    sched_gap_s: float = 0.0, policy_host_s: float = 0.0) -> None:
        """Append one step's row (see STEP_COLUMNS)."""
        self.step_log.append((instance_id, start_s, duration_s, num_iterations, num_seqs,
                              num_new_tokens, num_context_tokens, num_computed_tokens, kv_tokens,
                              reserved_kv_tokens, oom, sched_s, sched_gap_s, policy_host_s))
        if oom:
            self.num_oom_events += 1

    def event(self, now: float, kind: str, request_id: int = -1, info: str = "") -> None:
        """Record a notable scheduler event (preemption, OOM split, retraining...)."""
        self.events.append((now, kind, request_id, info))
        if self.event_spill is not None and len(self.events) >= self.event_spill:
            self.event_spool = spool_events(self.event_spool, self.events)

    @property
    def steps(self) -> dict[str, np.ndarray | list]:
        """Every step column, in row order (STEP_COLUMNS)."""
        return self.step_log.as_dict()

    def steps_frame(self) -> pd.DataFrame:
        return self.step_log.frame()  # no 2-D copy

    def events_frame(self) -> pd.DataFrame:
        """Every event as a DataFrame (when none were spooled)."""
        if self.event_spool is not None:
            raise RuntimeError("the events were spooled: write them with write_events")
        return events_frame(self.events)

    def write_events(self, path: Path | str) -> pd.DataFrame | None:
        """`events_frame().to_parquet(path, index=False)`, byte for byte, holding one row
        group at a time when the events were spooled; the events are dropped after. None when
        written, else the frame (event_log.write_events)."""
        kept = write_events(path, self.events, self.event_spool)
        self.events, self.event_spool = [], None
        return kept

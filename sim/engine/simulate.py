"""One simulation run from plain inputs: a trace, executors, and a policy factory.

`run_simulation` takes a `sim.engine.policy.PolicyFactory`, so sim/ needs nothing from policies/;
`policies.simulate.simulate(trace, "vllm", params, executors)` resolves a policy name into one.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from sim.core.executor import Executor, info_of
from sim.cost.frontend import add_frontend
from sim.cost.overhead import SchedulingOverhead
from sim.engine.admission import AdmissionConfig, AdmissionControl
from sim.engine.limits import resolve_max_model_len
from sim.engine.policy import PolicyFactory
from sim.engine.request_source import TraceRequests
from sim.engine.simulation import Simulation
from sim.engine.verdict import SloWatch
from sim.metrics.class_metrics import CLASS_RECORD_COLUMNS, class_summary, has_classes
from sim.metrics.host_timing import host_summary
from sim.metrics.summary import instance_frame, records_frame, summarize
from sim.records.event_log import EVENT_SPILL
from sim.records.instance_stats import InstanceStats
from sim.records.record_file import RecordColumns, record_frame
from sim.records.record_log import RecordLog
from sim.records.record_stream import RecordStream
from sim.records.recorder import Recorder


@dataclass
class RunResult:
    """Everything a run produced: flat per-request and per-step records plus a summary.

    `steps` is a DataFrame, or the path of the run's steps parquet file when the run streamed
    its steps there (`run_simulation(steps_path=...)`): the attribute then reads the file back
    on demand, and `write_steps` / `num_steps` use the file without reading it. `records` and
    `events` likewise (`records_path`, `events_path`): `record_frame(names)` reads only the
    columns a computation needs, `num_records` and `write_table` use the file unread."""

    _records: pd.DataFrame | Path  # one row per request (sim.metrics.summary.RECORD_COLUMNS and
    # latencies)
    _steps: pd.DataFrame | Path  # one row per executed Step (sim.records.recorder.STEP_COLUMNS)
    instances: pd.DataFrame  # one row per instance
    _events: pd.DataFrame | Path  # scheduler events (OOM, preemption, retraining...)
    summary: dict[str, float]  # run-level metrics (simulated: the same on every run)
    host_timing: dict[str, Any] = field(default_factory=dict)  # measured host seconds
    # (sim.metrics.host_timing.host_summary): not a simulated result, it differs run to run

    @property
    def records(self) -> pd.DataFrame:
        """One row per request (read back from its parquet file when streamed)."""
        return _table(self._records)

    @records.setter
    def records(self, frame: pd.DataFrame) -> None:
        self._records = frame

    @property
    def events(self) -> pd.DataFrame:
        """Scheduler events (read back from their parquet file when streamed)."""
        return _table(self._events)

    @events.setter
    def events(self, frame: pd.DataFrame) -> None:
        self._events = frame

    def record_frame(self, names: Sequence[str]) -> pd.DataFrame:
        """A frame with at least the record columns `names` (of those the records have): the
        records frame itself, or only those columns read from the records file."""
        return record_frame(self._records, names)

    def record_columns(self) -> RecordColumns:
        """The records by column, read one at a time from the records file when streamed."""
        return RecordColumns(self._records)

    def num_rows(self, name: str) -> int:
        """Rows of table `name` (records, steps, instances, events), a file left unread."""
        if name == "steps":
            return self.num_steps
        table = getattr(self, f"_{name}", None)
        return len(RecordColumns(table)) if table is not None else len(getattr(self, name))

    def table_path(self, name: str) -> Path | None:
        """The parquet file table `name` (records, steps, events) was streamed to, if it was."""
        table = getattr(self, f"_{name}", None)
        return None if table is None or isinstance(table, pd.DataFrame) else Path(table)

    def write_table(self, name: str, path: Path | str, lands_at: Path | str | None = None) -> None:
        """`<name>.to_parquet(path, index=False)` for records or events; a streamed file is
        moved there as it is, and read from `lands_at` after (default `path`: the caller
        renames it there)."""
        table = getattr(self, f"_{name}")
        if isinstance(table, pd.DataFrame):
            table.to_parquet(path, index=False)
        else:
            shutil.move(table, path)
            setattr(self, f"_{name}", Path(path if lands_at is None else lands_at))

    @property
    def steps(self) -> pd.DataFrame:
        """One row per executed Step (read back from its parquet file when streamed)."""
        if isinstance(self._steps, pd.DataFrame):
            return self._steps
        return pd.read_parquet(self._steps)

    @property
    def steps_path(self) -> Path | None:
        """The steps parquet file the run streamed its steps to, if it did."""
        return None if isinstance(self._steps, pd.DataFrame) else Path(self._steps)

    @property
    def num_steps(self) -> int:
        """Rows of `steps`."""
        if isinstance(self._steps, pd.DataFrame):
            return len(self._steps)
        import pyarrow.parquet as pq

        return pq.ParquetFile(self._steps).metadata.num_rows

    def write_steps(self, path: Path | str) -> None:
        """`steps.to_parquet(path, index=False)`; a streamed file is moved there as it is."""
        if isinstance(self._steps, pd.DataFrame):
            self._steps.to_parquet(path, index=False)
        else:
            shutil.move(self._steps, path)
            self._steps = Path(path)


def _table(table: pd.DataFrame | Path) -> pd.DataFrame:
    """A frame, or the parquet file's content."""
    return table if isinstance(table, pd.DataFrame) else pd.read_parquet(table)


def run_simulation(trace: pd.DataFrame, make_policy: PolicyFactory,
                   executors: Sequence[Executor], *,
                   on_done: Callable[[int], None] | None = None,
                   overhead: SchedulingOverhead | None = None,
                   max_model_len: int | None = None,
                   max_concurrency: int | None = None,
                   steps_path: Path | str | None = None,
                   records_path: Path | str | None = None,
                   events_path: Path | str | None = None,
                   admission: AdmissionConfig | None = None,
                   frontend_s: float = 0.0, watch: SloWatch | None = None) -> RunResult:
    """Replay `trace` through the policy `make_policy` builds, on one executor per instance,
    with the scheduler CPU time `overhead` models (sim.cost.overhead) before each iteration, if
    given. Prompts longer than `max_model_len` (default: the model's context) are rejected and
    outputs cut where prompt + output reach it (sim/engine/limits.py). With `max_concurrency` N at
    most N requests are in the system at once (closed loop, sim/engine/simulation.py). With `steps_path`
    the steps go to that parquet file as the run ends (written from the spilled step log one row
    group at a time, never as one frame) and the result reads them back only when asked;
    `records_path` and `events_path` likewise for records and events, kept in request-id order
    and spooled to disk as the run goes (sim/records/record_stream.py, event_log.py), and the
    summary reads the records file a few columns at a time (sim/records/record_file.py). With
    `admission` arrivals over its limits are rejected (sim/engine/admission.py); a trace with request
    classes adds their columns to the records and per-class keys to the summary
    (docs/classes.md). `frontend_s` seconds of a serving frontend's latency are added to each
    request's TTFT and latency (sim/cost/frontend.py). A `watch` (sim/engine/verdict.py) stops the
    run with `VerdictReached` once its SLO verdict is certain."""
    limit = resolve_max_model_len(executors, max_model_len)
    requests = TraceRequests(trace)  # built as they arrive, dropped when final
    extra = requests.columns["class_columns"]
    recorder = Recorder(records=RecordLog(extra) if records_path is None else RecordStream(extra),
                        event_spill=None if events_path is None else EVENT_SPILL)
    infos = [info_of(ex, i) for i, ex in enumerate(executors)]
    policy = make_policy(infos, recorder)
    t0 = time.perf_counter()  # measured phases (host_timing.json "phases_s"), never results
    stats: list[InstanceStats] = Simulation(requests, policy, executors, recorder,
                                            on_done=on_done, overhead=overhead,
                                            max_model_len=limit,
                                            max_concurrency=max_concurrency,
                                            admission=None if admission is None
                                            else AdmissionControl(admission),
                                            watch=watch).run()
    t1 = time.perf_counter()
    steps: pd.DataFrame | Path
    if steps_path is not None:  # written before the records frame exists: lower peak memory
        try:
            recorder.step_log.write_parquet(steps_path)
            steps = Path(steps_path)
        except OSError:  # a full disk: keep the frame; the caller's own write names the error
            Path(steps_path).unlink(missing_ok=True)
            steps_path = None
    records = _final_records(recorder, records_path, frontend_s)
    t2 = time.perf_counter()
    summary = summarize(records, recorder, stats)
    if has_classes(records):  # else no class keys: nothing read
        summary.update(class_summary(record_frame(records, CLASS_RECORD_COLUMNS),
                                     summary["duration_s"]))
    if steps_path is None:
        steps = recorder.steps_frame()
    recorder.step_log.close()  # its folded columns are in `steps` now: free them
    settings = [policy.instance_settings(s.instance_id) for s in stats]
    instances = instance_frame(stats, summary["duration_s"], settings)
    t3 = time.perf_counter()
    events = _final_events(recorder, events_path)
    phases = {"simulate": t1 - t0, "summarise": t3 - t2,
              "write": t2 - t1 + time.perf_counter() - t3}  # seconds
    return RunResult(records, steps, instances, events, summary,
                     {**host_summary(stats), "phases_s": phases})


def _final_records(recorder: Recorder, path: Path | str | None,
                   frontend_s: float) -> pd.DataFrame | Path:
    """The run's records frame, or `path` once they are written there (one row group at a
    time, the frame never built); the frame when that write failed (a full disk)."""
    if path is None:
        return add_frontend(records_frame(recorder.records.columns()), frontend_s)
    kept = recorder.records.write_parquet(
        path, lambda base: add_frontend(records_frame(base), frontend_s))
    return Path(path) if kept is None else kept


def _final_events(recorder: Recorder, path: Path | str | None) -> pd.DataFrame | Path:
    """The run's events frame, or `path` once they are written there; the frame when that
    write failed (a full disk)."""
    if path is None:
        return recorder.events_frame()
    kept = recorder.write_events(path)
    return Path(path) if kept is None else kept

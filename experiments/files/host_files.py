"""A run's host-timing files: what it measured on the wall clock, written apart from its results.

Two runs of one config write every result file byte for byte the same (tests/test_determinism.py)
and differ only in these two files of each run directory (HOST_FILES):

- `host_timing.json`: `wall_s` (seconds the run took, when the caller gives it), `written_utc`
  (when the file was written), `host` (the machine), and the policy's measured host time
  (sim/metrics/host_timing.py): `policy_host_s` (seconds, in all), `num_steps`,
  `policy_host_s_per_step` (seconds), `instances` (the same per instance);
- `host_timing.parquet`: one row per step, in steps.parquet's order (HOST_STEP_COLUMNS:
  `instance_id`, `start_s`, `num_iterations`, `num_seqs`, then `policy_host_s`, seconds):
  what `python -m real.calibrate --scheduling` fits the scheduling overhead to.

Neither is a simulated result: they are not in config.json's digests, a resumed sweep does not
check them, and summary.json / summary.csv / steps.parquet / instances.parquet hold no
measured time.
"""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from experiments.files.outdir import atomic_write
from sim.engine.simulate import RunResult
from sim.metrics.host_timing import HOST_STEP_COLUMNS, RESULT_STEP_COLUMNS
from sim.records.step_store import write_parquet

HOST_FILES = ("host_timing.json", "host_timing.parquet")  # in each run directory


def write_step_tables(run_dir: Path, result: RunResult) -> None:
    """steps.parquet (the simulated columns) and host_timing.parquet (HOST_STEP_COLUMNS), each
    atomically; a streamed steps file is read one row group at a time, then removed."""
    source = result.steps_path
    for name, columns in (("steps.parquet", RESULT_STEP_COLUMNS),
                          ("host_timing.parquet", HOST_STEP_COLUMNS)):
        with atomic_write(run_dir / name) as handle:
            if source is None:
                result.steps[list(columns)].to_parquet(handle, index=False)
            else:  # written by name (experiments.files.outdir.atomic_write allows it)
                copy_columns(source, handle.name, columns)
    if source is not None:
        source.unlink(missing_ok=True)  # every row is in the two files now


def copy_columns(source: Path, path: str | Path, columns: Sequence[str]) -> None:
    """Write `columns` of the parquet file `source` to `path`, the bytes
    `pd.read_parquet(source)[columns].to_parquet(path, index=False)` gives, holding one row
    group in memory at a time."""
    data = pq.ParquetFile(source)
    meta = data.metadata
    starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])

    def read(name: str, start: int, stop: int) -> np.ndarray:
        first = max(int(np.searchsorted(starts, start, side="right")) - 1, 0)
        last = int(np.searchsorted(starts, stop, side="left"))
        groups = list(range(first, min(last, meta.num_row_groups)))
        if not groups:
            return pd.read_parquet(source, columns=[name])[name].to_numpy()[:0]
        table = data.read_row_groups(groups, columns=[name])
        values = table.column(0).to_pandas().to_numpy()
        return values[start - int(starts[first]):stop - int(starts[first])]

    write_parquet(path, meta.num_rows, columns, read)


def host_timing_record(result: RunResult,
                       measured: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """host_timing.json's content: `measured` (e.g. wall_s, seconds), when and where it was
    written, and the run's measured policy host time (RunResult.host_timing)."""
    return {**dict(measured or {}),
            "written_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), **result.host_timing}


def add_phases(record: dict[str, Any], **seconds: float) -> None:
    """Add measured seconds to the phases of a host-timing record (`RunResult.host_timing`, or
    host_timing.json's content; key `phases_s`: workload, simulate, summarise, write, bench)."""
    phases = record.setdefault("phases_s", {})
    for name, value in seconds.items():
        phases[name] = phases.get(name, 0.0) + value


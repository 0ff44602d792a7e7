"""What is computed after a run from its records reads them a batch at a time
(sim/records/record_file.py `RecordColumns.batches` / `isin`, bench.json's peaks): the same
values from the records file as from the frame, whatever the batch size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim.records.record_file as record_file
from experiments.bench.peaks import peak_buckets, peaks_of
from experiments.bench.vllm_bench import BenchOptions, bench_result, finished_chunks
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.records.record_file import RecordColumns
from traces.synthetic import SyntheticConfig, synthetic_trace


@pytest.fixture(scope="module")
def run_records(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """A small run's records (some requests cut or rejected) as a frame and as its file."""
    trace = synthetic_trace(SyntheticConfig(rate_per_s=8.0, num_requests=400), 3)
    res = simulate(trace, "vllm", None, build_executors(ClusterSpec()), max_model_len=1024)
    path = tmp_path_factory.mktemp("records") / "records.parquet"
    res.records.to_parquet(path, index=False)
    return res.records, path


@pytest.mark.parametrize("rows", [1, 7, 128, 10_000])
def test_batches_and_isin_equal_the_frame(run_records, rows, monkeypatch):
    frame, path = run_records
    monkeypatch.setattr(record_file, "BATCH_ROWS", rows)
    names = ["request_id", "status", "arrival_s", "no_such_column"]
    for source in (frame, path):
        col = RecordColumns(source)
        got = pd.concat(list(col.batches(names, rows)))
        pd.testing.assert_frame_equal(got, frame[names[:3]], check_index_type=False)
        for values in (("finished",), ("rejected", "failed"), ()):
            want = frame["status"].isin(values).to_numpy()
            mask = col.isin("status", values)
            assert mask.dtype == bool and np.array_equal(mask, want)
        want_counts = frame["status"].value_counts()
        assert col.value_counts("status") == {str(k): int(n) for k, n in want_counts.items()}


def test_peaks_from_the_file_equal_the_frame(run_records):
    frame, path = run_records
    done = frame[frame["status"] == "finished"]
    want = peak_buckets(done)
    assert want[0] > 0 and want[1] > 1
    assert peaks_of(finished_chunks(RecordColumns(path))) == want
    assert peaks_of(finished_chunks(RecordColumns(frame))) == want
    run = {"label": "vllm", "rate": 8.0, "num_requests": len(frame)}
    summary = {"duration_s": float(frame["finish_s"].max() - frame["arrival_s"].min())}
    assert bench_result(path, summary, run, BenchOptions()) == \
        bench_result(frame, summary, run, BenchOptions())

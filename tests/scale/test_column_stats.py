"""Latency statistics streamed from the records give numpy's floats bit for bit: mean, std,
linear percentiles and the median, over any count, with duplicates, and with the pairwise sums'
leaves and the selection's chunks made tiny so every path runs on small arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.records import gap_stats
from sim.records.column_stats import array_stats, column_stats, streamed_stats
from sim.records.gap_store import GapFile
from sim.records.record_file import RecordColumns

PCTS = (0, 25, 50, 75, 90, 95, 99, 99.9, 100, 33.3, 12.5)


@pytest.fixture
def tiny(monkeypatch):
    """Pairwise-sum leaves of 256 values and selection chunks of 100."""
    monkeypatch.setattr(gap_stats, "LEAF", 256)
    monkeypatch.setattr(gap_stats, "CHUNK", 100)


def values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Latency-like values: exponential, some rounded (ties), some zeros."""
    x = rng.exponential(0.3, n)
    kind = rng.integers(0, 3)
    if kind == 1:
        x = np.round(x, 2)
    elif kind == 2:
        x[rng.random(n) < 0.2] = 0.0
    return x


def streamed(x: np.ndarray):
    spill = GapFile()
    try:
        spill.add_scalars(x)
        return streamed_stats(spill.read, spill.num_values, PCTS)
    finally:
        spill.close()


@pytest.mark.parametrize("seed", range(60))
def test_streamed_equals_numpy(seed: int, tiny) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 2, 3, 7, 100, 257, 1000, 3001]))
    x = values(rng, n)
    got = streamed(x)
    assert got == array_stats(x, PCTS)
    assert got.mean == float(x.mean()) and got.std == float(x.std())
    assert got.percentiles == tuple(float(np.percentile(x, p)) for p in PCTS)
    assert got.median == float(np.median(x))


def test_column_stats_from_records_both_paths(tmp_path, tiny, monkeypatch) -> None:
    rng = np.random.default_rng(7)
    n = 5000
    frame = pd.DataFrame({"ttft_s": values(rng, n),
                          "status": rng.choice(["finished", "rejected"], n, p=[0.8, 0.2])})
    frame.loc[rng.random(n) < 0.05, "ttft_s"] = np.nan
    path = tmp_path / "records.parquet"
    frame.to_parquet(path)
    col = RecordColumns(path)
    finished = col.isin("status", ("finished",))
    whole = column_stats(col, "ttft_s", finished, PCTS)
    assert whole.count == int((finished & frame["ttft_s"].notna().to_numpy()).sum())
    batches = RecordColumns.batches
    for rows in (7, 1000):  # records batches of any size
        monkeypatch.setattr(RecordColumns, "batches",
                            lambda self, names, rows=rows: batches(self, names, rows))
        assert column_stats(col, "ttft_s", finished, PCTS, stream_min=0) == whole
        assert column_stats(RecordColumns(frame), "ttft_s", finished, PCTS,
                            stream_min=0) == whole


def test_empty_column_is_nan_both_paths() -> None:
    empty = array_stats(np.empty(0), PCTS)
    assert empty.count == 0 and np.isnan(empty.mean) and np.isnan(empty.median)
    assert streamed(np.empty(0)).count == 0

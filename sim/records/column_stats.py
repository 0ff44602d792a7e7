"""The finished requests' latency statistics, exact and in bounded memory at any run size.

The summary (`sim.metrics.summary`) and bench.json (`experiments/bench/vllm_bench.py`) describe
each latency column over the finished requests (NaN dropped) with numpy on the whole array:
`x.mean()`, `x.std()` (population), `np.percentile(x, p)` (linear interpolation) and
`np.median(x)`. Ten million requests make that array 80 MB, and numpy's percentiles copy it
again. Above `STREAM_MIN` finished requests the values go, a records batch at a time, to a
temporary file (sim/records/gap_store.py) and the same numbers come from it one chunk at a time:

- mean and std by numpy's pairwise summation tree (sim/records/gap_stats.py, unit weights);
- each percentile from the two order statistics around its virtual index (n - 1) q, found by
  the radix selection of gap_stats, interpolated as numpy's `_lerp` does (a + (b - a) g, or
  b - (b - a) (1 - g) from g = 0.5 on); the median as numpy's mean of its middle one or two.

tests/scale/test_column_stats.py checks both paths give numpy's floats bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim.records import gap_stats
from sim.records.gap_store import GapFile
from sim.records.record_file import RecordColumns

STREAM_MIN = 1 << 22  # finished requests from which a column's statistics stream


@dataclass(frozen=True)
class ColumnStats:
    """One column's statistics over its finished, non-NaN values."""

    count: int  # values described (0: every statistic NaN)
    mean: float  # seconds (the column's unit), numpy's mean
    std: float  # population standard deviation (ddof 0)
    percentiles: tuple[float, ...]  # np.percentile at each asked percentile, in order
    median: float  # np.median (the mean of the middle two for an even count)


def column_stats(col: RecordColumns, name: str, finished: np.ndarray,
                 percentiles: Sequence[float], stream_min: int = STREAM_MIN) -> ColumnStats:
    """Statistics of column `name` over the rows `finished` marks (NaN dropped): numpy on the
    array below `stream_min` finished rows, else streamed (the same floats)."""
    if int(finished.sum()) < stream_min:
        x = col[name][finished].dropna().to_numpy(dtype=np.float64)
        return array_stats(x, percentiles)
    spill = GapFile()
    try:
        for part in col.batches([name]):
            start = part.index[0]
            values = part[name].to_numpy(dtype=np.float64)[finished[start:start + len(part)]]
            spill.add_scalars(values[~np.isnan(values)])
        return streamed_stats(spill.read, spill.num_values, percentiles)
    finally:
        spill.close()


def array_stats(x: np.ndarray, percentiles: Sequence[float]) -> ColumnStats:
    """numpy's statistics of the whole array `x` (NaN everywhere when it is empty)."""
    if not len(x):
        nan = float("nan")
        return ColumnStats(0, nan, nan, tuple(nan for _ in percentiles), nan)
    return ColumnStats(len(x), float(x.mean()), float(x.std()),
                       tuple(float(np.percentile(x, p)) for p in percentiles),
                       float(np.median(x)))


def streamed_stats(read: gap_stats.Reader, n: int,
                   percentiles: Sequence[float]) -> ColumnStats:
    """`array_stats` of the `n` values `read` gives (unit weights), a chunk at a time."""
    if not n:
        return array_stats(np.empty(0), percentiles)
    mean, std = gap_stats.weighted_mean_std(read, n, n)
    spans = [_span(n, p) for p in percentiles]
    middle = [(n - 1) // 2, n // 2]
    ranks = sorted({k for lo, hi, _ in spans for k in (lo, hi)} | set(middle))
    value = dict(zip(ranks, gap_stats.select(read, n, [k + 1.0 for k in ranks])))
    pcts = tuple(_lerp(value[lo], value[hi], g) for lo, hi, g in spans)
    median = float(np.mean(np.array([value[k] for k in dict.fromkeys(middle)])))
    return ColumnStats(n, mean, std, pcts, median)


def _span(n: int, p: float) -> tuple[int, int, float]:
    """(lower rank, upper rank, weight of the upper) of percentile `p` of `n` sorted values,
    as numpy's linear method takes them (`_get_indexes`, `_get_gamma`)."""
    index = (n - 1) * float(np.true_divide(p, 100))  # the virtual index
    if index >= n - 1:  # numpy takes the last value twice, its weight from index -1
        return n - 1, n - 1, index + 1
    lo = math.floor(index)
    return lo, lo + 1, index - lo


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's `_lerp`: a + (b - a) t, or b - (b - a)(1 - t) from t = 0.5 on."""
    diff = b - a
    if t >= 0.5:
        return b - diff * (1 - t)
    return a + diff * t

"""A benchmark's latency distributions against a simulation's: mean, p50 and p99 per metric.

The metrics are those `vllm bench serve` reports, over the requests that finished in both:
TTFT, TPOT ((latency - TTFT) / (outputs - 1), requests with more than one output), ITL (every
gap between streamed tokens; the simulation's from its run summary, sim/metrics/summary.py, exact over
its tokens) and E2E latency. Percentiles are numpy's linear ones, as vLLM computes them. An
error is simulated / measured - 1 (< 0: the simulation is faster).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

METRICS = ("ttft", "tpot", "itl", "e2e")  # vLLM's names, e2e for its e2el
STATS = ("mean", "p50", "p99")  # statistics compared
SUMMARY_ITL = {"mean": "mean_itl_s", "p50": "median_itl_s", "p99": "p99_itl_s"}  # run summary
Table = dict[str, dict[str, float]]  # metric -> statistic -> seconds (or fraction)


def stats_of(values: np.ndarray) -> dict[str, float]:
    """mean, p50 and p99 of the finite values (NaN when there are none)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {s: math.nan for s in STATS}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
            "p99": float(np.percentile(v, 99))}


def measured_table(trace: pd.DataFrame, itl_gaps: np.ndarray) -> Table:
    """The benchmark's own distributions (traces.bench_results: measured_* columns; every
    inter-token gap of its requests)."""
    out = trace["output_tokens"].to_numpy()
    return {"ttft": stats_of(trace["measured_ttft_s"].to_numpy(dtype=np.float64)),
            "tpot": stats_of(np.where(out > 1, trace["measured_tpot_s"], np.nan)),
            "itl": stats_of(np.asarray(itl_gaps, dtype=np.float64)),
            "e2e": stats_of(trace["measured_e2e_s"].to_numpy(dtype=np.float64))}


def simulated_table(records: pd.DataFrame, summary: Mapping[str, float]) -> Table:
    """A run's distributions from its finished records and its summary's ITL statistics."""
    done = records[records["finish_reason"].isin(("stop", "length"))]
    out = done["output_tokens"].to_numpy()
    return {"ttft": stats_of(done["ttft_s"].to_numpy(dtype=np.float64)),
            "tpot": stats_of(np.where(out > 1, done["tpot_s"], np.nan)),
            "itl": {s: float(summary.get(k, math.nan)) for s, k in SUMMARY_ITL.items()},
            "e2e": stats_of(done["e2e_s"].to_numpy(dtype=np.float64))}


def error_table(measured: Table, simulated: Table) -> Table:
    """simulated / measured - 1 per metric and statistic (NaN where either is missing)."""
    return {m: {s: (simulated[m][s] / measured[m][s] - 1.0
                    if measured[m][s] > 0 and math.isfinite(simulated[m][s]) else math.nan)
                for s in STATS} for m in METRICS}


def format_tables(measured: Table, columns: Sequence[tuple[str, Table]]) -> str:
    """One row per metric and statistic: the measured value (ms) and each named error column
    (percent), e.g. columns [("before", errors), ("after", errors)]."""
    head = f"{'metric':8}{'stat':6}{'measured':>12}" + "".join(f"{n:>11}" for n, _ in columns)
    rows = [head]
    for m in METRICS:
        for s in STATS:
            cells = "".join(f"{_pct(e[m][s]):>11}" for _, e in columns)
            rows.append(f"{m.upper() if s == 'mean' else '':8}{s:6}"
                        f"{measured[m][s] * 1e3:>9.1f} ms{cells}")
    return "\n".join(rows)


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:+.1%}"

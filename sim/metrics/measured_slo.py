"""SLO metrics over a run's measured requests (sim.metrics.steady: warm-up and drain excluded).

`measured_slo_summary` reads the SLO (sim.metrics.slo) on the requests arriving in the measured window
only: `measured_slo_attainment` (good / measured requests; rejected and failed ones count as
misses), `measured_goodput` (good measured requests per second of the window) and
`measured_meets_slo`. The percentile form's bounds are read on the measured requests'
percentiles (`measured_p90_ttft_s`, ...), but for the gaps between tokens (`tbt_p99_s`), which a
run keeps for all its tokens together: that bound reads the whole run's `p99_itl_s`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from sim.metrics.slo import SLO, good_requests, slo_violations
from sim.metrics.steady import SteadyRule, measured_window

# run summary key -> (record column, percentile or "mean") recomputed on the measured requests
MEASURED_KEYS: Mapping[str, tuple[str, float | str]] = {
    "p90_ttft_s": ("ttft_s", 90), "p99_tpot_s": ("tpot_s", 99), "p99_e2e_s": ("e2e_s", 99),
    "mean_normalized_latency_s": ("normalized_latency_s", "mean"),
}


def measured_records(records: pd.DataFrame, rule: SteadyRule) -> tuple[pd.DataFrame, float]:
    """The measured requests and the window's length in seconds (nan without a window)."""
    arrivals = records["arrival_s"].to_numpy(dtype=np.float64)
    start, end = measured_window(arrivals, rule)
    if math.isnan(start):
        return records.iloc[:0], math.nan
    return records[(arrivals >= start) & (arrivals < end)], end - start


def measured_latencies(rows: pd.DataFrame) -> dict[str, float]:
    """MEASURED_KEYS over the finished requests of `rows` (nan when none finished)."""
    done = rows[rows["status"] == "finished"]
    out = {}
    for key, (column, stat) in MEASURED_KEYS.items():
        x = done[column].dropna().to_numpy(dtype=np.float64)
        if not len(x):
            out[key] = math.nan
        else:
            out[key] = float(x.mean()) if stat == "mean" else float(np.percentile(x, stat))
    return out


def measured_run(records: pd.DataFrame, summary: Mapping[str, Any], slo: SLO,
                 rule: SteadyRule) -> dict[str, float]:
    """The measured requests read as a run: MEASURED_KEYS, the run's `p99_itl_s`, `failed`,
    `slo_attainment`, `num_good`, `num_measured` and `window_s` (seconds)."""
    rows, length = measured_records(records, rule)
    good = int(good_requests(rows, slo).sum()) if len(rows) else 0
    return {**measured_latencies(rows), "p99_itl_s": float(summary.get("p99_itl_s", math.nan)),
            "failed": int((rows["status"] == "failed").sum()),
            "slo_attainment": good / len(rows) if len(rows) else math.nan,
            "num_good": good, "num_measured": len(rows), "window_s": length}


def measured_violations(run: Mapping[str, float], slo: SLO) -> list[str]:
    """Why the measured requests (`measured_run`) miss `slo` ([] when they meet it)."""
    return slo_violations(run, slo) if run["num_measured"] else ["no measured requests"]


def measured_slo_summary(records: pd.DataFrame, summary: Mapping[str, Any], slo: SLO,
                         rule: SteadyRule) -> dict[str, float]:
    """`measured_goodput`, `measured_slo_attainment`, `measured_meets_slo` and the measured
    percentiles the percentile form reads (module docstring)."""
    run = measured_run(records, summary, slo, rule)
    length = run["window_s"]
    return {"measured_goodput": run["num_good"] / length if length > 0 else math.nan,
            "measured_slo_attainment": run["slo_attainment"],
            "measured_meets_slo": float(not measured_violations(run, slo)),
            **{f"measured_{key}": run[key] for key in MEASURED_KEYS}}

"""Fitting a serving frontend's latency (`frontend_s`, sim/cost/frontend.py) to benchmark TTFTs.

A fixed delay per request adds the same seconds to every simulated TTFT and changes nothing in
the engine, so for any engine parameters the delay that best fits the TTFT residuals of
sim/fit/bench_objective.py (per prompt-length bin: sqrt(n) * (sum simulated / sum measured - 1)) has a
closed form: the residuals are linear in it. The fit solves for it at every evaluation
(variable projection) instead of searching it, so it costs no simulation. The delay cannot be
negative: a simulation already slower than the measurements gets 0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from sim.cost.frontend import MAX_FRONTEND_S
from sim.fit.bench_replay import finished


def ttft_sums(trace: pd.DataFrame, records: pd.DataFrame, bins: np.ndarray, frontend_s: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin: requests, sum of simulated TTFT (+ frontend_s each), sum of measured TTFT
    (seconds), over the requests finished in both."""
    sim = np.where(finished(trace, records), records["ttft_s"].to_numpy(), np.nan) + frontend_s
    meas = trace["measured_ttft_s"].to_numpy()
    ok = np.isfinite(sim) & np.isfinite(meas)
    size = int(bins.max()) + 1 if bins.size else 0
    count = np.bincount(bins[ok], minlength=size).astype(np.float64)
    return (count, np.bincount(bins[ok], weights=sim[ok], minlength=size),
            np.bincount(bins[ok], weights=meas[ok], minlength=size))


def best_frontend(traces: Sequence[pd.DataFrame], records: Sequence[pd.DataFrame],
                  bins: Sequence[np.ndarray]) -> float:
    """The frontend latency (seconds, in [0, MAX_FRONTEND_S]) minimising the binned TTFT
    residuals of every trace together, given records simulated without one."""
    num = den = 0.0
    for trace, rec, b in zip(traces, records, bins):
        count, sim, meas = ttft_sums(trace, rec, b, 0.0)
        use = (count > 0) & (meas > 0)
        slope = np.sqrt(count[use]) * count[use] / meas[use]  # d residual / d frontend_s
        offset = np.sqrt(count[use]) * (sim[use] / meas[use] - 1.0)
        num -= float(np.sum(slope * offset))
        den += float(np.sum(slope * slope))
    return float(np.clip(num / den, 0.0, MAX_FRONTEND_S)) if den > 0 else 0.0

"""A serving frontend's fixed latency per request: `cluster.cost_model.frontend_s` (seconds).

A client's TTFT and latency include time outside the engine: the HTTP request, the API
server's validation and tokenization before the request reaches the scheduler, and the first
token's detokenization and streaming back. `frontend_s` models it as one fixed delay per
request. A constant delay moves the whole engine schedule by the same amount wherever it sits,
so the engine is simulated unchanged and the delay is added to what the client sees: each
record's `first_token_s` and `finish_s` (so `ttft_s`, `e2e_s`, `normalized_latency_s`), not its
inter-token gaps (TPOT, ITL), `scheduled_s` / `queueing_s` (the engine's queue) or the steps.
In a closed loop (`max_concurrency`) a client's slot is freed when the engine finishes, not
`frontend_s` later. `servesim calibrate` fits it to a benchmark's TTFTs (sim/fit/bench_fit.py);
sim/cluster/frontend_run.py finds a cluster's (its own key, or its calibration file's).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

from sim.util.errors import ConfigError

KEY = "frontend_s"  # the cluster.cost_model key
WHERE = f"cluster.cost_model.{KEY}"
MAX_FRONTEND_S = 3600.0  # seconds: a larger fixed delay is a unit mistake (ms given as s)


def check_frontend_s(value: object, where: str = WHERE) -> float:
    """`value` as seconds: a finite number in [0, MAX_FRONTEND_S], else ConfigError(where)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= MAX_FRONTEND_S:
        raise ConfigError(where, value, f"must be a number of seconds in [0, {MAX_FRONTEND_S:g}] "
                                        "(a serving frontend's fixed latency per request)")
    return float(value)


def frontend_of(options: Mapping[str, Any]) -> float:
    """The checked `frontend_s` of cost-model options (0 when absent)."""
    return check_frontend_s(options[KEY]) if KEY in options else 0.0


def add_frontend(records: pd.DataFrame, frontend_s: float) -> pd.DataFrame:
    """`records` (sim.metrics.summary.records_frame) as the client sees them: `frontend_s` later at the
    first token and at the finish, latencies recomputed; unchanged when 0."""
    if not frontend_s:
        return records
    check_frontend_s(frontend_s, "frontend_s")
    out = records.copy()
    for column in ("first_token_s", "finish_s"):
        out[column] = out[column] + frontend_s  # NaN (never reached) stays NaN
    out["e2e_s"] = out["finish_s"] - out["arrival_s"]
    out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
    outputs = out["output_tokens"].where(out["output_tokens"] > 0)
    out["normalized_latency_s"] = out["e2e_s"] / outputs
    return out

"""When each request of a serving benchmark reached the server (traces/bench_results.py).

In this order of preference: `measured` (`start_times` minus the earliest), `all_at_zero`
(request_rate inf), or `seeded`: the send schedule drawn as the benchmark tool draws it, with
`seed` (vLLM: Gamma(shape=burstiness, scale=1/(rate*burstiness)) gaps, cumulated and rescaled
so the last send is at n/rate, per-request rates for a ramp-up run, not rescaled; SGLang: the
first at 0, then Exponential(1/rate) gaps), then with `max_concurrency` a FIFO semaphore of
that many slots replayed with each request's measured latency. `vllm_retime` sends a trace's
requests on that schedule at another rate (`workload.trace.retime: vllm`).
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from sim.util.errors import TraceError
from traces.schema import validate_trace


def positive_number(value: Any, key: str, source: str) -> float:
    """`value` as a float > 0, else TraceError naming the file and the key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise TraceError(source, "must be a number > 0", field=key, value=value)
    return float(value)


def ramp_rates(data: Mapping[str, Any], n: int, source: str) -> np.ndarray | None:
    """Per-request rates (req/s) of a vLLM ramp-up run (linear or exponential from
    ramp_up_start_rps to ramp_up_end_rps over the requests), None without a ramp-up."""
    strategy = data.get("ramp_up_strategy")
    if strategy is None:
        return None
    if strategy not in ("linear", "exponential"):
        raise TraceError(source, "must be linear or exponential", field="ramp_up_strategy",
                         value=strategy)
    start = positive_number(data.get("ramp_up_start_rps"), "ramp_up_start_rps", source)
    end = positive_number(data.get("ramp_up_end_rps"), "ramp_up_end_rps", source)
    progress = np.arange(n) / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress



def rebuild_arrivals(lists: Mapping[str, np.ndarray], fmt: str, rate: float | np.ndarray,
              burstiness: float,
              max_concurrency: int | None, latency: np.ndarray,
              seed: int) -> tuple[np.ndarray, str]:
    """Seconds at which each request reached the server, and how they were rebuilt."""
    if "start_times" in lists:
        start = lists["start_times"]
        return start - start.min(), "measured"
    n = latency.size
    if np.ndim(rate) == 0 and math.isinf(rate):
        scheduled, how = np.zeros(n), "all_at_zero"
    else:
        scheduled, how = send_schedule(fmt, n, rate, burstiness, seed), "seeded"
    if max_concurrency is not None:
        scheduled = concurrency_replay(scheduled, latency, max_concurrency)
    return scheduled, how


def send_schedule(fmt: str, n: int, rate: float | np.ndarray, burstiness: float,
                  seed: int) -> np.ndarray:
    """Send times (seconds) the tool would draw for n requests at `rate` (req/s; per request
    for a vLLM ramp-up, which is not rescaled) (module docstring)."""
    rng = np.random.RandomState(seed)
    if fmt == "sglang":
        gaps = rng.exponential(1.0 / np.broadcast_to(rate, (n,))[1:], max(n - 1, 0))
        return np.concatenate(([0.0], np.cumsum(gaps)))[:n]
    rates = np.broadcast_to(np.asarray(rate, dtype=np.float64), (n,))
    if math.isinf(burstiness):
        delays = np.cumsum(1.0 / rates)
    else:
        delays = np.cumsum(rng.gamma(burstiness, 1.0 / (rates * burstiness), n))
    if np.ndim(rate) == 0 and n and delays[-1] > 0:
        delays *= (n / float(rate)) / delays[-1]  # vLLM rescales the last send to n / rate
    return delays


def concurrency_replay(scheduled: np.ndarray, latency: np.ndarray, slots: int) -> np.ndarray:
    """Send times under a FIFO semaphore of `slots`: request i waits for its schedule and for
    the earliest of the in-flight requests to finish (each holds its slot `latency` seconds)."""
    busy: list[float] = []  # finish times of the requests holding a slot
    sent = np.empty_like(scheduled, dtype=np.float64)
    for i, (t, lat) in enumerate(zip(scheduled, latency)):
        if len(busy) >= slots:
            t = max(t, heapq.heappop(busy))
        sent[i] = t
        heapq.heappush(busy, t + float(lat))
    return sent


def vllm_retime(lengths_df: pd.DataFrame, rate_per_s: float, seed: int,
                burstiness: float = 1.0) -> pd.DataFrame:
    """The requests of `lengths_df` in row order, sent as `vllm bench serve --request-rate R
    --burstiness B --seed S` sends them: `send_schedule("vllm", ...)`, whose last send is at
    n / rate exactly (a plain Gamma draw of n gaps misses the rate by about 1 / sqrt(n))."""
    if not 0 < rate_per_s < math.inf:
        raise TraceError("vllm_retime", "must be finite and > 0", field="rate_per_s",
                         value=rate_per_s)
    df = pd.DataFrame(lengths_df).reset_index(drop=True).drop(columns=["arrival_s"],
                                                              errors="ignore")
    df.insert(0, "arrival_s", send_schedule("vllm", len(df), rate_per_s, burstiness, seed))
    return validate_trace(df, "vllm_retime")

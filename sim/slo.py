"""Service-level objectives: run-level latency targets and goodput.

An `SLO` bounds latency percentiles of a run (what capacity searches test, as Vidur-Search and
Sarathi-Serve do: P90 TTFT, P99 TBT...) and, read per request, decides which requests were good:
goodput is the number of finished requests per second that met every per-request bound (vLLM's
benchmark definition: its own TTFT, TPOT and E2E; for TBT, its largest gap between two tokens).
Unset bounds are not checked. Latencies come from `sim.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Mapping

import numpy as np
import pandas as pd

from sim.errors import ConfigError

# SLO field -> (run summary key it bounds, per-request record column it bounds)
TARGETS: Mapping[str, tuple[str, str]] = {
    "ttft_p90_s": ("p90_ttft_s", "ttft_s"),
    "tbt_p99_s": ("p99_itl_s", "max_itl_s"),
    "tpot_p99_s": ("p99_tpot_s", "tpot_s"),
    "e2e_p99_s": ("p99_e2e_s", "e2e_s"),
    "normalized_latency_mean_s": ("mean_normalized_latency_s", "normalized_latency_s"),
}


@dataclass(frozen=True)
class SLO:
    """Latency targets; a run meets them when every set bound holds and no request failed."""

    ttft_p90_s: float | None = None  # seconds: bound on the 90th percentile of TTFT
    tbt_p99_s: float | None = None  # seconds: bound on the 99th percentile of gaps between tokens
    tpot_p99_s: float | None = None  # seconds per token: bound on the 99th percentile of TPOT
    e2e_p99_s: float | None = None  # seconds: bound on the 99th percentile of E2E latency
    normalized_latency_mean_s: float | None = None  # seconds per output token: mean E2E / outputs

    def __post_init__(self) -> None:
        for name in TARGETS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not (0 < value < math.inf):
                raise ConfigError(f"slo.{name}", value, "must be a number > 0 (seconds)")
        if not self.bounds():
            raise ConfigError("slo", {}, f"set at least one of {', '.join(TARGETS)}")

    def bounds(self) -> dict[str, float]:
        """The set targets: SLO field -> bound."""
        return {f.name: float(getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) is not None}


def slo_violations(summary: Mapping[str, float], slo: SLO) -> list[str]:
    """Why a run misses its SLO (empty when it meets it): 'p90_ttft_s=3.1 > 2'..."""
    out = []
    for name, bound in slo.bounds().items():
        key = TARGETS[name][0]
        value = float(summary.get(key, math.nan))
        if not value <= bound:  # NaN (no finished request) misses too
            out.append(f"{key}={value:.4g} > {bound:g}")
    if summary.get("failed", 0):
        out.append(f"failed={int(summary['failed'])}")
    return out


def meets_slo(summary: Mapping[str, float], slo: SLO) -> bool:
    """Whether a run's summary meets every bound of `slo` (and no request failed)."""
    return not slo_violations(summary, slo)


def good_requests(records: pd.DataFrame, slo: SLO) -> np.ndarray:
    """Per request: finished and within every per-request bound (an undefined TPOT, one
    output token, passes)."""
    good = (records["status"] == "finished").to_numpy().copy()
    for name, bound in slo.bounds().items():
        values = records[TARGETS[name][1]].to_numpy(dtype=np.float64)
        good &= np.isnan(values) | (values <= bound)
    return good


def slo_summary(records: pd.DataFrame, summary: Mapping[str, float],
                slo: SLO) -> dict[str, float]:
    """Goodput (good requests / s), the fraction of requests that were good, and whether the
    run met the SLO (1.0 or 0.0), for a run's summary."""
    num_good = int(good_requests(records, slo).sum())
    duration = float(summary.get("duration_s", math.nan))
    return {"goodput": num_good / duration if duration > 0 else math.nan,
            "slo_attainment": num_good / len(records) if len(records) else math.nan,
            "meets_slo": float(meets_slo(summary, slo))}

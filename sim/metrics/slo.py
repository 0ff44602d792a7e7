"""Service-level objectives: latency targets, SLO attainment and goodput.

An `SLO` takes one of two forms:

- **attainment** (DistServe's definition): per-request bounds (`ttft_s`, `tpot_s`, `tbt_s`,
  `e2e_s`, `normalized_latency_s`) and a fraction `attainment` (default 0.9). A request is good
  when it finished and met every bound on its own latencies (TBT: its largest gap between two
  tokens; an undefined TPOT, one output token, passes); a run meets the SLO when at least
  `attainment` of ALL its requests were good. Rejected and failed requests count as missing the
  SLO (they are in the denominator and never good).
- **percentile** (Vidur-Search, Sarathi-Serve): bounds on run-level percentiles (`ttft_p90_s`,
  `tbt_p99_s`, ...); a run meets the SLO when every bound holds and no request failed. Goodput
  then reads the same bounds per request (vLLM's benchmark definition).

Bounds are in seconds (`ttft_s`, `ttft_p90_s`): the canonical form, used by the docs and example
configs, and the unit of every summary and console table. Milliseconds (`ttft_ms`,
`ttft_p90_ms`; vLLM's `--goodput` unit) are accepted as an alias, one unit per target, and
converted to seconds when the SLO is built, so `SLO(ttft_ms=200) == SLO(ttft_s=0.2)`.
Goodput = good requests / s. Unset bounds are not checked. Latencies come from `sim.metrics.summary`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError

# percentile-form SLO field -> (run summary key it bounds, per-request record column it bounds)
TARGETS: Mapping[str, tuple[str, str]] = {
    "ttft_p90_s": ("p90_ttft_s", "ttft_s"),
    "tbt_p99_s": ("p99_itl_s", "max_itl_s"),
    "tpot_p99_s": ("p99_tpot_s", "tpot_s"),
    "e2e_p99_s": ("p99_e2e_s", "e2e_s"),
    "normalized_latency_mean_s": ("mean_normalized_latency_s", "normalized_latency_s"),
}
# attainment-form SLO field -> per-request record column it bounds
REQUEST_TARGETS: Mapping[str, str] = {
    "ttft_s": "ttft_s", "tpot_s": "tpot_s", "tbt_s": "max_itl_s", "e2e_s": "e2e_s",
    "normalized_latency_s": "normalized_latency_s",
}
SLO_COLUMNS = ("status", *dict.fromkeys(
    [*REQUEST_TARGETS.values(), *(column for _, column in TARGETS.values())]))  # records read
# millisecond field -> the seconds field it sets
MS_FIELDS: Mapping[str, str] = {name[:-2] + "_ms": name for name in (*TARGETS, *REQUEST_TARGETS)}
DEFAULT_ATTAINMENT = 0.9  # fraction of requests that must meet the per-request bounds (DistServe)


@dataclass(frozen=True)
class SLO:
    """Latency targets in one of two forms (module docstring); ms fields become seconds."""

    ttft_p90_s: float | None = None  # seconds: bound on the 90th percentile of TTFT
    tbt_p99_s: float | None = None  # seconds: bound on the 99th percentile of gaps between tokens
    tpot_p99_s: float | None = None  # seconds per token: bound on the 99th percentile of TPOT
    e2e_p99_s: float | None = None  # seconds: bound on the 99th percentile of E2E latency
    normalized_latency_mean_s: float | None = None  # seconds per output token: mean E2E / outputs
    ttft_s: float | None = None  # seconds: each request's TTFT (attainment form)
    tpot_s: float | None = None  # seconds per token: each request's TPOT (attainment form)
    tbt_s: float | None = None  # seconds: each request's largest inter-token gap (attainment form)
    e2e_s: float | None = None  # seconds: each request's E2E latency (attainment form)
    normalized_latency_s: float | None = None  # seconds per token: each request's E2E / outputs
    attainment: float | None = None  # fraction in (0, 1] of requests that must be good
    ttft_p90_ms: float | None = None  # milliseconds: ttft_p90_s in ms (converted on build)
    tbt_p99_ms: float | None = None  # milliseconds: tbt_p99_s in ms
    tpot_p99_ms: float | None = None  # milliseconds per token: tpot_p99_s in ms
    e2e_p99_ms: float | None = None  # milliseconds: e2e_p99_s in ms
    normalized_latency_mean_ms: float | None = None  # ms per token: normalized_latency_mean_s
    ttft_ms: float | None = None  # milliseconds: ttft_s in ms
    tpot_ms: float | None = None  # milliseconds per token: tpot_s in ms
    tbt_ms: float | None = None  # milliseconds: tbt_s in ms
    e2e_ms: float | None = None  # milliseconds: e2e_s in ms
    normalized_latency_ms: float | None = None  # milliseconds per token: normalized_latency_s

    def __post_init__(self) -> None:
        for name in (*TARGETS, *REQUEST_TARGETS):
            _check_bound(name, getattr(self, name), "seconds")
            if getattr(self, name) is not None:  # 30 and 30.0 (30000 ms): one SLO, one run
                object.__setattr__(self, name, float(getattr(self, name)))
        for ms_name, s_name in MS_FIELDS.items():
            value = getattr(self, ms_name)
            if value is None:
                continue
            _check_bound(ms_name, value, "milliseconds")
            if getattr(self, s_name) is not None:
                raise ConfigError(f"slo.{ms_name}", value, f"slo.{s_name} is set too: give "
                                  f"each target in one unit (_s or _ms)")
            object.__setattr__(self, s_name, value / 1000)  # normalized: seconds only
            object.__setattr__(self, ms_name, None)
        self._check_form()

    def _check_form(self) -> None:
        percentile, request = self.percentile_bounds(), self.request_bounds()
        if not percentile and not request:
            raise ConfigError("slo", {}, f"set at least one of {', '.join(TARGETS)} or of "
                                         f"{', '.join(REQUEST_TARGETS)} (or their _ms forms)")
        if percentile and request:
            raise ConfigError("slo", self.bounds(), "mixes percentile bounds (" +
                              ", ".join(percentile) + ") with per-request bounds (" +
                              ", ".join(request) + "): use one form")
        if self.attainment is None:
            if request:
                object.__setattr__(self, "attainment", DEFAULT_ATTAINMENT)
            return
        value = self.attainment
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value <= 1:
            raise ConfigError("slo.attainment", value, "must be a fraction in (0, 1]")
        if not request:
            raise ConfigError("slo.attainment", value, "needs per-request bounds (ttft_s, "
                              "tpot_s, tbt_s, e2e_s, normalized_latency_s or their _ms forms)")

    def percentile_bounds(self) -> dict[str, float]:
        """The set percentile-form targets: SLO field -> bound in seconds."""
        return {n: float(getattr(self, n)) for n in TARGETS if getattr(self, n) is not None}

    def request_bounds(self) -> dict[str, float]:
        """The set attainment-form targets: SLO field -> bound in seconds."""
        return {n: float(getattr(self, n)) for n in REQUEST_TARGETS
                if getattr(self, n) is not None}

    def bounds(self) -> dict[str, float]:
        """Every set latency target: SLO field -> bound in seconds."""
        return {**self.percentile_bounds(), **self.request_bounds()}

    def describe(self) -> dict[str, float]:
        """The bounds and, in the attainment form, the attainment target."""
        extra = {} if self.attainment is None else {"attainment": float(self.attainment)}
        return {**self.bounds(), **extra}


def _check_bound(name: str, value: Any, unit: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not (0 < value < math.inf):
        raise ConfigError(f"slo.{name}", value, f"must be a number > 0 ({unit})")


def slo_violations(summary: Mapping[str, float], slo: SLO) -> list[str]:
    """Why a run misses its SLO (empty when it meets it): 'p90_ttft_s=3.1 > 2', 'failed=2',
    or in the attainment form 'slo_attainment=0.85 < 0.9' (failed requests are misses in it)."""
    if slo.attainment is not None:
        value = float(summary.get("slo_attainment", math.nan))
        return [] if value >= slo.attainment else [
            f"slo_attainment={value:.4g} < {slo.attainment:g}"]
    out = []
    for name, bound in slo.percentile_bounds().items():
        key = TARGETS[name][0]
        value = float(summary.get(key, math.nan))
        if not value <= bound:  # NaN (no finished request) misses too
            out.append(f"{key}={value:.4g} > {bound:g}")
    if summary.get("failed", 0):
        out.append(f"failed={int(summary['failed'])}")
    return out


def meets_slo(summary: Mapping[str, float], slo: SLO) -> bool:
    """Whether a run's summary meets `slo` (the attainment form reads `slo_attainment`)."""
    return not slo_violations(summary, slo)


def good_requests(records: pd.DataFrame, slo: SLO) -> np.ndarray:
    """Per request: finished and within every per-request bound (the percentile form's bounds
    read per request; an undefined TPOT, one output token, passes)."""
    columns = {**{n: TARGETS[n][1] for n in slo.percentile_bounds()}, **REQUEST_TARGETS}
    good = (records["status"] == "finished").to_numpy().copy()
    for name, bound in slo.bounds().items():
        values = records[columns[name]].to_numpy(dtype=np.float64)
        good &= np.isnan(values) | (values <= bound)
    return good


def slo_summary(records: pd.DataFrame, summary: Mapping[str, float],
                slo: SLO) -> dict[str, float]:
    """Goodput (good requests / s), the fraction of all requests that were good (rejected and
    failed ones included, never good), and whether the run met the SLO (1.0 or 0.0)."""
    num_good = int(good_requests(records, slo).sum())
    duration = float(summary.get("duration_s", math.nan))
    attainment = num_good / len(records) if len(records) else math.nan
    return {"goodput": num_good / duration if duration > 0 else math.nan,
            "slo_attainment": attainment,
            "meets_slo": float(meets_slo({**summary, "slo_attainment": attainment}, slo))}

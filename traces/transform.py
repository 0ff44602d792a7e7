"""Re-timing real traces: rate scaling, fresh Poisson or Gamma (bursty) arrivals for a trace's
requests, and every request at once (rate inf)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.util.errors import ConfigError, TraceError
from traces.arrivals import arrivals, cv_from_burstiness
from traces.columns import MAX_ARRIVAL_S
from traces.schema import trace_stats, validate_trace


def scale_rate(trace_df: pd.DataFrame, factor: float | None = None, *,
               target_rate_per_s: float | None = None) -> pd.DataFrame:
    """A copy whose arrival gaps are divided by `factor` (> 1 = faster), or rescaled so the
    mean rate is `target_rate_per_s`. The first arrival keeps its time; burstiness is unchanged.
    """
    if (factor is None) == (target_rate_per_s is None):
        raise ConfigError("scale_rate.factor", factor, "give exactly one of factor / "
                                                       "target_rate_per_s")
    df = validate_trace(trace_df, "scale_rate")
    if target_rate_per_s is not None:
        if not (0 < target_rate_per_s < math.inf):
            raise ConfigError("scale_rate.target_rate_per_s", target_rate_per_s,
                              "must be finite and > 0")
        rate = trace_stats(df)["rate_per_s"]
        if not (0 < rate < math.inf):
            raise TraceError("scale_rate", "trace rate undefined (needs two distinct arrival "
                                           "times)", field="rate_per_s", value=rate)
        factor = target_rate_per_s / rate
    assert factor is not None
    if not (0 < factor < math.inf):
        raise ConfigError("scale_rate.factor", factor, "must be finite and > 0")
    first = float(df["arrival_s"].iloc[0]) if len(df) else 0.0
    df["arrival_s"] = first + (df["arrival_s"].to_numpy() - first) / factor
    if len(df) and float(df["arrival_s"].iloc[-1]) > MAX_ARRIVAL_S:
        raise ConfigError("scale_rate.factor", factor,
                          f"stretches the trace's last arrival to "
                          f"{float(df['arrival_s'].iloc[-1]):.6g} s, over {MAX_ARRIVAL_S:g} s "
                          f"where float64 cannot resolve microseconds")
    return df


def poisson_from_lengths(lengths_df: pd.DataFrame, rate_per_s: float,
                         seed: int) -> pd.DataFrame:
    """The requests of `lengths_df` in row order, re-timed with Poisson arrivals (first at 0).

    Any `arrival_s` column is replaced; other columns (lengths, text, block_ids...) are kept.
    """
    if not (0 < rate_per_s < math.inf):
        raise ConfigError("poisson_from_lengths.rate_per_s", rate_per_s,
                          "must be finite and > 0")
    df = lengths_df.reset_index(drop=True).drop(columns=["arrival_s"], errors="ignore")
    rng = np.random.default_rng(seed)
    df.insert(0, "arrival_s", arrivals(rate_per_s, len(df), rng=rng))
    return validate_trace(df, "poisson_from_lengths")


def gamma_from_lengths(lengths_df: pd.DataFrame, rate_per_s: float, seed: int, *,
                       burstiness: float) -> pd.DataFrame:
    """The requests of `lengths_df` in row order, re-timed with Gamma arrivals as vLLM's
    benchmark draws them: shape = `burstiness`, mean gap 1 / rate_per_s (gap CV 1 / sqrt(b));
    burstiness 1 draws the same times as `poisson_from_lengths` with the same seed."""
    if not (0 < rate_per_s < math.inf):
        raise ConfigError("gamma_from_lengths.rate_per_s", rate_per_s, "must be finite and > 0")
    cv = cv_from_burstiness(burstiness)
    df = lengths_df.reset_index(drop=True).drop(columns=["arrival_s"], errors="ignore")
    rng = np.random.default_rng(seed)
    df.insert(0, "arrival_s", arrivals(rate_per_s, len(df), cv=cv, rng=rng))
    return validate_trace(df, "gamma_from_lengths")


def all_at_once(lengths_df: pd.DataFrame) -> pd.DataFrame:
    """The requests of `lengths_df` in row order, all arriving at 0 (`--request-rate inf`)."""
    df = lengths_df.reset_index(drop=True).drop(columns=["arrival_s"], errors="ignore")
    df.insert(0, "arrival_s", np.zeros(len(df), dtype=np.float64))
    return validate_trace(df, "all_at_once")

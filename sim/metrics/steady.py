"""Steady state: which requests a run is judged on, and whether its queue had settled.

The rule (`SteadyRule`): of a run's arrival window (first to last arrival, T seconds long), the
requests arriving in its first `warmup_frac` (the warm-up: the queue and the batch are still
filling) and its last `drain_frac` (the drain: no one arrives after them, so they find the
system emptying) are excluded; the requests arriving in between are the **measured** ones.

Over the measured window [a, b) a run is steady when both hold, each within `tolerance`:

- **delivered ~ offered**: requests finished in [a, b) per second (delivered) are at least
  (1 - tolerance) x the requests arriving in it per second (offered), less those no load could
  serve (rejected at arrival for their shape: a prompt over max_model_len, more KV than an
  instance has, over the step or max_tokens budget). Requests turned away for load (admission
  control), failed or cancelled are never delivered and count against the run.
- **the queue has settled**: the time-averaged number of requests in the system (arrived, not
  yet finished or turned away) over the window's last third exceeds that over its middle third
  by at most tolerance x offered x (a third's length): in an overload it grows at
  offered - delivered requests per second.

Both compare counts of requests, and a steady system's count in the system fluctuates by about
the square root of its mean: a shortfall or growth within NOISE_SIGMAS x sqrt(2 x the mean
number in the system) requests is never flagged (it matters only in short windows).

A probe too short for its queue to build (a burst a large KV cache absorbs) fails the check:
its requests are still piling up when the arrivals stop. All-at-once arrivals have no window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sim.core.request import EXCEEDS_BATCH_TOKENS, EXCEEDS_KV, EXCEEDS_MAX_TOKENS, PROMPT_TOO_LONG
from sim.records.record_file import RecordColumns
from sim.util.errors import ConfigError

UNSERVABLE = (PROMPT_TOO_LONG, EXCEEDS_KV, EXCEEDS_BATCH_TOKENS, EXCEEDS_MAX_TOKENS)  # reasons
# a request is rejected for whatever the load: it never queues, so it is no shortfall
NOISE_SIGMAS = 3.0  # standard deviations of a steady count's noise never flagged

@dataclass(frozen=True)
class SteadyRule:
    """Which requests are measured and how far from steady a run may be."""

    warmup_frac: float = 0.1  # fraction of the arrival window excluded at its start
    drain_frac: float = 0.1  # fraction of the arrival window excluded at its end
    tolerance: float = 0.05  # fraction of the offered rate: largest shortfall / queue growth;
    # 1 turns the check off

    def __post_init__(self) -> None:
        for name in ("warmup_frac", "drain_frac"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not 0 <= value < 1:
                raise ConfigError(name, value, "must be a fraction in [0, 1) of the arrival "
                                               "window")
        if self.warmup_frac + self.drain_frac >= 0.9:
            raise ConfigError("drain_frac", self.drain_frac,
                              f"warmup_frac + drain_frac must be < 0.9 (warmup_frac is "
                              f"{self.warmup_frac:g}): at least a tenth of the window is measured")
        t = self.tolerance
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 1:
            raise ConfigError("tolerance", t, "must be a fraction in (0, 1] of the offered rate "
                                              "(1: never flag)")

    def describe(self) -> str:
        """The rule in one line, as printed and written beside the results."""
        return (f"steady-state rule: requests arriving in the first {self.warmup_frac:.0%} "
                f"(warm-up) and the last {self.drain_frac:.0%} (drain) of the arrival window "
                f"are excluded; a run is steady when, over the rest, delivered >= "
                f"{1 - self.tolerance:.0%} of offered and the requests in the system grow by "
                f"<= {self.tolerance:.0%} of offered over its last third (or within "
                f"{NOISE_SIGMAS:g} sigma of a steady count's noise)")


def measured_window(arrivals: np.ndarray, rule: SteadyRule) -> tuple[float, float]:
    """[start, end) in seconds of the measured arrivals; (nan, nan) without a window."""
    if not len(arrivals):
        return math.nan, math.nan
    first, last = float(np.min(arrivals)), float(np.max(arrivals))
    span = last - first
    if not span > 0:
        return math.nan, math.nan
    end = last - rule.drain_frac * span if rule.drain_frac > 0 else math.nextafter(last, math.inf)
    return first + rule.warmup_frac * span, end


def measured_mask(arrivals: np.ndarray, rule: SteadyRule) -> np.ndarray:
    """Which requests are measured (arrive in the measured window)."""
    start, end = measured_window(arrivals, rule)
    return (arrivals >= start) & (arrivals < end)


STEADY_COLUMNS = ("arrival_s", "finish_s", "status", "reason")  # the record columns read


def departures(records: pd.DataFrame | RecordColumns) -> np.ndarray:
    """When each request left the system: its finish (rejected ones at arrival); inf if never."""
    left = RecordColumns(records)["finish_s"].to_numpy(dtype=np.float64).copy()
    left[np.isnan(left)] = math.inf
    return left


def mean_in_system(arrivals: np.ndarray, left: np.ndarray, start: float, end: float) -> float:
    """Time-averaged number of requests in the system over [start, end)."""
    overlap = np.minimum(left, end)
    overlap -= np.maximum(arrivals, start)  # in place: two temporaries a request, not four
    np.clip(overlap, 0.0, None, out=overlap)
    return float(overlap.sum() / (end - start))


def steady_summary(records: pd.DataFrame | RecordColumns, rule: SteadyRule) -> dict[str, Any]:
    """`steady` (1.0 or 0.0; NaN when too few requests are measured for a shortfall to show
    above a steady count's noise), `steady_reason` ("" when steady), the measured window, the
    offered and delivered rates over it, the queue's growth and the rule (module docstring).
    `records`: the frame, or its columns read one at a time (statuses compared in arrow)."""
    records = RecordColumns(records)
    arrivals = records["arrival_s"].to_numpy(dtype=np.float64)
    start, end = measured_window(arrivals, rule)
    out: dict[str, Any] = {"steady": 0.0, "steady_reason": "", "measured_start_s": start,
                           "measured_end_s": end, "measured_requests": 0,
                           "offered_rps": math.nan, "delivered_rps": math.nan,
                           "queue_growth_rps": math.nan, "steady_rule": rule.describe()}
    if math.isnan(start):
        out["steady_reason"] = "no arrival window (every request arrives at one instant)"
        return out
    length = end - start
    measured = (arrivals >= start) & (arrivals < end)
    left = departures(records)
    finished = records.isin("status", ("finished",))
    delivered = int((finished & (left >= start) & (left < end)).sum())
    third = length / 3
    growth = (mean_in_system(arrivals, left, start + 2 * third, end)
              - mean_in_system(arrivals, left, start + third, start + 2 * third)) / third
    offered = int(measured.sum()) / length
    out.update(measured_requests=int(measured.sum()), offered_rps=offered,
               delivered_rps=delivered / length, queue_growth_rps=growth)
    noise = NOISE_SIGMAS * math.sqrt(2 * max(mean_in_system(arrivals, left, start, end), 1.0))
    if rule.tolerance < 1 and offered > 0 and noise >= measured.sum():
        out["steady"] = math.nan  # undetermined: losing every request would hide in the noise
        out["steady_reason"] = (f"too few requests to judge: {int(measured.sum())} measured, "
                                f"within a steady count's noise of {noise:.3g}")
        return out
    shaped = unservable(records, measured)
    if shaped and shaped == measured.sum():
        out["steady_reason"] = "every measured request was rejected for its shape"
        return out
    out["steady_reason"] = unsteady_reason(offered - shaped / length, delivered / length, growth,
                                           rule, turned_away(records, measured) - shaped,
                                           (noise / length, noise / third))
    out["steady"] = 0.0 if out["steady_reason"] else 1.0
    return out


def unservable(records: RecordColumns, measured: np.ndarray) -> int:
    """Measured requests rejected for their shape (UNSERVABLE), which no load could serve."""
    if "reason" not in records:
        return 0
    rejected = records.isin("status", ("rejected",))[measured]
    return int((rejected & records.isin("reason", UNSERVABLE)[measured]).sum())


def turned_away(records: RecordColumns, measured: np.ndarray) -> int:
    """Measured requests rejected, failed or cancelled (never delivered)."""
    away = records.isin("status", ("rejected", "failed", "cancelled"))
    return int(away[measured].sum())


def unsteady_reason(offered: float, delivered: float, growth: float, rule: SteadyRule,
                    away: int = 0, noise: tuple[float, float] = (0.0, 0.0)) -> str:
    """Why a run is not steady ('' when it is); `noise`: the shortfall and the growth (req/s)
    within a steady count's noise."""
    if not offered > 0:
        return "no requests in the measured window"
    if rule.tolerance >= 1:
        return ""  # the check is off
    reasons = []
    if offered - delivered > max(rule.tolerance * offered, noise[0]):
        lost = f"; {away} measured requests rejected, failed or cancelled" if away else ""
        reasons.append(f"delivered {delivered:.4g} of {offered:.4g} req/s offered (servable) "
                       f"({delivered / offered:.0%}{lost})")
    if growth > max(rule.tolerance * offered, noise[1]):
        reasons.append(f"requests in the system grew {growth:.4g} req/s over the last third "
                       f"({growth / offered:.0%} of offered)")
    return "; ".join(reasons)

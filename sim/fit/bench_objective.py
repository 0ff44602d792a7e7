"""What a serving-benchmark fit (sim/fit/bench_fit.py) minimizes: the residuals of a vector of
cost-model variables over every benchmark run, each evaluation a replay of every run.

Residuals are sums, not single requests (a request's own TTFT jumps by up to an iteration when a
parameter moves its arrival across an iteration boundary): per bin, sqrt(requests in the bin) *
(sum simulated / sum measured - 1) of TTFT (plus a `frontend_s` solved in closed form,
sim/fit/bench_frontend.py; weighted by `ttft_weight`) over prompt-length quantile bins and of
decode time (TPOT * (outputs - 1)) over arrival-time quantile bins, then a penalty per request
the simulation did not finish. `BenchObjective` counts the evaluations against a budget
(`BudgetSpent` when it is spent), reuses the last one, and keeps the best point seen.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from sim.cluster.spec import ClusterSpec
from sim.engine.policy import PolicyFactory
from sim.fit.bench_frontend import best_frontend
from sim.fit.bench_params import FitParam
from sim.fit.bench_replay import finished, replay

MISSING_PENALTY = 1.0  # residual of a request the simulation did not finish
TTFT_BINS = 8  # prompt-length bins whose summed TTFT is fitted
TPOT_BINS = 12  # arrival-time bins whose summed decode time is fitted


class BudgetSpent(Exception):
    """Raised inside the optimizer when the simulation budget is spent."""


class BenchObjective:
    """Residuals of a parameter vector over every trace, counting and caching simulations."""

    def __init__(self, traces: Sequence[pd.DataFrame], cluster: ClusterSpec,
                 make_policy: PolicyFactory, names: Sequence[str],
                 table: Mapping[str, FitParam], max_evaluations: int,
                 ttft_weight: float, frontend: bool = False) -> None:
        self.traces = traces  # the benchmark runs fitted together
        self.run = (cluster, make_policy)  # what replay() needs besides a trace
        self.names = tuple(names)  # fitted cost-model fields
        self.params = [table[k] for k in names]  # their variable mappings
        self.bins = [(quantile_bins(t["prompt_tokens"].to_numpy(), TTFT_BINS),
                      quantile_bins(t["arrival_s"].to_numpy(), TPOT_BINS)) for t in traces]
        self.max_evaluations = max_evaluations  # simulations of all traces allowed
        self.ttft_weight = ttft_weight  # weight of the TTFT residuals (dimensionless)
        self.frontend = frontend  # solve frontend_s (seconds) at each evaluation
        self.num_evaluations = 0  # simulations of all traces run so far
        self.best: tuple[float, np.ndarray | None, float] = (math.inf, None, 0.0)  # lowest
        # (cost, x, frontend_s) seen
        self._last: tuple[bytes, np.ndarray] | None = None  # the last x and its residuals

    def overrides(self, x: np.ndarray) -> dict[str, float]:
        """Cost-model overrides for a variable vector."""
        return {k: float(p.value(v)) for k, p, v in zip(self.names, self.params, x)}

    def records(self, overrides: Mapping[str, float] | None) -> list[pd.DataFrame]:
        """Simulated records of every trace under `overrides`."""
        cluster, make_policy = self.run
        return [replay(t, cluster, make_policy, overrides) for t in self.traces]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        key = np.asarray(x, dtype=np.float64).tobytes()
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        if self.num_evaluations >= self.max_evaluations:
            raise BudgetSpent
        self.num_evaluations += 1
        records = self.records(self.overrides(x))
        front = best_frontend(self.traces, records, [b[0] for b in self.bins]) \
            if self.frontend else 0.0
        res = np.concatenate([_residuals(t, r, b, self.ttft_weight, front) for t, r, b in
                              zip(self.traces, records, self.bins)])
        cost = float(np.sum(res * res))
        if cost < self.best[0]:
            self.best = (cost, np.array(x, dtype=np.float64), front)
        self._last = (key, res)
        return res


def quantile_bins(values: np.ndarray, num_bins: int) -> np.ndarray:
    """Bin label (0..num_bins-1) of each value by its quantile among `values`."""
    edges = np.unique(np.quantile(values, np.linspace(0, 1, num_bins + 1)[1:-1]))
    return np.searchsorted(edges, values, side="right")


def _binned_error(sim: np.ndarray, meas: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Per bin: sqrt(count) * (sum sim / sum meas - 1) over the finite pairs (NaN: empty bin)."""
    ok = np.isfinite(sim) & np.isfinite(meas)
    count = np.bincount(bins[ok], minlength=bins.max() + 1).astype(np.float64)
    s = np.bincount(bins[ok], weights=sim[ok], minlength=count.size)
    m = np.bincount(bins[ok], weights=meas[ok], minlength=count.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(count) * (s / m - 1.0)


def _residuals(trace: pd.DataFrame, records: pd.DataFrame,
               bins: tuple[np.ndarray, np.ndarray], ttft_weight: float,
               frontend_s: float = 0.0) -> np.ndarray:
    """Weighted TTFT (plus `frontend_s` seconds) per prompt-length bin and decode time per
    arrival-time bin (module docstring), then a penalty per request the simulation did not
    finish."""
    done = finished(trace, records)
    decodes = trace["output_tokens"].to_numpy() - 1
    sim_ttft = np.where(done, records["ttft_s"].to_numpy(), np.nan) + frontend_s
    sim_dec = np.where(done, (records["finish_s"] - records["first_token_s"]).to_numpy(), np.nan)
    meas_dec = np.where(decodes > 0, trace["measured_tpot_s"].to_numpy() * decodes, np.nan)
    res = np.concatenate((
        ttft_weight * _binned_error(sim_ttft, trace["measured_ttft_s"].to_numpy(), bins[0]),
        _binned_error(sim_dec, meas_dec, bins[1]),
        np.where(done, 0.0, MISSING_PENALTY)))
    return np.where(np.isfinite(res), res, 0.0)

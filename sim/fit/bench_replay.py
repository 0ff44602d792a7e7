"""Replaying a serving benchmark's requests in the simulator and scoring the result.

`replay` runs a benchmark trace (`traces.bench_results`: schema columns plus `measured_ttft_s`,
`measured_tpot_s`) through `sim.engine.simulate.run_simulation` on a cluster's cost-model executors
under a policy factory (`policies.registry.policy_factory(name, params, seed)`), with
cost-model overrides (roofline `CostModelConfig` fields, or StageParams fields with
`kind: stage` / `profile`, merged into `cluster.cost_model`); `error_stats` compares the
simulated per-request TTFT and TPOT with the measured ones (errors are simulated / measured - 1).
`sim.fit.bench_fit` fits the overrides.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.frontend import frontend_of
from sim.cost.overhead import build_overhead
from sim.engine.policy import PolicyFactory
from sim.engine.simulate import RunResult, run_simulation
from sim.util.errors import ConfigError

MEASURED = ("measured_ttft_s", "measured_tpot_s")  # trace columns compared against (seconds)
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")  # what the replay simulates
MAX_LATENCY_S = 86400.0  # seconds: the longest TTFT or latency a benchmarked request may have
# (a day; HTTP clients and serving benchmarks give up within hours)
DURATION_SLACK_S = 1e-3  # seconds a request may end past its run's stated duration (rounding)


@dataclass(frozen=True)
class ErrorStats:
    """Simulated vs measured per-request latencies; errors are sim / measured - 1."""

    num_requests: int  # requests finished in the benchmark and in the simulation
    ttft_median_abs: float  # median |error| of TTFT (fraction)
    ttft_p90_abs: float  # 90th percentile |error| of TTFT (fraction)
    ttft_bias: float  # median signed error of TTFT (fraction; < 0: simulation too fast)
    tpot_median_abs: float  # median |error| of TPOT (fraction)
    tpot_p90_abs: float  # 90th percentile |error| of TPOT (fraction)
    tpot_bias: float  # median signed error of TPOT (fraction)
    ttft_mean_bias: float  # mean simulated / mean measured TTFT - 1 (fraction)
    tpot_mean_bias: float  # mean simulated / mean measured TPOT - 1 (fraction)
    num_unfinished: int  # benchmark requests the simulation rejected, failed or cut

    def __post_init__(self) -> None:
        if self.num_requests < 0 or self.num_unfinished < 0:
            raise ConfigError("num_requests", (self.num_requests, self.num_unfinished),
                              "counts must be >= 0")

    def as_dict(self) -> dict[str, float]:
        """Plain dict for JSON."""
        return dataclasses.asdict(self)


def check_trace(trace: pd.DataFrame) -> None:
    """ConfigError unless `trace` has the replay and measured columns."""
    missing = [c for c in TRACE_COLUMNS + MEASURED if c not in trace.columns]
    if missing:
        raise ConfigError("trace", list(map(str, trace.columns)),
                          f"missing column(s) {missing} (read it with traces.bench_results)")
    if len(trace) == 0:
        raise ConfigError("trace", 0, "has no requests")
    check_measured(trace)


def check_measured(trace: pd.DataFrame) -> None:
    """ConfigError naming the column and first bad row unless every measured TTFT is a finite
    number of seconds > 0 and every measured TPOT finite and >= 0 (NaN for one output)."""
    ttft = trace["measured_ttft_s"].to_numpy(dtype=np.float64)
    tpot = trace["measured_tpot_s"].to_numpy(dtype=np.float64)
    one = trace["output_tokens"].to_numpy() <= 1
    for column, bad in (("measured_ttft_s", ~(np.isfinite(ttft) & (ttft > 0))),
                        ("measured_tpot_s", ~((np.isfinite(tpot) & (tpot >= 0))
                                              | (np.isnan(tpot) & one)))):
        if bad.any():
            row = int(np.argmax(bad))
            raise ConfigError(f"trace.{column}", trace[column].iloc[row], (
                f"row {row}: a measured time must be a finite number of seconds (TTFT > 0, "
                f"TPOT >= 0); sim.fit.bench_replay.usable_rows drops such rows with a reason"))


def usable_rows(trace: pd.DataFrame, duration_s: float | None = None,
                measured_arrivals: bool = False) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows of a benchmark trace (traces.bench_results) whose measurements are physically
    consistent, and how many of the others each reason dropped (first reason that applies):
    TTFT finite and > 0, latency (measured_e2e_s) finite, >= TTFT, > TTFT with more than one
    output, within MAX_LATENCY_S and the run's `duration_s`; with `measured_arrivals`, each
    request also ends within the duration after the first was sent."""
    ttft = trace["measured_ttft_s"].to_numpy(dtype=np.float64)
    outs = trace["output_tokens"].to_numpy()
    e2e = (trace["measured_e2e_s"].to_numpy(dtype=np.float64) if "measured_e2e_s" in trace
           else ttft + np.nan_to_num(trace["measured_tpot_s"].to_numpy(dtype=np.float64))
           * np.maximum(outs - 1, 0))
    limit = MAX_LATENCY_S if duration_s is None else min(MAX_LATENCY_S,
                                                        duration_s + DURATION_SLACK_S)
    ends = trace["arrival_s"].to_numpy(dtype=np.float64) + e2e
    checks = (
        ("TTFT not a finite number of seconds > 0", ~(np.isfinite(ttft) & (ttft > 0))),
        (f"TTFT above {limit:g} s (the run's duration, at most a day)", ttft > limit),
        ("latency not a finite number of seconds", ~np.isfinite(e2e)),
        ("latency below TTFT", e2e < ttft),
        (f"latency above {limit:g} s (the run's duration, at most a day)", e2e > limit),
        ("no decode time: several output tokens, latency == TTFT (empty inter-token gaps)",
         (outs > 1) & (e2e <= ttft)),
        (f"ends past the run's duration of {duration_s!r} s after the first send",
         np.full(len(trace), measured_arrivals and duration_s is not None)
         & ~(ends <= (duration_s or 0.0) + DURATION_SLACK_S)))
    dropped, keep = {}, np.ones(len(trace), dtype=bool)
    for reason, bad in checks:
        hit = keep & bad
        if hit.any():
            dropped[reason] = int(hit.sum())
            keep &= ~hit
    return trace[keep], dropped


def check_factory(make_policy: object) -> None:
    """ConfigError unless `make_policy` is a PolicyFactory (sim/ does not resolve names)."""
    if not callable(make_policy):
        raise ConfigError("make_policy", make_policy, "must be a PolicyFactory, e.g. "
                          "policies.registry.policy_factory('vllm', params, seed)")


def replay(trace: pd.DataFrame, cluster: ClusterSpec, make_policy: PolicyFactory,
           overrides: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Simulated records of the trace's requests (row order) on `cluster` under the policy
    `make_policy` builds, with the cost-model `overrides` applied (`frontend_s` among them:
    sim/cost/frontend.py)."""
    return replay_run(trace, cluster, make_policy, overrides).records


def replay_run(trace: pd.DataFrame, cluster: ClusterSpec, make_policy: PolicyFactory,
               overrides: Mapping[str, float] | None = None) -> RunResult:
    """`replay`'s whole run: its records in the trace's row order, and its summary."""
    check_factory(make_policy)
    if cluster.backend != "sim" or "calibration" in cluster.cost_model:
        raise ConfigError("cluster.cost_model", dict(cluster.cost_model),
                          "bench fitting adjusts the roofline: use backend sim, no calibration")
    spec = dataclasses.replace(cluster, cost_model={**cluster.cost_model, **(overrides or {})})
    result = run_simulation(trace.loc[:, list(TRACE_COLUMNS)].reset_index(drop=True),
                            make_policy, build_executors(spec),
                            overhead=build_overhead(spec.scheduling_overhead, spec.backend),
                            max_model_len=spec.max_model_len,
                            frontend_s=frontend_of(spec.cost_model))
    result.records = result.records.sort_values("request_id").reset_index(drop=True)
    return result


def finished(trace: pd.DataFrame, records: pd.DataFrame) -> np.ndarray:
    """Rows the simulation finished with the benchmark's output length."""
    return (records["finish_reason"].isin(("stop", "length")).to_numpy() &
            (records["output_tokens"].to_numpy() == trace["output_tokens"].to_numpy()))


def _log_errors(trace: pd.DataFrame, records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """log(sim / measured) of TTFT (every row) and TPOT (rows with a measured TPOT); NaN where
    the simulation has no value."""
    done = finished(trace, records)
    ttft = np.where(done, records["ttft_s"], np.nan) / trace["measured_ttft_s"].to_numpy()
    tpot_rows = np.isfinite(trace["measured_tpot_s"].to_numpy())
    tpot = (np.where(done, records["tpot_s"], np.nan) / trace["measured_tpot_s"].to_numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(ttft), np.log(tpot[tpot_rows])


def error_stats(trace: pd.DataFrame, records: pd.DataFrame) -> ErrorStats:
    """Per-request TTFT and TPOT errors of simulated `records` against the trace's measurements."""
    log_ttft, log_tpot = _log_errors(trace, records)
    ttft = np.expm1(log_ttft[np.isfinite(log_ttft)])
    tpot = np.expm1(log_tpot[np.isfinite(log_tpot)])
    meas_tpot = trace["measured_tpot_s"].to_numpy()
    meas_tpot = meas_tpot[np.isfinite(meas_tpot)][np.isfinite(log_tpot)]
    meas_ttft = trace["measured_ttft_s"].to_numpy()[np.isfinite(log_ttft)]

    def q(x: np.ndarray, p: float) -> float:
        return float(np.percentile(x, p)) if x.size else math.nan

    def mean_bias(err: np.ndarray, measured: np.ndarray) -> float:
        return float(np.sum((1 + err) * measured) / np.sum(measured) - 1) if err.size else math.nan

    return ErrorStats(int(ttft.size), q(np.abs(ttft), 50), q(np.abs(ttft), 90), q(ttft, 50),
                      q(np.abs(tpot), 50), q(np.abs(tpot), 90), q(tpot, 50),
                      mean_bias(ttft, meas_ttft), mean_bias(tpot, meas_tpot),
                      int(np.count_nonzero(~np.isfinite(log_ttft))))

"""Fitting a cost model's engine terms to a real serving benchmark (vllm bench serve, SGLang).

The benchmark's requests (a trace with `measured_ttft_s` and `measured_tpot_s` columns, as
`traces.bench_results` reads them) are replayed through `sim.engine.simulate.run_simulation` on a
cluster's cost-model executors under a policy factory (`policies.registry.policy_factory`),
and the chosen fields (`sim.fit.bench_params`: the roofline's `CostModelConfig` overheads, or with
`cost_model: {kind: stage}` the stage model's host terms cpu_step_s / cpu_per_seq_s /
sampler_*, passed as `cluster.cost_model` overrides) are fitted by
`scipy.optimize.least_squares` (trust region with bounds). Residuals are sums, not single
requests: a request's own TTFT jumps by up to an iteration when a parameter moves its arrival
across an iteration boundary, and a short request's TPOT jumps when another prefill lands in
it, so the fit compares, per bin, sum simulated / sum measured - 1 of decode time (TPOT *
(outputs - 1)) over arrival-time bins (load varies with time) and, weighted by `ttft_weight`
(default 0.1: TTFT sums still jump by a whole prefill when an arrival crosses a step boundary),
of TTFT over prompt-length bins; each times sqrt(requests in the bin); `frontend_s` (by default)
is solved in closed form at each evaluation (sim/fit/bench_frontend.py; the residuals:
sim/fit/bench_objective.py). Sums of step times are linear in the overheads for a fixed
schedule, so Gauss-Newton steps land close. Jacobians are
forward differences of 10% (at least a fixed step per field), large enough to step over the
jumps. Each evaluation simulates every run, so the search is capped at `max_evaluations` and
the best point seen is kept.

What the data can pin down (roofline names; the stage model's cpu_step_s and cpu_per_seq_s
behave as the two overheads, sampler_per_seq_s is nearly collinear with cpu_per_seq_s):
`step_overhead_s` (every step), `per_seq_overhead_s` (needs batch
sizes that vary: fit several runs at different request rates together), `compute_efficiency`
(TTFTs of varied prompt lengths) and `memory_efficiency` (decode; separable from
`step_overhead_s` only through the KV reads that grow with context, so it trades off with it
unless contexts vary widely). Client-side costs (HTTP, tokenization, streaming) are in the
measurements and land in the fitted overheads. The reported errors (`ErrorStats`) are per
request, so they keep the per-request jitter above as a floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from sim.cluster.spec import ClusterSpec
from sim.engine.policy import PolicyFactory
from sim.fit.bench_objective import BenchObjective, BudgetSpent
from sim.fit.bench_params import (DEFAULT_FIT, FIT_PARAMS, FRONTEND, STAGE_DEFAULT_FIT,
                              STAGE_FIT_PARAMS, FitParam, FitSpace, fit_space)
from sim.fit.bench_replay import ErrorStats, check_factory, check_trace, error_stats
from sim.util.errors import ConfigError

__all__ = ["BenchFit", "DEFAULT_FIT", "FIT_PARAMS", "STAGE_DEFAULT_FIT", "STAGE_FIT_PARAMS",
           "FitParam", "fit_bench"]

REL_STEP = 0.1  # finite-difference step relative to the variable (at least FitParam.min_step)
TTFT_WEIGHT = 0.1  # default weight of the TTFT residuals against the decode-time ones


@dataclass(frozen=True)
class BenchFit:
    """A fit's result: cost-model overrides and the error before and after."""

    overrides: Mapping[str, float | bool]  # fitted cost-model fields (seconds / fractions;
    # cpu_overlapped: False when stage host terms were fitted in series)
    before: ErrorStats  # with the cluster's own cost model
    after: ErrorStats  # with `overrides` applied
    num_evaluations: int  # simulations run
    message: str  # the optimizer's stopping reason

    def __post_init__(self) -> None:
        known = (*FIT_PARAMS, *STAGE_FIT_PARAMS, FRONTEND, "cpu_overlapped")
        unknown = [k for k in self.overrides if k not in known]
        if unknown:
            raise ConfigError("overrides", unknown, f"fittable: {', '.join(known)}")
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))


def fit_bench(traces: pd.DataFrame | Sequence[pd.DataFrame], cluster: ClusterSpec,
              make_policy: PolicyFactory, fit: Sequence[str] | None = None,
              max_evaluations: int = 40, ttft_weight: float = TTFT_WEIGHT) -> BenchFit:
    """Fit the `fit` fields of the cluster's cost model (default: its kind's per-step and
    per-sequence overheads, `sim.fit.bench_params`) to the measured TTFT and TPOT of one benchmark
    run or several (e.g. one per request rate: varied load separates the per-step from the
    per-sequence overhead) under the policy `make_policy` builds
    (`policies.registry.policy_factory(name, params, seed)`). One evaluation simulates every
    run."""
    from scipy.optimize import least_squares  # lazy: scipy comes with scikit-learn

    runs = [traces] if isinstance(traces, pd.DataFrame) else list(traces)
    if not runs:
        raise ConfigError("traces", runs, "need at least one benchmark run")
    for t in runs:
        check_trace(t)
    space = fit_space(cluster)
    names = _check_fit(space.default_fit if fit is None else fit, max_evaluations, space)
    frontend = FRONTEND in names  # solved at each evaluation, not an optimizer variable
    names = [k for k in names if k != FRONTEND]
    x0, lower, upper = _start(names, space)
    if not (isinstance(ttft_weight, (int, float)) and 0 <= ttft_weight < math.inf):
        raise ConfigError("ttft_weight", ttft_weight, "must be a number >= 0")
    check_factory(make_policy)
    before_records = BenchObjective(runs, cluster, make_policy, names, space.table, 1,
                                    0.0).records(None)  # the cluster's own model, as configured
    before = _stats(runs, before_records)
    serial = _serial_host(cluster, space.family)
    own = {k: v for k, v in cluster.cost_model.items() if not (frontend and k == FRONTEND)}
    cluster = replace(cluster, cost_model={**own, **serial})  # serial: host terms are fitted
    # as the host time a step exposes, after the GPU's; a fitted frontend replaces the own
    objective = BenchObjective(runs, cluster, make_policy, names, space.table, max_evaluations,
                               float(ttft_weight), frontend)
    if before.num_requests == 0:
        raise ConfigError("traces", f"{before.num_unfinished} requests", (
            f"the simulation finished none of them with their measured output length "
            f"({_unfinished(before_records)}): nothing to fit; check the model, GPU, "
            f"max_model_len and policy parameters against the benchmarked server's"))
    if space.step_field in names:  # start where the median TPOT gap puts it (ms variable)
        j = names.index(space.step_field)
        gap = _tpot_gap(runs, before_records)
        x0[j] = np.clip(x0[j] + gap * 1e3, lower[j], upper[j])
    message = "evaluation budget spent"
    try:
        if not names:  # the frontend alone: one simulation
            objective(x0)
            raise BudgetSpent
        out = least_squares(
            objective, x0, bounds=(lower, upper), xtol=1e-10, ftol=1e-10,
            jac=lambda x: _forward_jacobian(objective, x, objective.params, upper),
            x_scale=np.array([p.typical for p in objective.params]), max_nfev=max_evaluations)
        message = str(out.message)
    except BudgetSpent:
        pass
    best = objective.overrides(objective.best[1] if objective.best[1] is not None else x0)
    if frontend:
        best[FRONTEND] = objective.best[2]
    after = _stats(runs, objective.records(best))
    return BenchFit({**serial, **best}, before, after, objective.num_evaluations + 2, message)


def _serial_host(cluster: ClusterSpec, family: str) -> dict[str, bool]:
    """{cpu_overlapped: False} when fitting the stage model's host terms of a cluster that
    does not set it: a benchmark shows the host time a step exposes, which the fit adds after
    the GPU's (an overlapped host term hides below the GPU step, and nothing would pin it)."""
    if family != "stage" or "cpu_overlapped" in cluster.cost_model:
        return {}
    return {"cpu_overlapped": False}


def _unfinished(records: Sequence[pd.DataFrame]) -> str:
    """'rejected 30 (exceeds_max_model_len: 30)': the simulation's outcomes, for an error."""
    rec = pd.concat(records, ignore_index=True)
    parts = []
    for outcome, group in rec.groupby("finish_reason", sort=True):
        why = group.loc[group["reason"] != "", "reason"].value_counts().sort_index()
        detail = ", ".join(f"{k}: {v}" for k, v in why.items())
        parts.append(f"{outcome} {len(group)}" + (f" ({detail})" if detail else ""))
    return "; ".join(parts)


def _stats(traces: Sequence[pd.DataFrame], records: Sequence[pd.DataFrame]) -> ErrorStats:
    """error_stats over all runs together."""
    return error_stats(pd.concat(traces, ignore_index=True),
                       pd.concat(records, ignore_index=True))


def _tpot_gap(traces: Sequence[pd.DataFrame], records: Sequence[pd.DataFrame]) -> float:
    """Median measured - simulated TPOT (seconds) over all runs' finished requests; 0 if none."""
    gaps = np.concatenate([t["measured_tpot_s"].to_numpy() - r["tpot_s"].to_numpy()
                           for t, r in zip(traces, records)])
    gaps = gaps[np.isfinite(gaps)]
    return float(np.median(gaps)) if gaps.size else 0.0


def _check_fit(fit: Sequence[str], max_evaluations: int, space: FitSpace) -> list[str]:
    names = list(fit)
    known = (*space.table, FRONTEND)
    if not names or len(set(names)) != len(names) or any(k not in known for k in names):
        raise ConfigError("fit", names, f"distinct names among {', '.join(known)} "
                                        f"(the {space.family} cost model's fittable fields)")
    searched = len([k for k in names if k != FRONTEND])
    if isinstance(max_evaluations, bool) or not isinstance(max_evaluations, int) \
            or max_evaluations < searched + 1:
        raise ConfigError("max_evaluations", max_evaluations,
                          f"must be an int >= {searched + 1} (one Jacobian)")
    return names


def _forward_jacobian(fun: Any, x: np.ndarray, params: Sequence[FitParam],
                      upper: np.ndarray) -> np.ndarray:
    """Forward differences of `fun` at x, steps REL_STEP * |x| (at least each min_step), taken
    backwards at an upper bound. Steps this large step over the simulation's small jumps (an
    arrival moving across an iteration boundary)."""
    f0 = fun(x)
    cols = []
    for j, p in enumerate(params):
        h = max(REL_STEP * abs(x[j]), p.min_step)
        if x[j] + h > upper[j]:
            h = -h
        xj = np.array(x, dtype=np.float64)
        xj[j] += h
        cols.append((fun(xj) - f0) / h)
    return np.stack(cols, axis=1)


def _start(names: Sequence[str], space: FitSpace
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start (the cost model's own values, inside the bounds) and bounds of the variables."""
    params = [space.table[k] for k in names]
    lower = np.array([p.var(p.lower) for p in params])
    upper = np.array([p.var(p.upper) for p in params])
    x0 = np.array([p.var(min(max(space.start[k], p.lower), p.upper))
                   for k, p in zip(names, params)])
    return np.clip(x0, lower + 1e-9 * (upper - lower), upper), lower, upper

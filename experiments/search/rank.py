"""The ranking of a search's candidates: one row each, simulated ones first in rank order.

For a simulated candidate: capacity (req/s at the SLO, the capacity search's), capacity per
GPU, $ per hour (its GPUs x the GPU's price per GPU-hour, sim/hardware/gpu_costs.py or
`cluster.gpu_price_per_hour`), requests per dollar (capacity x 3600 / $ per hour),
usd_per_m_output_tokens and j_per_output_token at capacity (sim/cluster/run_cost.py), and the
p90 TTFT and p99 TPOT of its probe at capacity. With `search.target_rate`: replicas =
ceil(target / capacity), their GPUs and $ per hour; ranked by that $ per hour (then fewer
GPUs). Without: ranked by requests per dollar (then capacity per GPU). A GPU with no price
(NaN) ranks after every priced candidate, and a capacity of 0 (even the first probed rate
missed the SLO) after those. Candidates kept but not simulated (`--dry-run`) follow, then the
pruned ones, unranked, with their reason.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from experiments.search.candidates import Candidate
from experiments.search.config import SearchExperiment
from experiments.search.prune import Screened

SECONDS_PER_HOUR = 3600.0  # seconds
KNOBS = ("tensor_parallel", "pipeline_parallel", "scheduler", "max_num_seqs", "token_budget",
         "num_prefill", "num_decode", "prefill_tp", "decode_tp", "prefill_pp",
         "decode_pp")  # search.csv columns of a candidate's values


def number(value: Any) -> float:
    """A float of a JSON value (None, a NaN / inf written as null: NaN)."""
    return math.nan if value is None else float(value)


def gpu_price(search: SearchExperiment, gpu: str) -> float:
    """US dollars per GPU-hour of a GPU type (NaN when unpriced)."""
    from sim.cluster.run_cost import gpu_rates
    from sim.hardware.gpu_file import resolve_gpu

    cluster = search.shared.get("cluster") or {}
    return gpu_rates(resolve_gpu(gpu).name, cluster.get("gpu_price_per_hour"), {})[0]


def at_capacity(probes: pd.DataFrame, label: str, capacity: float) -> dict[str, float]:
    """Mean p90 TTFT and p99 TPOT (seconds) of a candidate's passing probes at its capacity,
    and the share of their requests the deployment rejected (a prompt over its batch token
    budget, over its context: each counts as a miss, and a deployment may meet the SLO while
    turning some away)."""
    nan = math.nan
    if not len(probes) or capacity <= 0:
        return {"p90_ttft_s": nan, "p99_tpot_s": nan, "rejected_share": nan}
    mine = probes[(probes["label"] == label) & probes["meets_slo"].astype(bool)
                  & (probes["rate"] == capacity)]
    out = {key: float(mine[key].mean()) if len(mine) else nan
           for key in ("p90_ttft_s", "p99_tpot_s")}
    out["rejected_share"] = float((mine["rejected"] / mine["num_requests"]).mean()) \
        if len(mine) else nan
    return out


def base_row(screened: Screened) -> dict[str, Any]:
    """What every row has: the candidate, its values, its pruning and bounds."""
    c: Candidate = screened.candidate
    bounds = screened.bounds
    return {"label": c.label, "kind": c.kind, "gpu": c.gpu, "num_gpus": c.num_gpus,
            **{k: c.knobs.get(k, "") for k in KNOBS},
            "status": "pruned" if screened.pruned else "simulated",
            "pruned": screened.pruned, "reason": screened.reason,
            "ttft_bound_ms": bounds.ttft_s * 1e3 if bounds else math.nan,
            "tpot_bound_ms": bounds.tpot_s * 1e3 if bounds else math.nan}


def simulated_row(search: SearchExperiment, screened: Screened, result: Mapping[str, Any],
                  probes: pd.DataFrame) -> dict[str, Any]:
    """A simulated candidate's row: capacity, per GPU, per dollar, for the target rate."""
    c = screened.candidate
    capacity = number(result.get("capacity_rps"))
    price = gpu_price(search, c.gpu)
    per_hour = c.num_gpus * price
    row = {**base_row(screened), "capacity_rps": capacity,
           "capacity_per_gpu": capacity / c.num_gpus, "price_per_gpu_hour": price,
           "usd_per_hour": per_hour,
           "requests_per_usd": capacity * SECONDS_PER_HOUR / per_hour if per_hour > 0 else
           math.nan,
           "usd_per_m_output_tokens": number(result.get("usd_per_m_output_tokens")),
           "j_per_output_token": number(result.get("j_per_output_token")),
           **at_capacity(probes, c.label, capacity),
           "delivered_rps": number(result.get("delivered_rps")),
           "steady_at_capacity": bool(result.get("steady_at_capacity", True)),
           "num_probes": int(result.get("num_probes") or 0)}
    target = search.space.target_rate
    if target is not None:
        replicas = math.ceil(target / capacity) if capacity > 0 else math.nan
        row.update({"target_rps": target, "replicas": replicas,
                    "total_gpus": replicas * c.num_gpus, "total_usd_per_hour": replicas *
                    per_hour})
    return row


def rank_key(row: Mapping[str, Any], target: bool) -> tuple:
    """Sort key: served at all, priced, then the cost measure, then the tie-breaks."""
    if target:
        cost = row["total_usd_per_hour"]
        return (row["capacity_rps"] <= 0, math.isnan(cost), cost if not math.isnan(cost) else 0,
                row["total_gpus"], -row["capacity_rps"], row["label"])
    value = row["requests_per_usd"]
    return (row["capacity_rps"] <= 0, math.isnan(value), -value if not math.isnan(value) else 0,
            -row["capacity_per_gpu"], row["label"])


def rank(search: SearchExperiment, screened: Sequence[Screened],
         results: Mapping[str, Mapping[str, Any]], probes: pd.DataFrame) -> list[dict[str, Any]]:
    """Every candidate's row: the simulated ones ranked (`rank` 1, 2, ...), then the pruned."""
    simulated = [simulated_row(search, s, results[s.candidate.label], probes)
                 for s in screened if not s.pruned and s.candidate.label in results]
    simulated.sort(key=lambda r: rank_key(r, search.space.target_rate is not None))
    for n, row in enumerate(simulated, 1):
        row["rank"] = n
    waiting = [{**base_row(s), "status": "not simulated", "rank": math.nan}
               for s in screened if not s.pruned and s.candidate.label not in results]
    pruned = [{**base_row(s), "rank": math.nan} for s in screened if s.pruned]
    return simulated + waiting + pruned

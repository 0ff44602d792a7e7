"""What a capacity search prints: one line per finished policy, the table, and the warnings
for probes that did not reach steady state (sim/metrics/steady.py)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd


def result_line(row: dict[str, Any]) -> str:
    """'vllm: capacity 15 req/s (delivered 14.9; min over seeds; ...)' with its warnings."""
    upper = "-" if math.isinf(row["failing_rps"]) else f"{row['failing_rps']:.3g}"
    line = (f"{row['label']}: capacity {row['capacity_rps']:.3g} req/s offered, "
            f"{row['delivered_rps']:.3g} delivered ({row['seed_aggregate']} over seeds; spread "
            f"{row['capacity_spread_rps']:.3g}; fails at {upper}; {row['num_probes']} probes, "
            f"{row['wall_s']:.1f} s simulating)")
    if row["capacity_rps"] == 0:
        line += (f"; WARNING: even the first probe ({upper} req/s) missed the SLO: the capacity "
                 f"is below it, unsearched; lower --min-rate")
    if row.get("max_rejected") or row.get("max_length_capped"):
        counted = "counted as misses" if "attainment" in row["slo"] else "not counted"
        line += (f"; warning: up to {row['max_rejected']} requests rejected and "
                 f"{row['max_length_capped']} cut per probe (rejections {counted} against the "
                 f"SLO; see capacity_probes.csv)")
    return line


def unsteady_warnings(results: Sequence[dict[str, Any]]) -> list[str]:
    """One loud line per policy some of whose probes did not reach steady state."""
    lines = []
    for row in results:
        if not row.get("unsteady_probes"):
            continue
        lines.append(f"WARNING: {row['label']}: {row['unsteady_probes']} of "
                     f"{row['num_probes']} probes did not reach steady state, the lowest at "
                     f"{row['lowest_unsteady_rps']:.4g} req/s ({row['unsteady_reason']}); an "
                     f"unsteady probe fails the SLO (an overloaded system is not capacity; "
                     f"one still filling when its arrivals stop is rerun longer first). See "
                     f"steady, steady_reason and probe_doublings in capacity_probes.csv")
        if not row.get("steady_at_capacity", True):
            lines.append(f"WARNING: {row['label']}: the capacity itself was not measured in "
                         f"steady state")
    return lines


def format_table(results: list[dict[str, Any]]) -> str:
    """The printed table: capacity (offered, the chosen aggregate) beside the rate delivered
    there, every seed, min / mean / spread, goodput and attainment at capacity, and how many
    probes were not steady."""
    if not results:
        return "(no policies)"
    aggregate = results[0]["seed_aggregate"]
    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "slo"} for r in results])
    seeds = [c for c in frame.columns if c.startswith("capacity_seed")]
    heads = {"label": "policy", "capacity_rps": f"capacity ({aggregate} over seeds)",
             "delivered_rps": "delivered",
             **{c: c.removeprefix("capacity_").removesuffix("_rps") for c in seeds},
             "capacity_min_rps": "min", "capacity_mean_rps": "mean",
             "capacity_spread_rps": "spread", "failing_rps": "fails at",
             "request_goodput": "goodput", "slo_attainment": "attainment",
             "num_probes": "probes", "unsteady_probes": "unsteady"}
    table = frame[list(heads)].rename(columns=heads)
    return ("(rates and goodput in req/s; capacity: the offered rate, delivered: completed "
            "requests per second over the measured window there)\n"
            + table.to_string(index=False, float_format="%.4g"))

"""What a deployment search prints: the ranked table (top 15) and the counts of what was pruned."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

TOP = 15  # ranked rows printed
COLUMNS = {"rank": "rank", "label": "candidate", "num_gpus": "GPUs",
           "capacity_rps": "req/s", "capacity_per_gpu": "req/s/GPU",
           "usd_per_hour": "$/h", "requests_per_usd": "req/$",
           "usd_per_m_output_tokens": "$/M out", "p90_ttft_s": "p90 TTFT s",
           "p99_tpot_s": "p99 TPOT s", "rejected_share": "rejected"}  # column -> heading
TARGET_COLUMNS = {"replicas": "replicas", "total_gpus": "total GPUs",
                  "total_usd_per_hour": "total $/h"}  # with a target rate


def format_ranked(rows: Sequence[Mapping[str, Any]], top: int = TOP) -> str:
    """The top `top` simulated candidates as a table ('(none simulated)' when empty)."""
    ranked = [r for r in rows if r["status"] == "simulated"]
    if not ranked:
        return "(no candidate was simulated)"
    heads = {**COLUMNS, **(TARGET_COLUMNS if "replicas" in ranked[0] else {})}
    frame = pd.DataFrame([{k: r.get(k) for k in heads} for r in ranked[:top]])
    frame["rank"] = frame["rank"].astype(int)
    text = frame.rename(columns=heads).to_string(index=False, float_format="%.4g")
    more = f"\n... and {len(ranked) - top} more in search.csv" if len(ranked) > top else ""
    return text + more


def notes(rows: Sequence[Mapping[str, Any]], left_out: int, counts: Mapping[str, int],
          reused: int) -> list[str]:
    """The lines after the table: counts of pruned, unpriced, unserved and reused."""
    ranked = [r for r in rows if r["status"] == "simulated"]
    pruned = ", ".join(f"{n} {reason}" for reason, n in counts.items()) or "none"
    lines = [f"{len(rows) + left_out} candidates: {left_out} over max_gpus (not enumerated), "
             f"pruned before simulation: {pruned}; {len(ranked)} simulated"
             + (f" ({reused} reused from an earlier run of this search)" if reused else "")]
    unpriced = [r["label"] for r in ranked if math.isnan(r["usd_per_hour"])]
    if unpriced:
        lines.append(f"no price per GPU-hour (set cluster.gpu_price_per_hour), ranked last "
                     f"among those served: {', '.join(unpriced)}")
    unserved = [r["label"] for r in ranked if not r["capacity_rps"] > 0]
    if unserved:
        lines.append(f"even the first probed rate missed the SLO (capacity below it; lower "
                     f"--min-rate), ranked last: {', '.join(unserved)}")
    return lines

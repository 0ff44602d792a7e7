"""Per-request records and a run summary, named as vLLM's benchmark names them.

Latencies are seconds. TTFT = first token - arrival; TPOT = (finish - first token) / (outputs - 1);
ITL = gap between consecutive tokens of a request (over all tokens); E2E = finish - arrival;
queueing delay = first scheduled - arrival; normalized latency = E2E / output tokens.
Throughputs divide by the run's duration (first arrival to last final event). Each latency has
mean_, std_ (population), median_ and p<N>_ keys; ITL percentiles are those of ITL_PERCENTILES.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from sim.core.request import Request
from sim.records import gap_stats
from sim.records.column_stats import ColumnStats, column_stats
from sim.records.instance_stats import InstanceStats
from sim.records.record_file import RecordColumns
from sim.records.record_log import record_columns
from sim.records.recorder import Recorder

RECORD_COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens", "status",
                  "instance_id", "scheduled_s", "first_token_s", "finish_s", "num_preemptions",
                  "num_recomputed_tokens", "num_padding_tokens", "max_itl_s",
                  "predicted_output_tokens", "app", "requested_output_tokens", "finish_reason",
                  "reason", "reason_detail")
# finish_reason: stop | length (output cut at max_model_len) | rejected | failed | cancelled;
# reason: a code of sim.core.request (why it was rejected, failed, cancelled or cut; "" when it ran as
# asked), reason_detail: the same with its values. A workload with request classes adds its
# class columns last (`class`, `priority`, `timeout_s`: sim.core.request.CLASS_FIELDS).
PERCENTILES = (50, 90, 99)
ITL_PERCENTILES = (25, 50, 75, 90, 95, 99, 99.9)  # percent: ITL percentiles in the summary


def request_records(requests: Sequence[Request], extra: Sequence[str] = ()) -> pd.DataFrame:
    """One flat row per request, plus derived latency columns; `extra`: the class columns
    the workload has (sim.records.record_log.record_columns)."""
    return records_frame(record_columns(requests, extra))


def records_frame(columns: dict[str, np.ndarray | list]) -> pd.DataFrame:
    """The records DataFrame from `record_columns` (or `RecordLog.columns`) and latencies."""
    df = pd.DataFrame(columns)
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["queueing_s"] = df["scheduled_s"] - df["arrival_s"]
    outs = df["output_tokens"].where(df["output_tokens"] > 1)
    df["tpot_s"] = (df["finish_s"] - df["first_token_s"]) / (outs - 1)
    df["normalized_latency_s"] = df["e2e_s"] / df["output_tokens"].where(df["output_tokens"] > 0)
    return df


def _weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-th percentile (0-100) of values repeated `weights` times (inverted CDF)."""
    if len(values) == 0 or weights.sum() == 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    v, cw = values[order], np.cumsum(weights[order])
    idx = int(np.searchsorted(cw, q / 100.0 * cw[-1], side="left"))
    return float(v[min(idx, len(v) - 1)])


def _weighted_percentiles(values: np.ndarray, weights: np.ndarray,
                          qs: Sequence[float]) -> list[float]:
    """_weighted_percentile for each of `qs`, sorting once (values are read through the sort
    order, not copied sorted: memory is what millions of gaps need)."""
    if len(values) == 0 or weights.sum() == 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    cw = np.cumsum(weights[order])
    idx = np.searchsorted(cw, np.asarray(qs, dtype=np.float64) / 100.0 * cw[-1], side="left")
    return [float(values[order[min(int(i), len(values) - 1)]]) for i in idx]


def weighted_std(values: np.ndarray, weights: np.ndarray) -> float:
    """Population standard deviation of values repeated `weights` times (NaN when none)."""
    if len(values) == 0 or weights.sum() == 0:
        return float("nan")
    mean = np.average(values, weights=weights)
    squares = values - mean
    np.square(squares, out=squares)  # in place: one temporary array, not two
    return float(np.sqrt(np.average(squares, weights=weights)))


def _describe(prefix: str, stats: ColumnStats, out: dict[str, float]) -> None:
    """mean_, std_ (population), median_ and p<N>_ keys of one latency column (NaN if empty)."""
    out[f"mean_{prefix}"] = stats.mean
    out[f"std_{prefix}"] = stats.std
    for p, value in zip(PERCENTILES, stats.percentiles):
        out[f"{'median' if p == 50 else f'p{p}'}_{prefix}"] = value


def summarize(records: pd.DataFrame | Path, recorder: Recorder,
              stats: Sequence[InstanceStats]) -> dict[str, float]:
    """Run-level metrics (vLLM benchmark names) and per-instance aggregates; `records` is the
    records frame or its parquet file (read a column at a time: sim/records/record_file.py)."""
    col = RecordColumns(records)
    finished = col.isin("status", ("finished",))  # bools: no string a request
    statuses = col.value_counts("status")  # requests in each final state
    num_done = int(finished.sum())
    end = np.nanmax(col["finish_s"].to_numpy()) if len(col) else 0.0
    duration = float(end - col["arrival_s"].min()) if len(col) else 0.0
    computed = sum(column_sum(part) for part in  # a part at a time: the steps spill to disk
                   recorder.step_log.column_parts("num_computed_tokens"))
    useful_prompt = int(col["prompt_tokens"][finished].sum())
    useful_output = int(col["output_tokens"][finished].sum())
    out: dict[str, float] = {
        "num_requests": len(col), "completed": num_done,
        "rejected": statuses.get("rejected", 0),
        "failed": statuses.get("failed", 0),
        **cancelled_count(col, statuses),
        "num_length_capped": int(col.isin("finish_reason", ("length",)).sum()),
        "num_oom_events": recorder.num_oom_events,
        "num_preemptions": int(col["num_preemptions"].sum()),
        "duration_s": duration,
        "request_throughput": num_done / duration if duration > 0 else float("nan"),
        "output_throughput": useful_output / duration if duration > 0 else float("nan"),
        "total_token_throughput": (useful_prompt + useful_output) / duration
        if duration > 0 else float("nan"),
        "computed_token_throughput": computed / duration if duration > 0 else float("nan"),
        "num_computed_tokens": computed,
        "num_padding_tokens": int(col["num_padding_tokens"].sum()),
        "num_recomputed_tokens": int(col["num_recomputed_tokens"].sum()),
    }
    for name in ("e2e", "ttft", "tpot", "queueing", "normalized_latency"):
        _describe(f"{name}_s", column_stats(col, f"{name}_s", finished, PERCENTILES), out)
    out.update(itl_summary(recorder))
    out.update(_instance_summary(stats, duration))
    out.update(_speculative_summary(col))
    out["prefix_hit_rate"] = prefix_hit_rate(col)
    out.update(reason_counts(col))
    out.update(tier_hit_rates(col))
    out.update(recorder.counters)
    return out


def itl_summary(recorder: Recorder) -> dict[str, float]:
    """Mean, std and ITL_PERCENTILES of the weighted gaps: from whole arrays, or in chunks
    with the same numbers when the gaps were spilled to disk (sim/records/gap_stats.py)."""
    store = recorder.gaps.finish()
    if store is None:
        values, weights = recorder.gaps.arrays()
        mean = float(np.average(values, weights=weights)) if weights.sum() else np.nan
        std = weighted_std(values, weights)
        pcts = _weighted_percentiles(values, weights, ITL_PERCENTILES)
    else:
        _, mean, std, pcts = gap_stats.weighted_summary(store.read, store.num_values,
                                                        ITL_PERCENTILES)
    out = {"mean_itl_s": mean, "std_itl_s": std}
    for p, value in zip(ITL_PERCENTILES, pcts):
        out[f"{'median' if p == 50 else f'p{p:g}'}_itl_s"] = value
    return out


def column_sum(values: np.ndarray | list) -> int:
    """The exact sum of a step column of token counts."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        return int(values.sum(dtype=np.int64))
    return int(sum(values.tolist() if isinstance(values, np.ndarray) else values))


def cancelled_count(records: pd.DataFrame | RecordColumns,
                    statuses: dict[str, int] | None = None) -> dict[str, int]:
    """{'cancelled': N} when the workload has client timeouts (its records have `timeout_s`)
    or anything was cancelled; {} otherwise, so other runs' summaries are unchanged.
    `statuses`: the records' `value_counts("status")`, when the caller has them."""
    col = RecordColumns(records)
    n = (col.value_counts("status") if statuses is None else statuses).get("cancelled", 0)
    return {"cancelled": n} if n or "timeout_s" in col else {}


def reason_counts(records: pd.DataFrame | RecordColumns) -> dict[str, int]:
    """`reason_<code>`: requests rejected, failed, cancelled or cut for each reason code
    (sim.core.request)."""
    reason = RecordColumns(records)["reason"]
    codes = reason[reason != ""]
    return {f"reason_{code}": int(n) for code, n in codes.value_counts(sort=False).items()}


def prefix_hit_rate(records: pd.DataFrame | RecordColumns) -> float:
    """Tokens a prefix-cache hit supplied over the tokens admitted requests had to prefill
    (prompts, plus tokens recomputed after preemptions): cached prompt tokens / prompt tokens
    when nothing is preempted; 0 without prefix caching."""
    col = RecordColumns(records)
    admitted = col["scheduled_s"].notna()
    need = int(col["prompt_tokens"][admitted].sum()
               + col["num_recomputed_tokens"][admitted].sum())
    return int(col["num_cached_tokens"][admitted].sum()) / need if need else float("nan")


def tier_hit_rates(records: pd.DataFrame | RecordColumns) -> dict[str, float]:
    """With KV prefix tiers on (records have `num_host_hit_tokens`): `prefix_hit_rate` split
    by the tier that supplied the cached tokens (GPU, host, remote; they sum to it); else none."""
    col = RecordColumns(records)
    if "num_host_hit_tokens" not in col:
        return {}
    admitted = col["scheduled_s"].notna()
    need = int(col["prompt_tokens"][admitted].sum()
               + col["num_recomputed_tokens"][admitted].sum())
    host = int(col["num_host_hit_tokens"][admitted].sum())
    remote = int(col["num_remote_hit_tokens"][admitted].sum())
    gpu = int(col["num_cached_tokens"][admitted].sum()) - host - remote
    nan = float("nan")
    return {"prefix_hit_rate_gpu": gpu / need if need else nan,
            "prefix_hit_rate_host": host / need if need else nan,
            "prefix_hit_rate_remote": remote / need if need else nan}


def _speculative_summary(records: pd.DataFrame | RecordColumns) -> dict[str, float]:
    """Speculative decoding: verifies (per request), acceptance and tokens per verify."""
    col = RecordColumns(records)
    verifies = int(col["num_spec_steps"].sum())
    drafted = int(col["num_draft_tokens"].sum())
    accepted = int(col["num_accepted_tokens"].sum())
    return {
        "spec_verify_steps": verifies, "spec_draft_tokens": drafted,
        "spec_accepted_tokens": accepted,
        "spec_acceptance_rate": accepted / drafted if drafted else float("nan"),
        "spec_tokens_per_step": (accepted + verifies) / verifies if verifies else float("nan"),
    }


def loop_gpu_share(stats: Sequence[InstanceStats]) -> float:
    """GPU busy share of the engine loop: GPU seconds over the wall seconds the instances spent
    in steps (exposed host gaps included, idle time not); 0 when no step ran."""
    busy = sum(s.busy_s for s in stats)
    return sum(s.gpu_busy_s for s in stats) / busy if busy > 0 else 0.0


def _instance_summary(stats: Sequence[InstanceStats], duration: float) -> dict[str, float]:
    busy = [s.busy_s / duration if duration > 0 else 0.0 for s in stats]
    gpu_busy = [s.gpu_busy_s / duration if duration > 0 else 0.0 for s in stats]
    its = sum(s.num_iterations for s in stats)
    return {
        "num_instances": len(stats),
        "busy_fraction": float(np.mean(busy)) if stats else 0.0,
        "gpu_busy_frac": float(np.mean(gpu_busy)) if stats else 0.0,
        "loop_gpu_share": loop_gpu_share(stats),  # GPU seconds / engine-loop wall seconds
        "scheduling_s": sum(s.sched_s for s in stats),  # modelled scheduler CPU seconds
        "scheduling_gap_s": sum(s.busy_s - s.gpu_busy_s for s in stats),  # GPU idle on it
        "mean_batch_size": sum(s.seq_iterations for s in stats) / its if its else 0.0,
        "num_iterations": its,
        "peak_kv_fraction": max((s.peak_kv_tokens / s.kv_capacity_tokens for s in stats),
                                default=0.0),
        "peak_reserved_kv_fraction": max(
            (s.peak_reserved_kv_tokens / s.kv_capacity_tokens for s in stats), default=0.0),
    }


INSTANCE_STAT_COLUMNS = ("instance_id", "kv_capacity_tokens", "busy_s", "busy_fraction",
                         "gpu_busy_s", "sched_s", "policy_host_s", "num_steps", "num_iterations",
                         "mean_batch_size", "peak_kv_tokens", "peak_reserved_kv_tokens")


def instance_settings(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Per instance, the policy's resolved settings: the instances table's other columns."""
    cols = [c for c in frame.columns if c not in INSTANCE_STAT_COLUMNS]
    return [{c: (v.item() if hasattr(v, "item") else v) for c, v in zip(cols, row)}
            for row in frame[cols].itertuples(index=False)] if cols else []


def instance_frame(stats: Sequence[InstanceStats], duration: float,
                   settings: Sequence[Mapping[str, Any]] = ()) -> pd.DataFrame:
    """One row per instance: busy fraction, mean batch size, peak KV use, then the settings
    the policy resolved for it (`Policy.instance_settings`)."""
    rows = []
    for k, s in enumerate(stats):
        rows.append({
            "instance_id": s.instance_id, "kv_capacity_tokens": s.kv_capacity_tokens,
            "busy_s": s.busy_s, "busy_fraction": s.busy_s / duration if duration > 0 else 0.0,
            "gpu_busy_s": s.gpu_busy_s, "sched_s": s.sched_s,
            "num_steps": s.num_steps, "num_iterations": s.num_iterations,
            "mean_batch_size": s.seq_iterations / s.num_iterations if s.num_iterations else 0.0,
            "peak_kv_tokens": s.peak_kv_tokens,
            "peak_reserved_kv_tokens": s.peak_reserved_kv_tokens,
            **(settings[k] if k < len(settings) else {})})
    return pd.DataFrame(rows)

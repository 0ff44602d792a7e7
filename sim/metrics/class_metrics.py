"""Per-class metrics: each request class's counts, latencies, SLO attainment and goodput.

A run's requests fall into classes by the workload's `class` column (a request without one is in
class `default`), or, when the workload has priorities but no classes, by priority (`priority0`,
`priority1`, ...). Keys go into the run summary as `class.<name>.<metric>`, with the run-level
metric names (sim.metrics.summary): `num_requests`, `completed`, `rejected`, `failed`, `cancelled`,
`request_throughput`, and `mean_`, `median_`, `p90_`, `p99_` of `ttft_s`, `tpot_s`, `e2e_s`,
`queueing_s` over the class's finished requests, plus `mean_normalized_latency_s`; with an SLO,
`goodput`, `slo_attainment` and `meets_slo` as sim.metrics.slo defines them for a run, over the class's
requests (rejected, failed and cancelled ones count as missing it). A run without classes or
priorities has no such keys.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from sim.metrics.slo import SLO, good_requests, slo_violations
from sim.records.record_file import RecordColumns

NO_CLASS = "default"  # the class of a request whose class cell is empty
PREFIX = "class."  # summary keys: class.<name>.<metric>
LATENCIES = ("ttft", "tpot", "e2e", "queueing")  # seconds: described per class
COUNTS = ("rejected", "failed", "cancelled")  # statuses counted per class
CLASS_RECORD_COLUMNS = ("class", "priority", "status", "normalized_latency_s",
                        *(f"{name}_s" for name in LATENCIES))  # the record columns read


def has_classes(records: pd.DataFrame | Path) -> bool:
    """Whether the records (a frame, or its parquet file, unread) have classes or priorities."""
    names = RecordColumns(records).names
    return "class" in names or "priority" in names


def class_labels(records: pd.DataFrame) -> pd.Series | None:
    """Each record's class name; None when the workload has neither classes nor priorities."""
    if "class" in records.columns:
        return records["class"].map(lambda c: NO_CLASS if c is None or c != c else str(c))
    if "priority" in records.columns:
        return "priority" + records["priority"].astype(np.int64).astype(str)
    return None


def class_names(records: pd.DataFrame, labels: pd.Series) -> list[str]:
    """The classes of a run, most important first (lowest priority value), then by name."""
    if "priority" in records.columns:
        best = records["priority"].groupby(labels).min()
        return sorted(best.index, key=lambda name: (int(best[name]), name))
    return sorted(set(labels))


def class_summary(records: pd.DataFrame, duration_s: float) -> dict[str, float]:
    """`class.<name>.<metric>` for every class (module docstring); {} without classes."""
    labels = class_labels(records)
    if labels is None:
        return {}
    out: dict[str, float] = {}
    for name in class_names(records, labels):
        metrics = class_metrics(records[(labels == name).to_numpy()], duration_s)
        out.update({f"{PREFIX}{name}.{key}": value for key, value in metrics.items()})
    return out


def class_metrics(group: pd.DataFrame, duration_s: float) -> dict[str, float]:
    """One class's counts and latencies, keyed as the run summary keys them."""
    status = group["status"]
    done = group[status == "finished"]
    out: dict[str, float] = {"num_requests": len(group), "completed": len(done)}
    out.update({key: int((status == key).sum()) for key in COUNTS})
    out["request_throughput"] = len(done) / duration_s if duration_s > 0 else math.nan
    for name in LATENCIES:
        x = done[f"{name}_s"].dropna().to_numpy(dtype=np.float64)
        for stat, value in zip(("mean", "median", "p90", "p99"), _stats(x)):
            out[f"{stat}_{name}_s"] = value
    norm = done["normalized_latency_s"].dropna().to_numpy(dtype=np.float64)
    out["mean_normalized_latency_s"] = float(norm.mean()) if len(norm) else math.nan
    return out


def _stats(x: np.ndarray) -> tuple[float, float, float, float]:
    """mean, median, p90, p99 (linear percentiles as sim.metrics.summary); NaN when empty."""
    if not len(x):
        return math.nan, math.nan, math.nan, math.nan
    p50, p90, p99 = np.percentile(x, (50, 90, 99))
    return float(x.mean()), float(p50), float(p90), float(p99)


def class_slo_summary(records: pd.DataFrame, duration_s: float,
                      slos: Mapping[str, SLO]) -> dict[str, float]:
    """`class.<name>.goodput`, `.slo_attainment` and `.meets_slo` for each class with an SLO
    in `slos` (class name -> SLO); {} without classes."""
    labels = class_labels(records)
    if labels is None:
        return {}
    out: dict[str, float] = {}
    for name in class_names(records, labels):
        slo = slos.get(name)
        if slo is None:
            continue
        group = records[(labels == name).to_numpy()]
        num_good = int(good_requests(group, slo).sum())
        attainment = num_good / len(group) if len(group) else math.nan
        metrics = {**class_metrics(group, duration_s), "slo_attainment": attainment}
        prefix = f"{PREFIX}{name}."
        out[prefix + "goodput"] = num_good / duration_s if duration_s > 0 else math.nan
        out[prefix + "slo_attainment"] = attainment
        out[prefix + "meets_slo"] = float(not slo_violations(metrics, slo))
    return out

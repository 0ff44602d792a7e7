"""A run's summaries past the engine's own (sim.metrics.summary): dollars and joules, SLO
attainment, each class's SLO, steady state, read from the records a few columns at a time
(`RunResult.record_frame`), timed as the run's `summarise` phase (host_timing.json)."""

from __future__ import annotations

import time
from typing import Any

from experiments.config.classes import class_slos
from experiments.config.experiment import ExperimentConfig, PolicyEntry
from experiments.files.host_files import add_phases
from experiments.report.steady import steady_metrics
from sim.cluster.run_cost import COST_COLUMNS, run_cost_summary
from sim.engine.simulate import RunResult
from sim.metrics.class_metrics import (CLASS_RECORD_COLUMNS, class_labels, class_slo_summary,
                                       has_classes)
from sim.metrics.slo import SLO_COLUMNS, slo_summary


def add_summaries(cfg: ExperimentConfig, entry: PolicyEntry, cluster: Any,
                  result: RunResult) -> None:
    """$ and J, the SLO, per-class SLOs and steady state, into `result.summary`."""
    start = time.perf_counter()
    result.summary.update(run_cost_summary(cluster, result.record_frame(COST_COLUMNS),
                                           result.instances,
                                           result.summary["duration_s"]))  # $ and joules
    if cfg.slo is not None:
        result.summary.update(slo_summary(result.record_frame(SLO_COLUMNS), result.summary,
                                          cfg.slo))
    per_class(cfg, entry, result)
    result.summary.update(steady_metrics(result.record_columns(), result.summary, cfg.slo))
    add_phases(result.host_timing, summarise=time.perf_counter() - start)


def per_class(cfg: ExperimentConfig, entry: PolicyEntry, result: RunResult) -> None:
    """Each class's SLO attainment and goodput in the summary (docs/classes.md), when the
    workload has classes and the experiment or the class has an SLO."""
    if not has_classes(result.record_columns().source):
        return
    records = result.record_frame(CLASS_RECORD_COLUMNS + SLO_COLUMNS)
    labels = class_labels(records)
    if labels is None:
        return
    slos = class_slos(cfg.classes_for(entry), cfg.slo, set(labels))
    if slos:
        result.summary.update(class_slo_summary(records, result.summary["duration_s"], slos))

"""Steady state in a sweep's results: each run's check (sim/metrics/steady.py) in its summary, and the
loud warning for a run that did not reach it.

Every run's summary gets `steady` (1.0 or 0.0), `steady_reason`, the measured window
(`measured_start_s`, `measured_end_s`, `measured_requests`), `offered_rps` and `delivered_rps`
over it, `queue_growth_rps` and the rule (`steady_rule`, sim.metrics.steady.SteadyRule's defaults); with
an SLO also `measured_slo_attainment`, `measured_goodput` and `measured_meets_slo` on the measured
requests (sim/metrics/measured_slo.py). The run-level `slo_attainment`, `goodput` and latencies keep
reading every request, as vLLM's benchmark does.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from sim.metrics.measured_slo import measured_slo_summary
from sim.metrics.slo import SLO, SLO_COLUMNS
from sim.metrics.steady import STEADY_COLUMNS, SteadyRule, steady_summary
from sim.records.record_file import RecordColumns, record_frame


def steady_metrics(records: pd.DataFrame | RecordColumns, summary: Mapping[str, Any],
                   slo: SLO | None, rule: SteadyRule = SteadyRule()) -> dict[str, Any]:
    """The steady-state keys of a run's summary (module docstring); `records` is the frame or
    its columns (the SLO's, with one, read as a frame)."""
    out = steady_summary(records, rule)
    if slo is not None:
        frame = record_frame(records, STEADY_COLUMNS + SLO_COLUMNS)
        out.update(measured_slo_summary(frame, summary, slo, rule))
    return out


def steady_warnings(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One loud line per run that did not reach steady state (none for runs from before the
    check, whose summaries have no `steady`)."""
    lines = []
    for row in rows:
        value = row.get("steady")
        if value is None or (isinstance(value, float) and math.isnan(value)) or value:
            continue
        lines.append(f"WARNING: {row['run']}: not in steady state ({row.get('steady_reason')}): "
                     f"its throughput and latencies describe a transient, not the rate's steady "
                     f"state (summary.csv: steady, steady_reason, offered_rps, delivered_rps)")
    return lines


def rule_line() -> str:
    """The steady-state rule sweeps apply, as printed under the table."""
    return SteadyRule().describe()

"""The per-class console table: one line per (policy, rate, class), when the runs have classes.

Reads the `class.<name>.<metric>` keys of the summary rows (sim/metrics/class_metrics.py), averaged over
seeds like the main table (experiments/report/results.py); a column no row has (attainment and goodput
without an SLO) is left out, and so is the whole table for runs without classes.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from experiments.config.experiment import rate_text
from experiments.report.results import TABLE_UNIT_NOTE, seed_means
from sim.metrics.class_metrics import PREFIX

COUNT_KEY = ".num_requests"  # every class has it: names the classes
# (column header, metric under class.<name>., format)
CLASS_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("n", "num_requests", ".0f"),
    ("done", "completed", ".0f"),
    ("rej", "rejected", ".0f"),
    ("cancel", "cancelled", ".0f"),
    ("fail", "failed", ".0f"),
    ("p50 TTFT s", "median_ttft_s", ".3f"),
    ("p90 TTFT s", "p90_ttft_s", ".3f"),
    ("p99 TTFT s", "p99_ttft_s", ".3f"),
    ("p90 TPOT s", "p90_tpot_s", ".4f"),
    ("p99 E2E s", "p99_e2e_s", ".2f"),
    ("attain", "slo_attainment", ".3f"),
    ("goodput req/s", "goodput", ".3f"),
)


def class_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every class named in the rows, in the order the summaries list them."""
    names: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith(PREFIX) and key.endswith(COUNT_KEY):
                names[key[len(PREFIX):-len(COUNT_KEY)]] = None
    return list(names)


def format_class_table(rows: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> str:
    """The per-class table, or "" when no run has classes."""
    names = class_names(rows)
    if not names:
        return ""
    frame = pd.DataFrame(list(rows))
    columns = [c for c in CLASS_COLUMNS
               if any(f"{PREFIX}{n}.{c[1]}" in frame.columns for n in names)]
    keys = [f"{PREFIX}{n}.{c[1]}" for n in names for c in columns
            if f"{PREFIX}{n}.{c[1]}" in frame.columns]
    lines = []
    for label, rate, values in seed_means(frame, keys, labels):
        for name in names:
            if pd.isna(values.get(f"{PREFIX}{name}.num_requests", math.nan)):
                continue
            cells = {head: _cell(values.get(f"{PREFIX}{name}.{key}"), fmt)
                     for head, key, fmt in columns}
            lines.append({"policy": label, "rate": rate_text(None if pd.isna(rate) else rate),
                          "class": name, **cells})
    return f"per class ({TABLE_UNIT_NOTE})\n" + pd.DataFrame(lines).to_string(index=False)


def _cell(value: Any, fmt: str) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    return format(number, fmt) if math.isfinite(number) else "-"

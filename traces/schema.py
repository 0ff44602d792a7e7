"""THE trace schema: one pandas DataFrame row per request.

Required columns:
- `arrival_s` (float64): seconds since trace start, in [0, MAX_ARRIVAL_S = 1e9] (beyond it float64
  cannot resolve microseconds). Every file loader shifts times exactly so the earliest arrival is
  0 (`traces.times`); a frame built by hand may start later.
- `prompt_tokens` (int64 >= 1), `output_tokens` (int64 >= 1).

Optional columns: `text`, `app`, `session_id` (str, None when missing), `block_ids` (tuple of
int64: the prompt's block hashes, equal ids = shared prefix block) and `block_tokens` (int64 >= 1:
tokens each block id covers, e.g. 512 for Mooncake; prefix caching needs it, see
`sim/memory/prefix_keys.py`). Non-empty `block_ids` without a `block_tokens` column are an error (prefix
caching could not use them; the Mooncake loader sets 512). Request classes (docs/classes.md):
`class` (str), `priority` (int64, lower first; empty: 0) and `timeout_s` (float64 seconds > 0;
empty, nan or inf: none), coerced by `traces.class_columns`. Any other column is kept as is.

Unsorted arrivals are not an error: `validate_trace` sorts rows stably by `arrival_s` (ties keep
their file order) and emits an `UnsortedTraceWarning` saying how many rows moved. Real traces are
sometimes logged slightly out of order, and a simulator needs arrival order, so sorting is the
useful repair; the warning keeps it visible. All other problems raise `TraceError` naming the
source, the row (file line when the loader knows it, else 0-based data row), field and value.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from sim.util.errors import TraceError
from traces.class_columns import CLASS_COLUMNS, to_class_names, to_priorities, to_timeouts
from traces.columns import (Lines, row_label, to_block_ids, to_seconds, to_strings,
                            to_token_counts, where_text)

REQUIRED_COLUMNS: tuple[str, ...] = ("arrival_s", "prompt_tokens", "output_tokens")
STRING_COLUMNS: tuple[str, ...] = ("text", "app", "session_id")
BLOCK_COLUMN = "block_ids"
BLOCK_TOKENS_COLUMN = "block_tokens"


class UnsortedTraceWarning(UserWarning):
    """A trace's arrivals were out of order and have been sorted."""


def validate_trace(df: pd.DataFrame, source: str, *, lines: Lines = None) -> pd.DataFrame:
    """A clean copy of `df` in the schema (fresh index, exact dtypes, sorted by arrival).

    `lines[i]` is the file line of data row i, reported in errors instead of the row index.
    """
    if not isinstance(df, pd.DataFrame):
        raise TraceError(source, "expected a pandas DataFrame", value=type(df).__name__)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise TraceError(source, f"missing required column(s) {missing}; "
                                 f"have {list(map(str, df.columns))}", field=missing[0])
    if lines is not None and len(lines) != len(df):
        raise ValueError(f"lines has {len(lines)} entries for {len(df)} rows")
    out = df.reset_index(drop=True)
    cols: dict[str, object] = {
        "arrival_s": to_seconds(out["arrival_s"], source=source, field="arrival_s", lines=lines),
        "prompt_tokens": to_token_counts(out["prompt_tokens"], source=source,
                                         field="prompt_tokens", lines=lines),
        "output_tokens": to_token_counts(out["output_tokens"], source=source,
                                         field="output_tokens", lines=lines),
    }
    for name in out.columns:
        if name in cols:
            continue
        if name in STRING_COLUMNS:
            cols[name] = to_strings(out[name])
        elif name == BLOCK_COLUMN:
            cols[name] = to_block_ids(out[name], source=source, field=name, lines=lines)
        elif name == BLOCK_TOKENS_COLUMN:
            cols[name] = to_token_counts(out[name], source=source, field=name, lines=lines)
        elif name in CLASS_COLUMNS:
            coerce = {"class": to_class_names, "priority": to_priorities,
                      "timeout_s": to_timeouts}[name]
            cols[name] = coerce(out[name], source=source, field=name, lines=lines)
        else:
            cols[name] = out[name].copy()
    clean = pd.DataFrame(cols, index=pd.RangeIndex(len(out)))
    _check_block_tokens(clean, source, lines)
    return sort_by_arrival(clean, source)


def _check_block_tokens(df: pd.DataFrame, source: str, lines: Lines) -> None:
    """TraceError when rows name block ids but the trace does not say how many tokens each
    covers: prefix caching would silently ignore them."""
    if BLOCK_COLUMN not in df.columns or BLOCK_TOKENS_COLUMN in df.columns:
        return
    named = [i for i, ids in enumerate(df[BLOCK_COLUMN]) if len(ids)]
    if named:
        i = named[0]
        raise TraceError(source, f"column {BLOCK_TOKENS_COLUMN!r} is missing but "
                                 f"{where_text(i, lines)} has {BLOCK_COLUMN}="
                                 f"{list(df[BLOCK_COLUMN].iloc[i])[:8]}: add {BLOCK_TOKENS_COLUMN} "
                                 f"(tokens per block id, e.g. 512 for Mooncake hash ids)",
                         row=row_label(i, lines), field=BLOCK_TOKENS_COLUMN, value=None)


def sort_by_arrival(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """`df` sorted stably by arrival_s, warning with the number of rows that moved."""
    arrival = df["arrival_s"].to_numpy()
    if arrival.size < 2 or bool(np.all(np.diff(arrival) >= 0)):
        return df
    order = np.argsort(arrival, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
    warnings.warn(f"{source}: {moved} of {order.size} rows were out of arrival order; "
                  f"sorted stably by arrival_s", UnsortedTraceWarning, stacklevel=3)
    return df.iloc[order].reset_index(drop=True)


def require_rows(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """`df` unchanged; TraceError when it has no requests."""
    if len(df) == 0:
        raise TraceError(source, "trace has no requests")
    return df


def trace_stats(df: pd.DataFrame) -> dict[str, float]:
    """Summary used to sanity-check loaders: counts, rate (req/s), burstiness, length quantiles."""
    arrival = df["arrival_s"].to_numpy(dtype=np.float64)
    n = int(arrival.size)
    duration = float(arrival.max() - arrival.min()) if n else 0.0
    gaps = np.diff(np.sort(arrival))
    gap_mean = float(gaps.mean()) if gaps.size else float("nan")
    stats: dict[str, float] = {
        "num_requests": n,
        "duration_s": duration,  # seconds from first to last arrival
        "rate_per_s": n / duration if duration > 0 else float("nan"),
        "interarrival_cv": float(gaps.std()) / gap_mean if gap_mean > 0 else float("nan"),
    }
    for col, key in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        stats.update(_length_stats(df[col].to_numpy(dtype=np.float64), key))
    if BLOCK_COLUMN in df.columns:
        stats["block_reuse_frac"] = block_reuse_fraction(df[BLOCK_COLUMN])
    return stats


def _length_stats(values: np.ndarray, key: str) -> dict[str, float]:
    """mean / median / p99 of one length column (tokens)."""
    if values.size == 0:
        return {f"{key}_mean": float("nan"), f"{key}_median": float("nan"),
                f"{key}_p99": float("nan")}
    return {f"{key}_mean": float(values.mean()), f"{key}_median": float(np.median(values)),
            f"{key}_p99": float(np.percentile(values, 99))}


def block_reuse_fraction(block_ids: pd.Series) -> float:
    """Fraction of prompt blocks (in row order) whose id appeared in an earlier block."""
    parts = [np.asarray(b, dtype=np.int64) for b in block_ids]
    flat = np.concatenate(parts) if parts else np.empty(0, np.int64)
    if flat.size == 0:
        return float("nan")
    return 1.0 - np.unique(flat).size / flat.size

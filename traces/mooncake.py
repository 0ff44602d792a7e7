"""Loader for Mooncake traces (kvcache-ai/Mooncake FAST25-release, Apache-2.0).

Format: JSON lines `{"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}`.
Each hash id names one prompt block of `MOONCAKE_BLOCK_TOKENS` tokens (the loader sets
`block_tokens` to it); equal ids across requests are a shared prefix block. Arrivals become seconds
after the earliest timestamp (the first line, in the sorted public files), shifted exactly before
rounding (`traces.times`); `df.attrs["arrival_origin"]` keeps that earliest timestamp (ms).
Errors name the file and its 1-based line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sim.util.errors import TraceError
from traces.columns import BadCells, to_block_ids, to_token_counts
from traces.files import check_limit, existing_file, iter_jsonl
from traces.schema import require_rows, validate_trace
from traces.times import relative_seconds

MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id (prompt block)
MOONCAKE_KEYS: tuple[str, ...] = ("timestamp", "input_length", "output_length", "hash_ids")
MS_PER_S = 1000  # the timestamps are milliseconds


def load_mooncake(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """The trace at `path` in the schema, with `block_ids`; `limit` keeps the first records."""
    path = existing_file(path)
    check_limit(limit)
    raw, lines = read_records(path, limit)
    return mooncake_frame(raw, str(path), lines)


def read_records(path: Path, limit: int | None = None,
                 bad: list[TraceError] | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """The Mooncake keys of each record (object columns) and its 1-based file line. A line
    that is not a JSON object, or lacks a key, goes to `bad` when given, else raises."""
    source = str(path)
    columns: dict[str, list] = {key: [] for key in MOONCAKE_KEYS}
    lines: list[int] = []
    for lineno, obj in iter_jsonl(path, limit, fmt="mooncake", bad=bad):
        missing = [key for key in MOONCAKE_KEYS if key not in obj]
        if missing:
            err = BadCells(source, f"missing key {missing[0]!r} on line {lineno}",
                           why=f"missing key {missing[0]!r}", field=missing[0], rows=[lineno],
                           cells=[None])
            if bad is None:
                raise err
            bad.append(err)
            continue
        for key in MOONCAKE_KEYS:
            columns[key].append(obj[key])
        lines.append(lineno)
    raw = pd.DataFrame({key: pd.Series(vals, dtype=object) for key, vals in columns.items()})
    return raw, np.asarray(lines, dtype=np.int64)


def mooncake_frame(raw: pd.DataFrame, source: str, lines: np.ndarray) -> pd.DataFrame:
    """The records of `raw` (as `read_records` gives them) in the schema."""
    arrival, origin = relative_seconds(raw["timestamp"], source=source, field="timestamp",
                                       lines=lines, units_per_s=MS_PER_S)
    df = pd.DataFrame({
        "arrival_s": arrival,
        "prompt_tokens": to_token_counts(raw["input_length"], source=source,
                                         field="input_length", lines=lines),
        "output_tokens": to_token_counts(raw["output_length"], source=source,
                                         field="output_length", lines=lines),
        "block_ids": to_block_ids(raw["hash_ids"], source=source, field="hash_ids",
                                  lines=lines),
        "block_tokens": np.full(len(lines), MOONCAKE_BLOCK_TOKENS, dtype=np.int64),
    })
    out = require_rows(validate_trace(df, source, lines=lines), source)
    out.attrs["arrival_origin"] = origin
    return out

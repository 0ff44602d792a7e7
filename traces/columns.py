"""Column coercion with precise errors: each bad cell is reported by source, row, field and value.

`lines` (optional) maps a 0-based data row to the number reported as the error's row, e.g. the
1-based line of a file; without it the 0-based data row index is reported. A failed check raises
`BadCells`, a TraceError that names the first bad row and keeps them all.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.util.errors import TraceError

Lines = Sequence[int] | np.ndarray | None
MAX_ARRIVAL_S = 1e9  # seconds (~32 years); beyond it float64 times lose microsecond resolution
BLOCK_ID_RANGE = (-(2**63), 2**63 - 1)  # block ids are int64 (content hashes)


def row_label(i: int, lines: Lines) -> int:
    """The row number to report for data row `i`."""
    return int(lines[i]) if lines is not None else int(i)


def where_text(i: int, lines: Lines) -> str:
    """'line N' when file lines are known, else 'data row N'."""
    return f"line {row_label(i, lines)}" if lines is not None else f"data row {i}"


def is_missing(value: object) -> bool:
    """True for None, NaN / NaT and blank strings."""
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip() == ""
    if isinstance(value, float):
        return math.isnan(value)
    return value is pd.NaT or value is pd.NA


class BadCells(TraceError):
    """A check that some rows fail: the error names the first (row, field, value) as any
    TraceError does, and keeps every failing row and its cell, so a loader that skips bad rows
    (traces/skip_rows.py) drops them all at once."""

    def __init__(self, source: str, reason: str, *, why: str, field: str | None,
                 rows: Sequence[int], cells: Sequence[object]) -> None:
        super().__init__(source, reason, row=int(rows[0]), field=field, value=plain(cells[0]))
        self.why = why  # the reason without the row ("token count must be >= 1")
        self.rows = tuple(int(r) for r in rows)  # every failing row, as errors name rows
        self.cells = tuple(plain(c) for c in cells)  # their cells, in the same order


def bad_cells(source: str, field: str, values: pd.Series, bad: np.ndarray | Sequence[int],
              lines: Lines, why: str, counted: bool = True) -> BadCells:
    """BadCells for the data rows `bad` (non-empty) of `values`, named by `lines`; the message
    says where the first is (and how many fail, when `counted`)."""
    bad = np.atleast_1d(np.asarray(bad, dtype=np.int64))
    i = int(bad[0])
    count = f" ({count_rows(bad.size)})" if counted else ""
    labels = bad if lines is None else np.asarray(lines)[bad]
    return BadCells(source, f"{why} at {where_text(i, lines)}{count}", why=why, field=field,
                    rows=labels.tolist(), cells=values.iloc[bad].tolist())


def _fail(source: str, field: str, values: pd.Series, mask: np.ndarray, lines: Lines,
          reason: str) -> None:
    """Raise BadCells for the rows where mask is True (naming the first), if any."""
    bad = np.flatnonzero(mask)
    if bad.size:
        raise bad_cells(source, field, values, bad, lines, reason)


def count_rows(n: int) -> str:
    """'1 bad row' / 'N bad rows'."""
    return f"{n} bad row" if n == 1 else f"{n} bad rows"


def plain(value: object) -> object:
    """A numpy scalar as the equivalent Python value (for readable error messages)."""
    return value.item() if isinstance(value, np.generic) else value


def to_numeric(values: pd.Series, *, source: str, field: str, lines: Lines) -> np.ndarray:
    """float64 values; raises on missing, non-numeric or non-finite cells."""
    if pd.api.types.is_bool_dtype(values.dtype):
        _fail(source, field, values, np.ones(len(values), bool), lines, "must be a number")
    if pd.api.types.is_numeric_dtype(values.dtype):
        nums = values.to_numpy(dtype=np.float64, na_value=np.nan)
        missing = np.isnan(nums)
    else:
        missing = np.fromiter((is_missing(v) for v in values), bool, len(values))
        text = values.map(lambda v: v.strip() if isinstance(v, str) else v)
        nums = np.array([_to_float(v) for v in text], dtype=np.float64)
    _fail(source, field, values, missing, lines, "missing value")
    _fail(source, field, values, np.isnan(nums), lines, "not a number")
    _fail(source, field, values, ~np.isfinite(nums), lines, "not finite")
    return nums


def _to_float(value: object) -> float:
    """float(value) for numbers and numeric strings, NaN otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:  # an int too large for float64: reported as not finite
        return math.inf
    except (TypeError, ValueError):
        return math.nan


def to_token_counts(values: pd.Series, *, source: str, field: str, lines: Lines) -> np.ndarray:
    """int64 token counts >= 1; raises on non-integer, zero or negative cells."""
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iu":  # integers already:
        ints = values.to_numpy()  # the same checks, without a float copy and its rounding
        _fail(source, field, values, ints < 1, lines, "token count must be >= 1")
        _fail(source, field, values, ints > 2**53, lines, "token count too large")
        return ints.astype(np.int64)
    nums = to_numeric(values, source=source, field=field, lines=lines)
    _fail(source, field, values, nums != np.round(nums), lines, "not an integer")
    _fail(source, field, values, nums < 1, lines, "token count must be >= 1")
    _fail(source, field, values, nums > 2**53, lines, "token count too large")
    return nums.astype(np.int64)


def to_seconds(values: pd.Series, *, source: str, field: str, lines: Lines) -> np.ndarray:
    """float64 arrival times in [0, MAX_ARRIVAL_S] (seconds); raises on negative, non-finite or
    too large cells (the loaders shift files to start at 0, `traces.times`)."""
    nums = to_numeric(values, source=source, field=field, lines=lines)
    _fail(source, field, values, nums < 0, lines, "arrival time must be >= 0")
    _fail(source, field, values, nums > MAX_ARRIVAL_S, lines,
          f"arrival time over {MAX_ARRIVAL_S:g} s, where float64 cannot resolve microseconds; "
          f"shift times so the trace starts at 0")
    return nums


def to_strings(values: pd.Series) -> pd.Series:
    """object Series of str, with None for missing cells."""
    return pd.Series([None if is_missing(v) else str(v) for v in values],
                     index=values.index, dtype=object)


def to_block_ids(values: pd.Series, *, source: str, field: str, lines: Lines) -> pd.Series:
    """object Series of tuple[int, ...]; accepts lists, tuples, arrays and JSON list strings."""
    out = []
    low, high = BLOCK_ID_RANGE
    bad: dict[str, list[int]] = {}  # reason -> data rows
    for i, v in enumerate(values):
        blocks = _as_int_tuple(v)
        if blocks is None:
            bad.setdefault("expected a list of integer block ids", []).append(i)
        elif blocks and not low <= min(blocks) <= max(blocks) <= high:
            bad.setdefault("block ids must fit in int64", []).append(i)
        out.append(blocks)
    if bad:  # the reason of the first bad row, with every row that has it
        why, rows = min(bad.items(), key=lambda item: item[1][0])
        raise bad_cells(source, field, values, rows, lines, why)
    return pd.Series(out, index=values.index, dtype=object)


def _as_int_tuple(value: object) -> tuple[int, ...] | None:
    """tuple of ints from a sequence or JSON list string; None when impossible."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, np.ndarray):
        ok = value.ndim == 1 and (value.dtype.kind in "iu" or value.size == 0)
        return tuple(int(x) for x in value.tolist()) if ok else None
    if not isinstance(value, (list, tuple)):
        return None
    types = set(map(type, value))
    if types <= {int}:
        return tuple(value)
    ok = all(issubclass(t, (int, np.integer)) and not issubclass(t, (bool, np.bool_))
             for t in types)
    return tuple(int(x) for x in value) if ok else None

"""The optional request-class columns of a trace, coerced with precise errors (docs/classes.md).

- `class` (str): the request's class, 1-64 letters, digits, '_', '-', '.' or ':' (it names
  summary keys and table rows); an empty cell is no class (the `default` class in tables).
- `priority` (int64): lower is more important, as vLLM's priority; an empty cell is 0.
- `timeout_s` (float64 seconds > 0): the client gives up that long after arrival (the request is
  cancelled); an empty cell, `nan` and `inf` all mean no timeout (NaN in the frame, an infinite
  `timeout_s` on the request): CSV readers turn `nan` into an empty cell, so both spellings of
  "never gives up" are read alike. 0, negative numbers and other text are refused.

A bad cell raises `TraceError` naming the source, row, column and value.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from traces.columns import Lines, bad_cells, is_missing

CLASS_COLUMNS: tuple[str, ...] = ("class", "priority", "timeout_s")
CLASS_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
PRIORITY_RANGE = (-(2**31), 2**31 - 1)  # priorities are 32-bit ints (vLLM: any int)


def _fail(source: str, field: str, values: pd.Series, bad: list[int], lines: Lines,
          reason: str) -> None:
    """BadCells (a TraceError) naming the first bad row and keeping them all, if any."""
    if bad:
        raise bad_cells(source, field, values, bad, lines, reason)


def to_class_names(values: pd.Series, *, source: str, field: str, lines: Lines) -> pd.Series:
    """object Series of class names, None for empty cells."""
    out = [None if is_missing(v) else v.strip() if isinstance(v, str) else v for v in values]
    bad = [i for i, v in enumerate(out) if v is not None and not (isinstance(v, str)
                                                                 and CLASS_NAME.match(v))]
    _fail(source, field, values, bad, lines, "a class must be 1-64 letters, digits, '_', '-', "
                                             "'.' or ':'")
    return pd.Series(out, index=values.index, dtype=object)


def to_priorities(values: pd.Series, *, source: str, field: str, lines: Lines) -> np.ndarray:
    """int64 priorities (lower first), 0 for empty cells."""
    nums = [_integer(v) for v in values]
    bad = [i for i, n in enumerate(nums) if n is None]
    _fail(source, field, values, bad, lines, "a priority must be an integer (lower is more "
                                             "important)")
    low, high = PRIORITY_RANGE
    bad = [i for i, n in enumerate(nums) if not low <= n <= high]  # type: ignore[operator]
    _fail(source, field, values, bad, lines, f"a priority must lie in [{low}, {high}]")
    return np.asarray(nums, dtype=np.int64)


def _integer(value: object) -> int | None:
    """An int from an int, an integral float or integer text; 0 for a missing cell; None for
    anything else (bools included)."""
    if is_missing(value):
        return 0
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, str):
        value = value.strip()
        try:
            return int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and \
            float(value).is_integer():
        return int(value)
    return None


def to_timeouts(values: pd.Series, *, source: str, field: str, lines: Lines) -> np.ndarray:
    """float64 timeouts in seconds > 0; NaN (no timeout) for an empty cell, a NaN and an
    infinite timeout alike: a client that never gives up has none, however it is written."""
    nums = [_seconds(v) for v in values]
    bad = [i for i, n in enumerate(nums) if n is not None and not n > 0 and n == n]
    bad = sorted(bad + [i for i, n in enumerate(nums) if n is None and not is_missing(
        values.iloc[i])])
    _fail(source, field, values, bad, lines, "a timeout must be a number of seconds > 0 "
                                             "(empty, nan or inf: none)")
    return np.asarray([math.nan if n is None or not n < math.inf else n for n in nums],
                      dtype=np.float64)


def _seconds(value: object) -> float | None:
    """A float from a number or numeric text; None for missing cells and anything else."""
    if is_missing(value) or isinstance(value, (bool, np.bool_)):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None

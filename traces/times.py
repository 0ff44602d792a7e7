"""Arrival times as loaded: shifted so the earliest arrival is 0, without losing precision.

Trace files often hold absolute times (epoch seconds or milliseconds). float64 has 53 bits, so an
absolute time of 1e15 s is only resolved to 0.125 s, and every latency computed from it is wrong.
Loaders therefore subtract the earliest arrival *before* rounding to float64: integers are
subtracted exactly, decimal text (CSV cells, JSON numbers kept as `ExactFloat`) in decimal
arithmetic, and only the relative time is rounded. Values already stored as binary floats (Parquet,
pandas) are refused when float64 cannot resolve a microsecond at their magnitude, since their
precision was lost before the file was written. After the shift, a span longer than MAX_SPAN_S is
refused too (float64 would no longer resolve microseconds of simulated time).

Times of day without a date (a strftime pattern such as `%H:%M:%S`, `roll_midnights`) are read
in file order: a step back of more than 12 hours is a crossing of midnight, and that row and
the rows after it are a day later (an `UnsortedTraceWarning`-like `MidnightWarning` says where).
After a crossing, a step forward of more than 12 hours could be a long gap or a row logged
before the crossing: that is ambiguous, so it is a TraceError naming the row.
"""

from __future__ import annotations

import decimal
import warnings
from decimal import Decimal

import numpy as np
import pandas as pd

from traces.columns import MAX_ARRIVAL_S, Lines, bad_cells, to_numeric, where_text
from traces.files import ExactFloat

MAX_SPAN_S = MAX_ARRIVAL_S  # seconds (1e9, ~32 years); float64 resolves ~1.2e-7 s there
RESOLUTION_S = 1e-6  # seconds; the finest time step a trace's arrivals must keep
_EXACT = decimal.Context(prec=80)  # digits for exact differences of decimal times
DAY_NS = 86_400 * 10**9  # nanoseconds in a day
DATE_CODES = frozenset("dmjbBhyYGcxDFsUWV")  # strftime codes that set a date (not time of day)


class MidnightWarning(UserWarning):
    """Times of day without a date crossed midnight; later rows were moved to the next day."""


def time_of_day_only(pattern: str) -> bool:
    """Whether a strftime pattern has no code that sets a date (`%H:%M:%S`, `%I:%M %p`)."""
    codes, i = [], 0
    while i < len(pattern) - 1:
        if pattern[i] == "%":
            codes.append(pattern[i + 1])
            i += 2
        else:
            i += 1
    return not any(code in DATE_CODES for code in codes)


def roll_midnights(nanos: list[int], *, source: str, field: str, values: pd.Series,
                   lines: Lines) -> list[int]:
    """Times of day (nanoseconds, one date) in file order, each moved by the midnights crossed
    before it: a step back of more than 12 h is a crossing. TraceError at a step forward of
    more than 12 h after a crossing (a gap or a row logged out of order: ambiguous)."""
    out: list[int] = []
    day, crossed = 0, []
    for i, t in enumerate(nanos):
        at = t + day * DAY_NS
        if out and at < out[-1] - DAY_NS // 2:
            day, at = day + 1, at + DAY_NS
            crossed.append(i)
        elif out and day and at > out[-1] + DAY_NS // 2:
            _fail_at(source, field, values, lines, np.array([i]), (
                f"times of day without a date crossed midnight before this row, then jump "
                f"{(at - out[-1]) / 3.6e12:.1f} h forward: a long gap or a row logged before "
                f"midnight cannot be told apart; write dates in the timestamps"))
        out.append(at)
    if crossed:
        warnings.warn(f"{source}: times of day in {field!r} crossed midnight {len(crossed)} "
                      f"time(s), first at {where_text(crossed[0], lines)}; rows from there are "
                      f"read as the next day", MidnightWarning, stacklevel=3)
    return out


def relative_seconds(values: pd.Series, *, source: str, field: str, lines: Lines,
                     units_per_s: float = 1.0,
                     minimum: float | None = None) -> tuple[np.ndarray, float]:
    """Seconds after the earliest of `values` (given in 1 / units_per_s seconds) as float64,
    and that earliest value (in the file's units, rounded). TraceError names the row, field and
    value of a missing, non-numeric or non-finite cell, one below `minimum`, a binary float too
    large to resolve a microsecond, or a span over MAX_SPAN_S."""
    nums = to_numeric(values, source=source, field=field, lines=lines)
    if minimum is not None:
        _fail_at(source, field, values, lines, np.flatnonzero(nums < minimum),
                 f"must be >= {minimum:g}")
    if nums.size == 0:
        return nums, 0.0
    if pd.api.types.is_float_dtype(values.dtype):
        _check_float_resolution(values, nums, source, field, lines, units_per_s)
        rel = (nums - nums.min()) / units_per_s
    elif pd.api.types.is_integer_dtype(values.dtype):
        ints = [int(v) for v in values.tolist()]
        rel = _int_differences(ints, units_per_s)
    else:
        rel = _exact_differences(values, nums, source, field, lines, units_per_s)
    over = np.flatnonzero(rel > MAX_SPAN_S)
    _fail_at(source, field, values, lines, over[np.argmax(rel[over])] if over.size else over,
             f"arrival times span {rel.max():.6g} s after the first, over {MAX_SPAN_S:g} s: "
             f"float64 cannot resolve microseconds of simulated time")
    return rel, float(nums.min())


def _int_differences(ints: list[int], units_per_s: float) -> np.ndarray:
    """(v - min) / units_per_s, with exact integer differences and one rounding."""
    low = min(ints)
    if float(units_per_s).is_integer():
        scale = int(units_per_s)
        return np.array([(v - low) / scale for v in ints], dtype=np.float64)
    return np.array([(v - low) / units_per_s for v in ints], dtype=np.float64)


def _exact_differences(values: pd.Series, nums: np.ndarray, source: str, field: str,
                       lines: Lines, units_per_s: float) -> np.ndarray:
    """(v - min) / units_per_s from each cell's exact value, rounded once to float64."""
    exact = [_exact(v, x) for v, x in zip(values.tolist(), nums.tolist())]
    inexact = np.array([e is None for e in exact])
    if inexact.any():  # binary floats inside an object column: as precise as they came
        _check_float_resolution(values, np.where(inexact, nums, 0.0), source, field, lines,
                                units_per_s)
    cells = [Decimal(x) if e is None else e for e, x in zip(exact, nums.tolist())]
    low, unit = min(cells), Decimal(repr(float(units_per_s)))
    return np.array([float(_EXACT.divide(_EXACT.subtract(c, low), unit)) for c in cells],
                    dtype=np.float64)


def _exact(value: object, approx: float) -> Decimal | None:
    """The exact decimal value of a cell; None for a binary float (no exact text)."""
    if isinstance(value, ExactFloat):
        text: object = value.text
    elif isinstance(value, (int, np.integer)):
        return Decimal(int(value))
    elif isinstance(value, Decimal):
        return value
    elif isinstance(value, str):
        text = value.strip()
    else:
        return None
    try:
        exact = Decimal(str(text))
    except decimal.InvalidOperation:
        return Decimal(approx)
    return exact if exact.is_finite() else Decimal(approx)


def _check_float_resolution(values: pd.Series, nums: np.ndarray, source: str, field: str,
                            lines: Lines, units_per_s: float) -> None:
    """TraceError when float64 values are so large their spacing exceeds RESOLUTION_S."""
    spacing = np.spacing(np.abs(nums)) / units_per_s
    coarse = np.flatnonzero(spacing > RESOLUTION_S)
    if coarse.size:
        i = coarse[np.argmax(np.abs(nums[coarse]))]
        _fail_at(source, field, values, lines, np.array([i]),
                 f"stored as a binary float this large it is only resolved to "
                 f"{spacing[i]:.3g} s, coarser than {RESOLUTION_S:g} s; store times relative "
                 f"to the trace start, as integers, or as decimal text")


def _fail_at(source: str, field: str, values: pd.Series, lines: Lines, rows: np.ndarray,
             reason: str) -> None:
    """BadCells (a TraceError) at the first of `rows` (a scalar or array of data rows),
    keeping them all, if any."""
    rows = np.atleast_1d(rows)
    if rows.size:
        raise bad_cells(source, field, values, rows, lines, reason, counted=False)

"""Reading and checking one measured-profile CSV (Vidur's per-operator layout or real.profile's).

Every problem is a `TraceError` naming the file, and the row, column and value where there is
one: an empty file, a missing column, a non-numeric, negative or non-finite cell.

Unknown columns: a `time_stats.<op>.*` column of an op this project does not know is WARNED
about (`ProfileWarning`) and ignored — it is time a layer may spend that no stage sums; any other
unknown column (Vidur's bookkeeping such as `rank`, `collective`, pandas' index column) is
ignored silently.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from sim.util.errors import TraceError

MS = 1e-3  # seconds per millisecond (Vidur's time_stats are milliseconds)
STAT_RE = re.compile(r"^time_stats\.(?P<op>[A-Za-z0-9_]+)\.(?P<stat>[A-Za-z0-9_]+)$")
TRUE_STRINGS = frozenset({"true", "1", "1.0", "yes"})  # is_prefill cells read as True
FALSE_STRINGS = frozenset({"false", "0", "0.0", "no"})  # is_prefill cells read as False


class ProfileWarning(UserWarning):
    """A profile column was ignored (an op no stage knows)."""


def read_profile_csv(path: Path) -> pd.DataFrame:
    """The CSV as a DataFrame; TraceError if it is missing, unreadable or empty."""
    if not path.is_file():
        raise TraceError(str(path), "profile file not found")
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise TraceError(str(path), "empty file: no header and no rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise TraceError(str(path), f"not a readable CSV: {exc}") from None
    if frame.empty:
        raise TraceError(str(path), "empty file: a header but no rows")
    return frame


def stat_column(op: str, stat: str = "median") -> str:
    """Vidur's column name for one statistic of one op, e.g. time_stats.add.median."""
    return f"time_stats.{op}.{stat}"


def require_columns(frame: pd.DataFrame, columns: Iterable[str], path: Path,
                    what: str) -> None:
    """TraceError naming the first missing column and the columns present."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        present = ", ".join(map(str, frame.columns[:40]))
        raise TraceError(str(path), f"missing {what} column(s) {', '.join(missing)}; "
                         f"columns present: {present}", field=missing[0], value=None)


def warn_unknown_ops(frame: pd.DataFrame, known_ops: Iterable[str], path: Path) -> list[str]:
    """Ops with time_stats columns that are not in `known_ops` (warned once per file)."""
    known = set(known_ops)
    unknown = sorted({m["op"] for c in frame.columns if (m := STAT_RE.match(str(c)))
                      and m["op"] not in known})
    if unknown:
        warnings.warn(f"{path}: ignoring time_stats of unknown op(s) {', '.join(unknown)} "
                      f"(no stage sums them)", ProfileWarning, stacklevel=3)
    return unknown


def numeric_column(frame: pd.DataFrame, column: str, path: Path, *, allow_nan: bool = False,
                   rows: np.ndarray | None = None) -> np.ndarray:
    """`column` as float64; TraceError at the first non-numeric, negative or NaN cell (NaN
    allowed with allow_nan; only `rows`, a boolean mask, are checked when given)."""
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    check = np.ones(len(values), dtype=bool) if rows is None else rows
    bad_text = check & np.isnan(values) & raw.notna().to_numpy()
    bad = bad_text | (check & ~allow_nan & np.isnan(values)) | (check & (values < 0))
    bad |= check & np.isinf(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        reason = ("not a number" if bad_text[i] else "missing" if np.isnan(values[i])
                  else "must be finite and >= 0")
        raise TraceError(str(path), reason, row=i + 2, field=column, value=raw.iloc[i])
    return values


def bool_column(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """True/False cells (also 1/0) as a bool array; TraceError naming the first other one."""
    out = np.empty(len(frame), dtype=bool)
    for i, cell in enumerate(frame[column].tolist()):
        text = str(cell).strip().lower()
        if text in TRUE_STRINGS:
            out[i] = True
        elif text in FALSE_STRINGS:
            out[i] = False
        else:
            raise TraceError(str(path), "must be True or False", row=i + 2, field=column,
                             value=cell)
    return out


def integer_column(frame: pd.DataFrame, column: str, path: Path,
                   default: int | None = None) -> np.ndarray:
    """A non-negative whole-number column as int64 (`default` where the column is absent)."""
    if column not in frame.columns and default is not None:
        return np.full(len(frame), default, dtype=np.int64)
    values = numeric_column(frame, column, path)
    frac = values != np.round(values)
    if frac.any():
        i = int(np.flatnonzero(frac)[0])
        raise TraceError(str(path), "must be a whole number", row=i + 2, field=column,
                         value=frame[column].iloc[i])
    return values.astype(np.int64)


def median_by(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Repeated measurements of one shape collapsed to their median, sorted by `keys`."""
    return (frame.groupby(list(keys), as_index=False, sort=True).median(numeric_only=True)
            .reset_index(drop=True))

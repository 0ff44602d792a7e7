"""A trace's rows as Requests: the columns requests read, and one Request per row.

`trace_columns` checks and extracts a trace DataFrame's columns once (arrival / prompt / output
arrays, the optional per-row columns as lists, None when absent); `request_from_row` builds row
`i`'s Request from them, class fields included when the trace has them. `requests_from_trace`
builds them all (`sim.engine.request_source.TraceRequests` builds them lazily, one at a time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.core.request import CLASS_FIELDS, MAX_ARRIVAL_S, Request

if TYPE_CHECKING:
    import pandas as pd


def requests_from_trace(trace: "pd.DataFrame") -> list[Request]:
    """Requests for every row of a trace DataFrame (schema of `traces.schema`); ids = row order.
    The engine builds them lazily instead (sim/engine/request_source.py: TraceRequests)."""
    cols = trace_columns(trace)
    return [request_from_row(cols, i) for i in range(len(trace))]


OPTIONAL = ("text", "app", "session_id", "block_ids", "block_tokens", "lora_id",
            *(column for column, _ in CLASS_FIELDS))  # optional trace columns


def trace_columns(trace: "pd.DataFrame") -> dict[str, np.ndarray | list | None]:
    """A trace's columns as requests read them: arrival / prompt / output arrays (arrivals
    checked), the optional per-row columns as lists (None when absent)."""
    arrival = trace["arrival_s"].to_numpy(dtype=np.float64)
    if len(arrival) and not float(np.max(np.abs(arrival))) <= MAX_ARRIVAL_S:
        row = int(np.argmax(~(np.abs(arrival) <= MAX_ARRIVAL_S)))
        raise ValueError(f"trace row {row}: arrival_s={float(arrival[row])!r} is not a time "
                         f"in seconds from the trace's start within {MAX_ARRIVAL_S:g} s "
                         f"(float64 keeps microseconds only there): shift arrivals so the "
                         f"trace starts at 0")
    out: dict[str, np.ndarray | list | None] = {
        "arrival_s": arrival, "prompt_tokens": trace["prompt_tokens"].to_numpy(dtype=np.int64),
        "output_tokens": trace["output_tokens"].to_numpy(dtype=np.int64)}
    for name in OPTIONAL:
        out[name] = trace[name].tolist() if name in trace.columns else None
    out["class_columns"] = class_columns(out)
    return out


def class_columns(cols: dict) -> tuple[str, ...]:
    """The class columns (CLASS_FIELDS) a trace's `trace_columns` has: those its records get."""
    return tuple(column for column, _ in CLASS_FIELDS if cols.get(column) is not None)


def request_from_row(cols: dict, i: int) -> Request:
    """The Request of row `i` of `trace_columns`."""
    text, app, session = cols["text"], cols["app"], cols["session_id"]
    blocks, granule = cols["block_ids"], cols["block_tokens"]
    r = Request(
        i, float(cols["arrival_s"][i]), int(cols["prompt_tokens"][i]),
        int(cols["output_tokens"][i]),
        text=None if text is None else text[i],
        app=None if app is None else app[i],
        session_id=None if session is None else (None if session[i] is None
                                                 else str(session[i])),
        block_ids=None if blocks is None else tuple(int(b) for b in blocks[i]),
        block_tokens=None if granule is None else _optional_int(granule[i]))
    if cols.get("class_columns"):
        _set_class_fields(r, cols, i)
    lora = cols.get("lora_id")
    if lora is not None and not _missing(lora[i]):
        r.lora_id = int(lora[i])  # type: ignore[arg-type]
    return r


def _set_class_fields(r: Request, cols: dict, i: int) -> None:
    """`r`'s fields from row `i`'s class columns (a missing cell keeps the default: no class,
    priority 0, no timeout)."""
    name, priority, timeout = cols.get("class"), cols.get("priority"), cols.get("timeout_s")
    if name is not None and not _missing(name[i]):
        r.request_class = str(name[i])
    if priority is not None and not _missing(priority[i]):
        r.priority = int(priority[i])  # type: ignore[arg-type]
    if timeout is not None and not _missing(timeout[i]):
        value = float(timeout[i])  # type: ignore[arg-type]
        if not value > 0:
            raise ValueError(f"request {i}: timeout_s={value!r} must be > 0 seconds")
        r.timeout_s = value


def _missing(value: object) -> bool:
    """None or NaN."""
    return value is None or value != value


def _optional_int(value: object) -> int | None:
    """An int, or None for a missing cell (None / NaN)."""
    return None if value is None or value != value else int(value)  # type: ignore[arg-type]

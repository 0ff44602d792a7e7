"""A trace's requests built lazily: one `Request` when the arrival process reaches its row.

`requests_from_trace` (sim/engine/trace_rows.py) builds every request up front; a million-request trace
then holds a million objects before the first step. `TraceRequests` keeps the trace's columns
(`trace_columns`) and builds request `i` only when asked (`request_from_row`, the same values),
so the engine holds only the requests in flight. `ListRequests` puts a built list behind the
same interface (tests and callers that read the objects afterwards).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence, Union

from sim.core.request import Request
from sim.engine.trace_rows import OPTIONAL, request_from_row, trace_columns

if TYPE_CHECKING:
    import pandas as pd


CHUNK = 1 << 16  # rows whose arrival, prompt and output values are held as Python lists


class TraceRequests:
    """Requests for every row of a trace DataFrame, built one at a time; ids = row order.

    Rows are read in order, so the three numeric columns are converted to Python values one
    chunk of CHUNK rows at a time (the same values `request_from_row` reads, without a numpy
    scalar per field)."""

    def __init__(self, trace: "pd.DataFrame") -> None:
        self.columns = trace_columns(trace)  # arrays and optional per-row lists
        self._arrival = self.columns["arrival_s"]  # seconds, one per row
        cols = self.columns
        self._plain = all(cols[name] is None for name in OPTIONAL)  # only the three numbers
        self._start = -1  # first row of the chunk held as lists (-1: none yet)
        self._chunk: tuple[list[float], list[int], list[int]] = ([], [], [])

    def __len__(self) -> int:
        return len(self._arrival)

    @property
    def has_timeouts(self) -> bool:
        """Whether the trace has a timeout_s column (client timeouts, sim/engine/timeouts.py)."""
        return self.columns.get("timeout_s") is not None

    def arrival_s(self, i: int) -> float:
        """Trace arrival time of row `i` (seconds)."""
        j = i - self._start
        if 0 <= j < CHUNK and self._start >= 0:
            return self._chunk[0][j]
        return float(self._arrival[i])

    def request(self, i: int) -> Request:
        """A new Request for row `i`."""
        if not self._plain:
            return request_from_row(self.columns, i)
        j = i - self._start
        if not (0 <= j < CHUNK and self._start >= 0):
            self._load(i)
            j = 0
        arrival, prompt, output = self._chunk
        return Request(i, arrival[j], prompt[j], output[j])

    def _load(self, i: int) -> None:
        """Hold rows i .. i + CHUNK - 1 as Python lists."""
        end, cols = i + CHUNK, self.columns
        self._start = i
        self._chunk = (self._arrival[i:end].tolist(), cols["prompt_tokens"][i:end].tolist(),
                       cols["output_tokens"][i:end].tolist())


class ListRequests:
    """Requests already built (a list sorted by arrival), behind the same interface."""

    def __init__(self, requests: Sequence[Request]) -> None:
        self.requests = requests  # the caller's objects, updated in place

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def has_timeouts(self) -> bool:
        """Whether any request has a finite timeout_s (client timeouts, sim/engine/timeouts.py)."""
        return any(r.timeout_s != math.inf for r in self.requests)

    def arrival_s(self, i: int) -> float:
        """Arrival time of request `i` (seconds)."""
        return self.requests[i].arrival_s

    def request(self, i: int) -> Request:
        """Request `i` itself."""
        return self.requests[i]


RequestSource = Union[TraceRequests, ListRequests]  # what the arrival process reads


def as_source(requests: Sequence[Request] | RequestSource) -> RequestSource:
    """`requests` as a RequestSource (a list is wrapped, a source kept)."""
    if isinstance(requests, (TraceRequests, ListRequests)):
        return requests
    return ListRequests(requests)

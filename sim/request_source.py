"""A trace's requests built lazily: one `Request` when the arrival process reaches its row.

`requests_from_trace` (sim/request.py) builds every request up front; a million-request trace
then holds a million objects before the first step. `TraceRequests` keeps the trace's columns
(`trace_columns`) and builds request `i` only when asked (`request_from_row`, the same values),
so the engine holds only the requests in flight. `ListRequests` puts a built list behind the
same interface (tests and callers that read the objects afterwards).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence, Union

from sim.request import Request, request_from_row, trace_columns

if TYPE_CHECKING:
    import pandas as pd


class TraceRequests:
    """Requests for every row of a trace DataFrame, built one at a time; ids = row order."""

    def __init__(self, trace: "pd.DataFrame") -> None:
        self.columns = trace_columns(trace)  # arrays and optional per-row lists
        self._arrival = self.columns["arrival_s"]  # seconds, one per row

    def __len__(self) -> int:
        return len(self._arrival)

    @property
    def has_timeouts(self) -> bool:
        """Whether the trace has a timeout_s column (client timeouts, sim/timeouts.py)."""
        return self.columns.get("timeout_s") is not None

    def arrival_s(self, i: int) -> float:
        """Trace arrival time of row `i` (seconds)."""
        return float(self._arrival[i])

    def request(self, i: int) -> Request:
        """A new Request for row `i`."""
        return request_from_row(self.columns, i)


class ListRequests:
    """Requests already built (a list sorted by arrival), behind the same interface."""

    def __init__(self, requests: Sequence[Request]) -> None:
        self.requests = requests  # the caller's objects, updated in place

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def has_timeouts(self) -> bool:
        """Whether any request has a finite timeout_s (client timeouts, sim/timeouts.py)."""
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

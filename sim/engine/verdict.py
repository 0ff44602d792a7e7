"""Stopping a run once its SLO verdict is certain: a capacity probe that already fails.

DistServe's attainment form (sim/metrics/slo.py) judges a probe on its measured requests (those
arriving in the steady-state window, sim/metrics/steady.py): it fails when fewer than
`attainment` of them are good. A measured request is certainly not good once it is final and
not finished (rejected, failed, cancelled), once its first token came later than `ttft_s` after
its arrival, or, still waiting for its first token, once more than `ttft_s` has passed (the
same for `e2e_s` and its finish). A serving frontend (`frontend_s`) only adds to both, so a
miss here is a miss in the judged records. `SloWatch` counts those misses as the run goes, at
every final request and every `check_s` simulated seconds over the live ones, and raises
`VerdictReached` as soon as even every other measured request being good could not reach the
target: (measured - misses) / measured < attainment, the judge's own comparison. The run then
stops; what it measured so far is not a run's result (experiments/capacity/probe.py keeps the
verdict and the count, nothing else).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping

from sim.core.request import Request, RequestStatus


class VerdictReached(Exception):
    """The watched run's SLO verdict (a miss) became certain before its end."""

    def __init__(self, reason: str, now_s: float) -> None:
        super().__init__(reason, now_s)  # both in args: SimPy re-raises a copy made from them
        self.reason = reason  # why it misses, with the counts
        self.now_s = now_s  # simulated seconds when it became certain

    def __str__(self) -> str:
        return self.reason


class SloWatch:
    """Counts the measured requests certain to miss an attainment-form SLO."""

    def __init__(self, start_s: float, end_s: float, num_measured: int, attainment: float,
                 ttft_s: float | None = None, e2e_s: float | None = None,
                 check_s: float = 1.0) -> None:
        self.start_s, self.end_s = start_s, end_s  # measured arrivals: [start_s, end_s)
        self.num_measured = num_measured  # requests arriving in the window
        self.attainment = attainment  # fraction that must be good
        self.ttft_s = ttft_s  # seconds: bound on each request's TTFT (None: unbounded)
        self.e2e_s = e2e_s  # seconds: bound on each request's E2E latency (None: unbounded)
        self.check_s = check_s  # simulated seconds between looks at the live requests
        self.missed: set[int] = set()  # ids of measured requests certain to miss

    def _measured(self, r: Request) -> bool:
        return self.start_s <= r.arrival_s < self.end_s

    def _final_miss(self, r: Request) -> bool:
        if r.status is not RequestStatus.FINISHED:
            return True
        if self.ttft_s is not None and r.first_token_s - r.arrival_s > self.ttft_s:
            return True
        return self.e2e_s is not None and r.finish_s - r.arrival_s > self.e2e_s

    def _late(self, r: Request, now: float) -> bool:
        waited = now - r.arrival_s
        if self.ttft_s is not None and math.isnan(r.first_token_s) and waited > self.ttft_s:
            return True
        return self.e2e_s is not None and waited > self.e2e_s

    def on_final(self, requests: Iterable[Request], now: float) -> None:
        """Requests that reached a final state at `now`."""
        for r in requests:
            if r.request_id not in self.missed and self._measured(r) and self._final_miss(r):
                self.missed.add(r.request_id)
        self._check(now)

    def look(self, live: Mapping[int, Request], now: float) -> None:
        """The live requests at `now`: those already too late."""
        for r in live.values():
            if r.request_id not in self.missed and self._measured(r) and self._late(r, now):
                self.missed.add(r.request_id)
        self._check(now)

    def process(self, env, live: Mapping[int, Request], running: Callable[[], bool]):
        """A SimPy process looking at the live requests every `check_s` seconds while
        `running()` (requests are left)."""
        while running():
            yield env.timeout(self.check_s)
            self.look(live, env.now)

    def _check(self, now: float) -> None:
        n, misses = self.num_measured, len(self.missed)
        if n and (n - misses) / n < self.attainment:
            raise VerdictReached(f"{misses} of {n} measured requests already miss the SLO "
                                 f"(at most {(n - misses) / n:.4f} < {self.attainment} can be "
                                 f"good), stopped at {now:.4g} s", now)

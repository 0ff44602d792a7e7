"""Client timeouts: a request whose client gives up `timeout_s` after arrival is cancelled.

The engine (sim/engine/simulation.py) keeps one `Timeouts` per run whose workload has timeouts. It holds a
heap of deadlines (arrival + timeout_s) of the admitted requests and a SimPy process that wakes at
each deadline. A request that is queued, or admitted but not in a step now running, is cancelled
at its deadline exactly: the policy removes it and frees its KV (`Policy.cancel`), then the
request is marked cancelled with reason `client_timeout` (`Request.cancel`: the tokens it computed
count as padding, so tokens stay conserved). A request inside a running step is cancelled when
that step ends, unless the step finished it, as an engine aborts a request between steps.

Jumps over decode runs stay exact: a serve loop cuts its step at the first iteration ending at
or past the next deadline, as it does at the next arrival (`until`), so the policy sees each
cancellation at the same iteration boundary as when stepping one iteration at a time.
"""

from __future__ import annotations

import heapq
import math
from typing import Callable

import simpy

from sim.core.executor import Step
from sim.core.request import Request, RequestStatus
from sim.engine.policy import Policy


class Timeouts:
    """Deadlines of the admitted requests with a timeout, and their cancellation."""

    def __init__(self, env: simpy.Environment, policy: Policy,
                 retire: Callable[[list[Request], float], None]) -> None:
        self.env = env
        self.policy = policy
        self.retire = retire  # records requests the process cancelled (events, records, counts)
        self._heap: list[tuple[float, int, Request]] = []  # (deadline s, request id, request)
        self._due: list[Request] = []  # past their deadline while in a running step
        self._stepping: dict[int, Step] = {}  # instance -> the step it runs now
        self._wake: simpy.Event | None = None  # succeeds when an earlier deadline is added
        self.num_cancelled = 0  # requests cancelled so far

    # ---- the serve loops' side ----------------------------------------------------------
    def add(self, request: Request) -> None:
        """Watch an admitted request's deadline (none when its timeout is infinite)."""
        if request.timeout_s == math.inf:
            return
        heapq.heappush(self._heap, (request.deadline_s, request.request_id, request))
        wake = self._wake
        if self._heap[0][2] is request and wake is not None and not wake.triggered:
            wake.succeed()

    def until(self, instance_id: int, step: Step, next_arrival_s: float, now: float) -> float:
        """Seconds from `now` at which the step must stop (next arrival or deadline) for a
        step that may be cut; notes that the instance runs `step`."""
        self._stepping[instance_id] = step
        if not step.stop_on_arrival:
            return math.inf
        return min(next_arrival_s, self.next_s) - now

    def after_step(self, instance_id: int, done: list[Request], now: float) -> list[Request]:
        """The instance's step ended (its result applied): `done` plus the requests cancelled
        now (those whose deadline passed, in that step or queued)."""
        self._stepping.pop(instance_id, None)
        cancelled = self.expire(now)
        return [*done, *cancelled] if cancelled else done

    @property
    def next_s(self) -> float:
        """The next deadline of a request not yet final (seconds; inf: none)."""
        heap = self._heap
        while heap and heap[0][2].is_finished:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    # ---- cancellation ---------------------------------------------------------------------
    def expire(self, now: float) -> list[Request]:
        """Cancel every request whose deadline is at or before `now` and that is not in a
        running step; returns them (the others wait for their step's end)."""
        due, self._due = self._due, []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due.append(heapq.heappop(heap)[2])
        cancelled = []
        for r in due:
            if r.is_finished:
                continue
            if self._in_step(r):
                self._due.append(r)
                continue
            where = "running" if r.status is RequestStatus.RUNNING else "queued"
            self.policy.cancel(r, now)
            r.cancel(now, f"client gave up {r.timeout_s:g} s after arrival ({where}, "
                          f"{r.num_output_tokens} of {r.target_output_tokens} output tokens)")
            cancelled.append(r)
        self.num_cancelled += len(cancelled)
        return cancelled

    def _in_step(self, r: Request) -> bool:
        """Whether `r` is part of a step running now."""
        step = self._stepping.get(r.instance_id)
        return step is not None and r.request_id in step.request_ids

    def process(self):
        """SimPy process: cancel requests at their deadlines."""
        env = self.env
        while True:
            at = self.next_s
            if at > env.now:
                self._wake = env.event()
                yield self._wake if at == math.inf else self._wake | env.timeout(at - env.now)
                continue
            cancelled = self.expire(env.now)
            if cancelled:
                self.retire(cancelled, env.now)

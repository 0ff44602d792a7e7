"""Admission control: reject arriving requests a gateway would turn away, each with a reason.

Three limits, every one optional, checked on arrival before the policy sees the request (after
the context limit, sim/engine/limits.py):

- **token bucket** (`rate_per_s`, `burst`): the bucket holds `burst` requests (default: the
  rate, at least 1), refills at `rate_per_s`, and each admitted request takes one; a request
  finding less than one is rejected with reason `admission_rate`.
- **queue length** (`max_waiting`): requests waiting in the system (admitted, not running: new
  or preempted) at most; one more is rejected with `queue_full`.
- **predicted wait** (`max_predicted_wait_s`): the waiting requests divided by the recent
  completion rate (requests finished in the last `window_s` seconds, or since the first arrival
  when that is shorter) is the predicted queueing delay; over the limit, `predicted_wait`. With
  no completion in the window there is no estimate and this limit admits.

`classes` gives limits per request class (the workload's `class` column): they count that class
only (its own bucket, its waiting requests, its completions) and apply on top of the global
limits. Class limits are checked first; the first limit exceeded names the reason. A request
only takes its tokens once the policy has accepted it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

from sim.core.request import (ADMISSION_RATE, PREDICTED_WAIT, QUEUE_FULL, Request, RequestStatus)
from sim.util.errors import ConfigError

DEFAULT_WINDOW_S = 10.0  # seconds of completions the predicted wait reads


@dataclass(frozen=True)
class AdmissionLimits:
    """One scope's limits (global, or one class); None: no such limit."""

    rate_per_s: float | None = None  # requests per second the token bucket refills
    burst: float | None = None  # requests the bucket holds (default: rate_per_s, at least 1)
    max_waiting: int | None = None  # requests waiting (admitted, not running) at most
    max_predicted_wait_s: float | None = None  # seconds of predicted queueing delay at most

    def __post_init__(self) -> None:
        for name in ("rate_per_s", "burst", "max_predicted_wait_s"):
            _check_number(name, getattr(self, name))
        if self.burst is not None and self.rate_per_s is None:
            raise ConfigError("burst", self.burst, "needs rate_per_s (the bucket's refill)")
        if self.burst is not None and self.burst < 1:
            raise ConfigError("burst", self.burst, "must be >= 1 request (one admission)")
        value = self.max_waiting
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ConfigError("max_waiting", value, "must be an int >= 0 (requests)")

    @property
    def bucket_size(self) -> float:
        """Requests the token bucket holds."""
        assert self.rate_per_s is not None
        return self.burst if self.burst is not None else max(1.0, self.rate_per_s)

    def is_empty(self) -> bool:
        """Whether no limit is set."""
        return (self.rate_per_s is None and self.max_waiting is None
                and self.max_predicted_wait_s is None)


@dataclass(frozen=True)
class AdmissionConfig(AdmissionLimits):
    """The run's admission control: global limits, per-class limits, the completion window."""

    window_s: float = DEFAULT_WINDOW_S  # seconds of recent completions for the predicted wait
    classes: Mapping[str, AdmissionLimits] = field(default_factory=dict)  # class -> limits

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("window_s", self.window_s)
        for name, limits in self.classes.items():
            if not isinstance(limits, AdmissionLimits):
                raise ConfigError(f"classes.{name}", limits, "must be a mapping of limits")
        if self.is_empty() and not any(not c.is_empty() for c in self.classes.values()):
            raise ConfigError("admission", {}, "set at least one limit: rate_per_s, "
                              "max_waiting or max_predicted_wait_s (globally or per class)")


def _check_number(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 < value < math.inf:
        raise ConfigError(name, value, "must be a number > 0")


class _Scope:
    """One scope's live state: its bucket, waiting count and recent completions."""

    def __init__(self, name: str, limits: AdmissionLimits) -> None:
        self.name = name  # "" for the global scope, else the class
        self.limits = limits
        self.tokens = limits.bucket_size if limits.rate_per_s is not None else 0.0  # requests
        self.refilled_s = 0.0  # seconds: time the bucket was last refilled
        self.num_waiting = 0  # requests waiting, counted at the latest check
        self.completions: deque[float] = deque()  # finish times in the window, seconds

    def refill(self, now: float) -> None:
        rate = self.limits.rate_per_s
        if rate is not None:
            self.tokens = min(self.limits.bucket_size,
                              self.tokens + rate * (now - self.refilled_s))
            self.refilled_s = now

    def over(self, now: float, start_s: float, window_s: float) -> tuple[str, str] | None:
        """(reason code, detail) of the first limit one more request would exceed."""
        lim, where = self.limits, f" of class {self.name!r}" if self.name else ""
        if lim.rate_per_s is not None and self.tokens < 1:
            return ADMISSION_RATE, (f"token bucket{where} holds {self.tokens:.3g} < 1 request "
                                    f"(rate_per_s={lim.rate_per_s:g}, burst="
                                    f"{lim.bucket_size:g})")
        if lim.max_waiting is not None and self.num_waiting >= lim.max_waiting:
            return QUEUE_FULL, (f"{self.num_waiting} requests{where} waiting >= max_waiting="
                                f"{lim.max_waiting}")
        bound = lim.max_predicted_wait_s
        span = min(window_s, now - start_s)
        if bound is not None and self.completions and span > 0:
            wait = self.num_waiting / (len(self.completions) / span)
            if wait > bound:
                return PREDICTED_WAIT, (
                    f"predicted wait{where} {wait:.3g} s ({self.num_waiting} waiting, "
                    f"{len(self.completions)} finished in the last {span:.3g} s) > "
                    f"max_predicted_wait_s={bound:g}")
        return None


class AdmissionControl:
    """Checks arrivals against an AdmissionConfig; one per run."""

    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config
        self.scopes = {"": _Scope("", config)} if not config.is_empty() else {}
        self.scopes.update({name: _Scope(name, limits) for name, limits in
                            config.classes.items() if not limits.is_empty()})
        self.admitted_requests: list[Request] = []  # admitted, not final at the latest check
        self.start_s: float | None = None  # seconds: the first arrival

    def check(self, request: Request, now: float) -> bool:
        """Whether `request` may enter; if not it is rejected with its reason and detail."""
        if self.start_s is None:
            self.start_s = now
            for scope in self.scopes.values():
                scope.refilled_s = now
        self._sweep(now)
        for scope in self._scopes_of(request):
            scope.refill(now)
            over = scope.over(now, self.start_s, self.config.window_s)
            if over is not None:
                code, detail = over
                request.reject(now, detail, code)
                return False
        return True

    def admitted(self, request: Request) -> None:
        """The policy accepted `request`: it takes a token in each of its scopes' buckets."""
        for scope in self._scopes_of(request):
            if scope.limits.rate_per_s is not None:
                scope.tokens -= 1
        self.admitted_requests.append(request)

    def _scopes_of(self, request: Request) -> list[_Scope]:
        """The class scope (if it has limits) first, then the global one (if any)."""
        scopes = self.scopes
        own = scopes.get(request.request_class) if request.request_class else None
        found = [own] if own is not None else []
        return found + [scopes[""]] if "" in scopes else found

    def _sweep(self, now: float) -> None:
        """Recount waiting requests and recent completions from the admitted requests."""
        for scope in self.scopes.values():
            scope.num_waiting = 0
        live = []
        finished = sorted((r for r in self.admitted_requests
                           if r.status is RequestStatus.FINISHED), key=lambda r: r.finish_s)
        for r in finished:  # after the previous sweep's, so each deque stays in time order
            for scope in self._scopes_of(r):
                scope.completions.append(r.finish_s)
        for r in self.admitted_requests:
            if not r.is_finished:
                live.append(r)
                if r.status is RequestStatus.WAITING:
                    for scope in self._scopes_of(r):
                        scope.num_waiting += 1
        self.admitted_requests = live
        horizon = now - self.config.window_s
        for scope in self.scopes.values():
            times = scope.completions
            while times and times[0] <= horizon:
                times.popleft()

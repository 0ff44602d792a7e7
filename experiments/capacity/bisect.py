"""The rate search of a capacity search: doubling from a first rate, then bisection.

`RateSearch` is the search as a state machine, so that a driver can run many searches (one per
policy and seed) side by side in a process pool: `next_rates(k)` hands out the rates to probe,
`record(results)` takes their outcomes. In the doubling phase it may hand out up to k rates at
once (the next doublings, a lookahead for idle workers); their outcomes are applied in order and
those past the first failing rate are dropped, so the result never depends on k.
`search_capacity(meets, config)` runs one search sequentially.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from sim.util.errors import ConfigError, check_positive


@dataclass(frozen=True)
class SearchConfig:
    """How the rate is searched."""

    min_rate: float = 0.25  # req/s: the first probe; doubled while the SLO holds
    max_rate: float = 1024.0  # req/s: the search stops here even if the SLO still holds
    rel_tol: float = 0.05  # stop when (first failing - last passing) <= rel_tol * first failing
    max_probes: int = 24  # simulated rates per search (at most)

    def __post_init__(self) -> None:
        check_positive("min_rate", self.min_rate)
        if not (self.min_rate <= self.max_rate < math.inf):
            raise ConfigError("max_rate", self.max_rate, "must be finite and >= min_rate")
        if not 0 < self.rel_tol < 1:
            raise ConfigError("rel_tol", self.rel_tol, "must be in (0, 1)")
        check_positive("max_probes", self.max_probes)


@dataclass
class Capacity:
    """One search's result: the highest passing rate and the bracket's failing end."""

    capacity_rps: float  # req/s: highest probed rate meeting the SLO (0 if none did)
    failing_rps: float  # req/s: lowest probed rate missing it (inf if none did)
    probes: list[tuple[float, bool]] = field(default_factory=list)  # (rate, met) in probe order


class RateSearch:
    """Doubling from `min_rate` while the SLO holds, then bisection to `rel_tol`."""

    def __init__(self, config: SearchConfig) -> None:
        self.config = config  # the search's bounds and tolerance
        self.result = Capacity(0.0, math.inf)  # grows as outcomes are recorded
        self._next: float = config.min_rate  # req/s: the next doubling rate
        self._doubling = True  # still in the doubling phase

    @property
    def done(self) -> bool:
        return not self.next_rates(1)

    def next_rates(self, k: int = 1) -> list[float]:
        """The rates to probe next: up to `k` in the doubling phase, else at most one; []
        when the search is over."""
        left = self.config.max_probes - len(self.result.probes)
        if left <= 0:
            return []
        if self._doubling:
            rates: list[float] = []
            rate: float | None = self._next
            while rate is not None and len(rates) < min(k, left):
                rates.append(rate)
                rate = None if rate >= self.config.max_rate else \
                    min(2 * rate, self.config.max_rate)
            return rates
        low, high = self.result.capacity_rps, self.result.failing_rps
        if low == 0.0:
            return []  # even min_rate misses the SLO: capacity is below it (not searched)
        if high < math.inf and high - low > self.config.rel_tol * high:
            return [(low + high) / 2]
        return []

    def record(self, outcomes: Sequence[tuple[float, bool]]) -> list[float]:
        """Apply the outcomes of the rates `next_rates` gave, in that order; the rates used
        (a doubling lookahead past the first failure is dropped)."""
        used = []
        for rate, ok in outcomes:
            self._apply(rate, ok)
            used.append(rate)
            if not self._doubling:
                break
            if not ok or rate >= self.config.max_rate or \
                    len(self.result.probes) >= self.config.max_probes:
                self._doubling = False
                break
            self._next = min(2 * rate, self.config.max_rate)
        return used

    def _apply(self, rate: float, ok: bool) -> None:
        self.result.probes.append((rate, ok))
        if ok:
            self.result.capacity_rps = max(self.result.capacity_rps, rate)
        else:
            self.result.failing_rps = min(self.result.failing_rps, rate)


def search_capacity(meets: Callable[[float], bool], search: SearchConfig) -> Capacity:
    """Doubling then bisection over the rate for the highest one where `meets(rate)` holds."""
    state = RateSearch(search)
    while rates := state.next_rates(1):
        state.record([(rates[0], meets(rates[0]))])
    return state.result

"""Cumulative iteration ends of a multi-iteration step, cut where the engine would cut it.

`np.cumsum` adds sequentially, so a Python running sum over the same float64 terms gives the
same ends bit for bit; computing them lazily stops at the first end at or after `until_s`
(`sim.core.executor.truncate_ends` keeps exactly that prefix), so a step cut by the next arrival
costs the iterations it runs, not the ones it was offered.
"""

from __future__ import annotations

from typing import Iterable


def ends_of(first_s: float, later_s: Iterable[float], until_s: float) -> list[float]:
    """[first_s, first_s + later_s[0], ...] (seconds), up to the first end >= `until_s`."""
    ends, e = [first_s], first_s
    if e >= until_s:
        return ends
    for t in later_s:
        e += t
        ends.append(e)
        if e >= until_s:
            break
    return ends

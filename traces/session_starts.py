"""When multi-turn sessions start, so that their turns arrive at an asked rate.

A session's turns arrive at fixed offsets (seconds) after it starts; the offsets and the number
of turns (after `max_turns` and the prompt cap) come with the session's draw.

- In a window [0, duration_s) (`starts_for_window`) sessions start as a stationary Poisson
  process at r sessions per second on both sides of 0: the k-th at e_k / r and the k-th before
  0 at -f_k / r, with e and f unit-rate epochs (unit-mean exponential gaps from 0). Sessions
  begun before 0 are in progress at 0 and give the window their turns from 0 on (none whose
  offset is duration_s or more), so the turn rate is flat from the start instead of ramping
  up. A turn arrives in the window exactly when r exceeds its threshold: e_k / (duration_s -
  offset) after 0, f_k / offset before. The count in the window grows with r by one at each
  threshold, so r midway between the target-th and the (target + 1)-th smallest threshold
  delivers exactly `target` turns in it (turns that share a threshold, one session's turns at
  one instant, give the nearest count instead). Sessions are drawn, nearest epoch first, until
  that epoch / duration_s exceeds the (target + 1)-th smallest threshold: every threshold of a
  later session is larger, so no later session can move r.
- By count (`starts_for_count`): n sessions start after 0 at r = rate * n / (their turns), the
  first at 0, so their turns number `rate` per second of the starts' expected span n / r.

Every draw is the seeded generator's, in a fixed order, so one seed gives one r and one set of
starts.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable

import numpy as np

from traces.arrivals import arrivals


@dataclass(frozen=True)
class Starts:
    """Session starts and the session rate that placed them."""

    session_rate_per_s: float  # sessions started per second (r)
    starts_s: np.ndarray  # seconds, one per drawn session in draw order (< 0: begun before 0)


def thresholds(epoch: float, offsets_s: np.ndarray, duration_s: float) -> np.ndarray:
    """The session rates (1/s) above which each of a session's turns arrives in
    [0, duration_s): epoch > 0 starts after 0, epoch < 0 before; only turns that can arrive
    there (offset < duration_s; after 0 from a session begun before it) have one."""
    inside = offsets_s[offsets_s < duration_s]
    if epoch >= 0:
        return epoch / (duration_s - inside)
    inside = inside[inside > 0]
    return -epoch / inside


def in_window_turns(start_s: float, offsets_s: np.ndarray, duration_s: float) -> np.ndarray:
    """Which of a session's turns the trace keeps: every turn of a session begun in
    [0, duration_s) (later turns too), the turns from 0 on of one begun before 0."""
    if start_s >= 0:
        return np.full(len(offsets_s), start_s < duration_s)
    return (start_s + offsets_s >= 0) & (offsets_s < duration_s)


def starts_for_window(target: int, duration_s: float, draw: Callable[[], np.ndarray],
                      rng: np.random.Generator) -> Starts:
    """Starts of the drawn sessions (module docstring) when exactly `target` (>= 1) turns
    arrive in [0, duration_s): `draw()` draws the next session and returns its turns' offsets
    (seconds)."""
    keep = target + 1
    heap: list[float] = []  # negated: the `keep` smallest thresholds so far
    every: list[float] = []  # every threshold so far
    epochs: list[float] = []  # signed: < 0 before 0
    after, before = float(rng.exponential(1.0)), float(rng.exponential(1.0))
    while len(heap) < keep or min(after, before) / duration_s <= -heap[0]:
        epoch = after if after <= before else -before
        epochs.append(epoch)
        for theta in thresholds(epoch, draw(), duration_s).tolist():
            every.append(theta)
            if len(heap) < keep:
                heapq.heappush(heap, -theta)
            elif theta < -heap[0]:
                heapq.heapreplace(heap, -theta)
        if epoch >= 0:
            after += float(rng.exponential(1.0))
        else:
            before += float(rng.exponential(1.0))
    rate = rate_for_count(np.sort(np.asarray(every)), target,
                          min(after, before) / duration_s)
    return Starts(rate, np.asarray(epochs) / rate)


def rate_for_count(thetas: np.ndarray, target: int, bound: float) -> float:
    """The session rate midway between the target-th threshold and the next larger one
    (`bound` when none was drawn): exactly `target` turns. Where turns share the target-th
    threshold (one session's turns at one instant), the count nearest `target` on either side
    of the tie (the larger on a draw; never none)."""
    v = float(thetas[target - 1])
    below, above = (int(np.searchsorted(thetas, v, side)) for side in ("left", "right"))
    if below > 0 and (above - target) > (target - below):
        return 0.5 * (float(thetas[below - 1]) + v)
    return 0.5 * (v + (float(thetas[above]) if above < len(thetas) else bound))


def starts_for_count(rate_per_s: float, turns: int, num_sessions: int,
                     rng: np.random.Generator) -> Starts:
    """Starts of `num_sessions` sessions holding `turns` turns in all, so that the turns come
    at `rate_per_s` per second of the starts' expected span."""
    rate = rate_per_s * num_sessions / max(turns, 1)
    return Starts(rate, arrivals(rate, num_sessions, rng=rng))

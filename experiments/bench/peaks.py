"""bench.json's per-second peaks (experiments/bench/vllm_bench.py) in memory bounded by the run's
request count, whatever its span in seconds and its number of output tokens.

Buckets are 1-second slots counted from the first arrival `start`: a time t falls in bucket
clip(trunc(t - start), 0, last), last = ceil(latest finish - start). A finished request with m
output tokens puts token k (0..m-1) at first_token_s + k * gap, gap = (finish_s - first_token_s)
/ max(m - 1, 1) (the simulator keeps no per-token time), and is active from the bucket of its
arrival to that of its finish.

Counting every token into an array of last + 1 buckets, as vLLM's client does, needs one entry
per second of the span (a 28-year trace: 8.8e8 buckets, 6.6 GiB) and one per output token.
Here, with the same float64 expressions, so the same bucket for every token and the same peaks:

- concurrency: a sweep over the sorted arrival and finish buckets (the count only rises at an
  arrival bucket, so its maximum is at one of them): O(requests);
- tokens: a sweep over windows of WINDOW_BUCKETS buckets, jumping over buckets without tokens.
  A request's token bucket never decreases with k (every step of the expression rounds
  monotonically), so its tokens in a window are one range of k, found by bisection on the
  expression itself; the ranges are enumerated CHUNK_TOKENS tokens at a time.
Memory: O(requests) + WINDOW_BUCKETS + CHUNK_TOKENS array entries; time O(tokens), as before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WINDOW_BUCKETS = 2**16  # 1-second buckets counted at once (one int64 array of this length)
CHUNK_TOKENS = 2**18  # output tokens placed at once (a few arrays of this length)
MAX_SPAN_S = 2.0**62  # seconds: a longer run's buckets do not fit int64 (1.5e11 years)
COLUMNS = ("arrival_s", "first_token_s", "finish_s")  # record times used (seconds)


def peak_buckets(done: pd.DataFrame, window: int = WINDOW_BUCKETS,
                 chunk: int = CHUNK_TOKENS) -> tuple[float, int]:
    """(most output tokens in one 1-second bucket, most completed requests active in one) of
    the finished requests `done` (module docstring); `window` / `chunk` bound the arrays."""
    if window < 1 or chunk < 1:
        raise ValueError(f"window={window}, chunk={chunk}: both must be >= 1")
    if done.empty:
        return 0.0, 0
    arrival, first, finish = _times(done)
    start = float(arrival.min())
    last = int(np.ceil(float(finish.max()) - start))
    outs = done["output_tokens"].to_numpy(dtype=np.int64)
    # the bucket arrays are temporaries, freed before the token sweep (peak memory)
    active = _peak_active((arrival - start).astype(np.int64), (finish - start).astype(np.int64))
    gap = (finish - first) / np.maximum(outs - 1, 1)
    keep = outs > 0
    tokens = _peak_tokens(first[keep], gap[keep], outs[keep], (start, last), window, chunk)
    return float(tokens), active


def _times(done: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The record times as float64; ValueError naming the request when they are not finite,
    out of order (arrival <= first token <= finish) or span more than MAX_SPAN_S."""
    arrival, first, finish = (done[c].to_numpy(dtype=np.float64) for c in COLUMNS)
    bad = ~(np.isfinite(arrival) & np.isfinite(first) & np.isfinite(finish)
            & (arrival <= first) & (first <= finish))
    if bad.any():
        i = int(np.argmax(bad))
        rid = done["request_id"].iloc[i] if "request_id" in done.columns else i
        raise ValueError(f"records: finished request {rid} has arrival_s={arrival[i]!r}, "
                         f"first_token_s={first[i]!r}, finish_s={finish[i]!r}: a finished "
                         f"request's times must be finite with arrival <= first token <= finish")
    if float(finish.max()) - float(arrival.min()) >= MAX_SPAN_S:
        raise ValueError(f"records: the run spans {float(finish.max()) - float(arrival.min())!r}"
                         f" s, at least {MAX_SPAN_S:.3g} s: its 1-second buckets overflow int64")
    return arrival, first, finish


def _peak_active(lo: np.ndarray, hi: np.ndarray) -> int:
    """Most intervals [lo, hi] (bucket indices) covering one bucket."""
    starts, ends = np.sort(lo), np.sort(hi + 1)
    at = np.unique(np.concatenate(([0], lo)))
    active = np.searchsorted(starts, at, side="right") - np.searchsorted(ends, at, side="right")
    return int(active.max())


def _bucket(first: np.ndarray, gap: np.ndarray, k: np.ndarray,
            span: tuple[float, int]) -> np.ndarray:
    """The bucket of token k of each request: the expression of the module docstring."""
    start, last = span
    return np.clip((first + k * gap - start).astype(np.int64), 0, last)


def _first_token_at(first: np.ndarray, gap: np.ndarray, outs: np.ndarray, k_lo: np.ndarray,
                    bucket: int, span: tuple[float, int]) -> np.ndarray:
    """Per request, the least k in [k_lo, outs] whose token lies in `bucket` or later (outs
    when none does): bisection, exact because the bucket never decreases with k."""
    lo, hi = k_lo.copy(), outs.copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        before = _bucket(first, gap, mid, span) < bucket
        lo = np.where(open_ & before, mid + 1, lo)
        hi = np.where(open_ & ~before, mid, hi)


def _count_window(first: np.ndarray, gap: np.ndarray, k0: np.ndarray, k1: np.ndarray,
                  span: tuple[float, int], w: int, window: int, chunk: int) -> int:
    """Most tokens in one bucket of [w, w + window), given each request's tokens there: the
    k in [k0, k1); placed at most `chunk` tokens at a time."""
    counts = np.zeros(window, dtype=np.int64)
    ends = np.cumsum(k1 - k0)
    total = int(ends[-1]) if ends.size else 0
    for a in range(0, total, chunk):
        pos = np.arange(a, min(a + chunk, total), dtype=np.int64)
        row = np.searchsorted(ends, pos, side="right")
        k = k0[row] + (pos - (ends[row] - (k1[row] - k0[row])))
        counts += np.bincount(_bucket(first[row], gap[row], k, span) - w, minlength=window)
    return int(counts.max())


def _peak_tokens(first: np.ndarray, gap: np.ndarray, outs: np.ndarray, span: tuple[float, int],
                 window: int, chunk: int) -> int:
    """Most tokens in one bucket: windows of `window` buckets in order, from the first bucket
    holding a token not yet counted (module docstring)."""
    b_first = _bucket(first, gap, np.zeros_like(outs), span)
    order = np.argsort(b_first, kind="stable")
    first, gap, outs, b_first = first[order], gap[order], outs[order], b_first[order]
    active = np.empty(0, dtype=np.int64)  # requests with tokens left, entered in order
    k_next = np.empty(0, dtype=np.int64)  # each one's first token not yet counted
    entered, best = 0, 0
    w = int(b_first[0]) if b_first.size else 0
    while active.size or entered < b_first.size:
        end = w + window
        new = entered + int(np.searchsorted(b_first[entered:], end, side="left"))
        active = np.concatenate((active, np.arange(entered, new, dtype=np.int64)))
        k_next = np.concatenate((k_next, np.zeros(new - entered, dtype=np.int64)))
        entered = new
        f, g, m = first[active], gap[active], outs[active]
        stop = _first_token_at(f, g, m, k_next, end, span)
        best = max(best, _count_window(f, g, k_next, stop, span, w, window, chunk))
        left = stop < m
        active, k_next = active[left], stop[left]
        nearest = [int(b_first[entered])] if entered < b_first.size else []
        if active.size:
            nearest.append(int(_bucket(first[active], gap[active], k_next, span).min()))
        w = max(end, min(nearest)) if nearest else end
    return best

"""bench.json's per-second peaks (experiments/bench/vllm_bench.py) in memory bounded by a chunk of
the records, whatever the run's request count, span in seconds and number of output tokens.

Buckets are 1-second slots counted from the first arrival `start`: a time t falls in bucket
clip(trunc(t - start), 0, last), last = ceil(latest finish - start). A finished request with m
output tokens puts token k (0..m-1) at first_token_s + k * gap, gap = (finish_s - first_token_s)
/ max(m - 1, 1) (the simulator keeps no per-token time), and is active from the bucket of its
arrival to that of its finish.

Counting every token into an array of last + 1 buckets, as vLLM's client does, needs one entry
per second of the span (a 28-year trace: 8.8e8 buckets, 6.6 GiB) and one per output token.
Here, with the same float64 expressions, so the same bucket for every token and the same peaks,
the finished requests are read a chunk at a time (`Chunks`: the records' row groups), once to
check their times and find the span, then once per window of WINDOW_BUCKETS buckets that holds
an arrival or a token (one window for any run shorter than 12 days):

- concurrency: each request adds +1 at its arrival bucket and -1 after its finish bucket (both
  clipped to the window); the running sum's maximum is the most requests active in one bucket;
- tokens: a request's token bucket never decreases with k (every step of the expression rounds
  monotonically), so its tokens in bucket b are the k in [K(b), K(b + 1)), K(b) the first k
  whose bucket is b or later: found from the real-number estimate and checked on the expression
  itself (bisection where the check fails). A request adds its count to each bucket it spans,
  or 1 to each token's bucket when it has fewer tokens than buckets: work O(min(tokens,
  buckets)) a request, placed CHUNK_UNITS (bucket, count) pairs at a time.
Memory: a chunk of records, the window and CHUNK_UNITS pairs.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

import numpy as np
import pandas as pd

WINDOW_BUCKETS = 2**20  # 1-second buckets counted at once (a float64 and an int64 array)
CHUNK_UNITS = 2**18  # (bucket, count) pairs placed at once (a few arrays of this length)
CHUNK_ROWS = 2**18  # rows of a frame taken at once
MAX_SPAN_S = 2.0**62  # seconds: a longer run's buckets do not fit int64 (1.5e11 years)
COLUMNS = ("arrival_s", "first_token_s", "finish_s")  # record times used (seconds)


class Times(NamedTuple):
    """Finished requests' columns, as float64 / int64 arrays."""

    arrival: np.ndarray  # seconds
    first: np.ndarray  # first token, seconds
    finish: np.ndarray  # seconds
    outs: np.ndarray  # output tokens
    ids: np.ndarray | None  # request ids (None: row positions), for error messages


Chunks = Callable[[], Iterable[Times]]  # a fresh pass over the finished requests


def frame_chunks(done: pd.DataFrame, rows: int = CHUNK_ROWS) -> Chunks:
    """The finished requests of a frame, `rows` at a time."""
    def chunks() -> Iterable[Times]:
        for i in range(0, len(done), rows):
            part = done.iloc[i:i + rows]
            yield times_of(part, np.arange(i, i + len(part)))
    return chunks


def times_of(part: pd.DataFrame, positions: np.ndarray | None = None) -> Times:
    """`Times` of a frame of finished requests (ids from `request_id`, else `positions`)."""
    ids = part["request_id"].to_numpy() if "request_id" in part.columns else positions
    return Times(*(part[c].to_numpy(dtype=np.float64) for c in COLUMNS),
                 part["output_tokens"].to_numpy(dtype=np.int64), ids)


def peak_buckets(done: pd.DataFrame, window: int = WINDOW_BUCKETS,
                 chunk: int = CHUNK_UNITS) -> tuple[float, int]:
    """(most output tokens in one 1-second bucket, most completed requests active in one) of
    the finished requests `done` (module docstring); `window` / `chunk` bound the arrays."""
    return peaks_of(frame_chunks(done), window, chunk)


def peaks_of(chunks: Chunks, window: int = WINDOW_BUCKETS,
             chunk: int = CHUNK_UNITS) -> tuple[float, int]:
    """`peak_buckets` of the finished requests `chunks` yields."""
    if window < 1 or chunk < 1:
        raise ValueError(f"window={window}, chunk={chunk}: both must be >= 1")
    bounds = _span(chunks)
    if bounds is None:
        return 0.0, 0
    start, last = bounds
    tokens, active = 0, 0
    for w in _windows(chunks, start, last, window):
        size = min(window, last + 1 - w)  # buckets of this window inside the span
        counts = np.zeros(size, dtype=np.float64)  # exact integers below 2**53
        delta = np.zeros(size + 1, dtype=np.int64)
        for t in chunks():
            _add_active(delta, t, start, w, size)
            _add_tokens(counts, t, (start, last), w, size, chunk)
        tokens = max(tokens, int(counts.max()))
        active = max(active, int(np.cumsum(delta[:size]).max()))
    return float(tokens), active


def _span(chunks: Chunks) -> tuple[float, int] | None:
    """(start, last bucket) after checking every request's times; None when there is none."""
    start, end = np.inf, -np.inf
    for t in chunks():
        _check(t)
        if t.arrival.size:
            start = min(start, float(t.arrival.min()))
            end = max(end, float(t.finish.max()))
    if start == np.inf:
        return None
    if end - start >= MAX_SPAN_S:
        raise ValueError(f"records: the run spans {end - start!r} s, at least {MAX_SPAN_S:.3g} "
                         f"s: its 1-second buckets overflow int64")
    return start, int(np.ceil(end - start))


def _check(t: Times) -> None:
    """ValueError naming the request when its times are not finite or out of order (arrival
    <= first token <= finish)."""
    bad = ~(np.isfinite(t.arrival) & np.isfinite(t.first) & np.isfinite(t.finish)
            & (t.arrival <= t.first) & (t.first <= t.finish))
    if bad.any():
        i = int(np.argmax(bad))
        rid = t.ids[i] if t.ids is not None else i
        raise ValueError(f"records: finished request {rid} has arrival_s={t.arrival[i]!r}, "
                         f"first_token_s={t.first[i]!r}, finish_s={t.finish[i]!r}: a finished "
                         f"request's times must be finite with arrival <= first token <= finish")


def _windows(chunks: Chunks, start: float, last: int, window: int) -> list[int]:
    """First buckets of the windows holding an arrival (where the most active requests is
    reached) or a token, in order; every window of the span when it has few."""
    if last // window < 64:
        return list(range(0, last + 1, window))
    span = (start, last)
    touched: set[int] = set()
    for t in chunks():
        touched.update(np.unique((t.arrival - start).astype(np.int64) // window).tolist())
        keep = t.outs > 0
        first, outs = t.first[keep], t.outs[keep]
        gap = (t.finish[keep] - first) / np.maximum(outs - 1, 1)
        v0 = _bucket(first, gap, np.zeros_like(outs), span) // window
        v1 = _bucket(first, gap, outs - 1, span) // window
        spread = v1 - v0 + 1 > outs  # fewer tokens than windows: the tokens' own windows
        for a, b in zip(v0[~spread].tolist(), v1[~spread].tolist()):
            touched.update(range(a, b + 1))
        for i in np.flatnonzero(spread).tolist():
            k = np.arange(outs[i], dtype=np.int64)
            touched.update(np.unique(_bucket(first[i], gap[i], k, span) // window).tolist())
    return [v * window for v in sorted(touched)]


def _bucket(first: np.ndarray, gap: np.ndarray, k: np.ndarray,
            span: tuple[float, int]) -> np.ndarray:
    """The bucket of token k of each request: the expression of the module docstring."""
    start, last = span
    return np.clip((first + k * gap - start).astype(np.int64), 0, last)


def _add_active(delta: np.ndarray, t: Times, start: float, w: int, window: int) -> None:
    """+1 at each request's arrival bucket, -1 after its finish bucket, within [w, w + window)."""
    lo = (t.arrival - start).astype(np.int64)
    hi = (t.finish - start).astype(np.int64)
    keep = (lo < w + window) & (hi >= w)
    if not keep.any():
        return
    lo, hi = np.maximum(lo[keep], w) - w, hi[keep] + 1 - w
    delta += np.bincount(lo, minlength=window + 1)[: window + 1]
    hi = hi[hi < window]
    delta[: window] -= np.bincount(hi, minlength=window)[:window]


def _first_k(first: np.ndarray, gap: np.ndarray, outs: np.ndarray, b: np.ndarray,
             span: tuple[float, int]) -> np.ndarray:
    """Per request, the least k in [0, outs] whose token lies in bucket `b` or later (outs when
    none does): the real-number estimate, moved a token at a time while the expression says
    so, then checked; bisection where the check fails (exact: the bucket never decreases)."""
    start = span[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.ceil((b - (first - start)) / gap)
    k = np.clip(np.nan_to_num(est, nan=0.0, posinf=0.0, neginf=0.0), 0, outs).astype(np.int64)
    for _ in range(3):
        down = (k > 0) & (_bucket(first, gap, k - 1, span) >= b)
        up = (k < outs) & (_bucket(first, gap, k, span) < b)
        if not (down.any() or up.any()):
            return k
        k = k - down + up
    wrong = ((k > 0) & (_bucket(first, gap, k - 1, span) >= b)) | (
        (k < outs) & (_bucket(first, gap, k, span) < b))
    if wrong.any():
        k[wrong] = _bisect(first[wrong], gap[wrong], outs[wrong], b[wrong], span)
    return k


def _bisect(first: np.ndarray, gap: np.ndarray, outs: np.ndarray, b: np.ndarray,
            span: tuple[float, int]) -> np.ndarray:
    """`_first_k` by bisection over [0, outs]."""
    lo, hi = np.zeros_like(outs), outs.copy()
    while (open_ := lo < hi).any():
        mid = (lo + hi) // 2
        before = _bucket(first, gap, mid, span) < b
        lo = np.where(open_ & before, mid + 1, lo)
        hi = np.where(open_ & ~before, mid, hi)
    return lo


def _add_tokens(counts: np.ndarray, t: Times, span: tuple[float, int], w: int,
                window: int, chunk: int) -> None:
    """Add the tokens of `t`'s requests lying in [w, w + window) to `counts` (module
    docstring): per request its tokens, or its buckets with their counts, whichever is fewer."""
    keep = t.outs > 0
    first, outs = t.first[keep], t.outs[keep]
    gap = (t.finish[keep] - first) / np.maximum(outs - 1, 1)
    b0 = _bucket(first, gap, np.zeros_like(outs), span)
    b1 = _bucket(first, gap, outs - 1, span)
    inside = (b0 < w + window) & (b1 >= w)
    if not inside.any():
        return
    first, gap, outs, b0, b1 = first[inside], gap[inside], outs[inside], b0[inside], b1[inside]
    lo_b, hi_b = np.maximum(b0, w), np.minimum(b1, w + window - 1)  # buckets spanned here
    k_lo = _first_k(first, gap, outs, lo_b, span)
    k_hi = _first_k(first, gap, outs, hi_b + 1, span)
    by_token = (k_hi - k_lo) <= (hi_b - lo_b + 1)
    units = np.where(by_token, k_hi - k_lo, hi_b - lo_b + 1)
    ends = np.cumsum(units)
    for a, z in _slices(ends, chunk):
        _place(counts, first[a:z], gap[a:z], outs[a:z], k_lo[a:z], lo_b[a:z], by_token[a:z],
               units[a:z], span, w)


def _slices(ends: np.ndarray, chunk: int) -> Iterable[tuple[int, int]]:
    """Runs [a, z) of requests whose units add up to about `chunk` (at least one request)."""
    a, total = 0, 0
    n = len(ends)
    while a < n:
        z = int(np.searchsorted(ends, total + chunk, side="right"))
        z = max(z, a + 1)
        yield a, z
        total = int(ends[z - 1])
        a = z


def _place(counts: np.ndarray, first: np.ndarray, gap: np.ndarray, outs: np.ndarray,
           k_lo: np.ndarray, lo_b: np.ndarray, by_token: np.ndarray, units: np.ndarray,
           span: tuple[float, int], w: int) -> None:
    """Add one run of requests' units to `counts`: a token adds 1 at its bucket, a bucket adds
    the tokens between its first k and the next bucket's."""
    row = np.repeat(np.arange(len(units)), units)
    j = np.arange(row.size) - np.repeat(np.cumsum(units) - units, units)  # unit within row
    f, g, m, tok = first[row], gap[row], outs[row], by_token[row]
    k = k_lo[row] + j
    bucket = np.where(tok, 0, lo_b[row] + j)
    weight = np.ones(row.size, dtype=np.float64)
    if tok.any():
        bucket[tok] = _bucket(f[tok], g[tok], k[tok], span)
    span_b = ~tok
    if span_b.any():
        b = bucket[span_b]
        ff, gg, mm = f[span_b], g[span_b], m[span_b]
        weight[span_b] = _first_k(ff, gg, mm, b + 1, span) - _first_k(ff, gg, mm, b, span)
    if not row.size:
        return
    lo = int(bucket.min())
    part = np.bincount(bucket - lo, weights=weight)
    counts[lo - w: lo - w + part.size] += part

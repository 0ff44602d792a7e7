"""Exact weighted ITL statistics over gaps read in chunks (bounded memory).

`sim.metrics.summary` computes the mean, population std and inverted-CDF percentiles of gaps repeated by
their weights from whole arrays (`np.average`, a stable argsort and a cumulative sum). Over gaps
spilled to disk (sim/records/gap_store.py) these functions give the same numbers to the last bit while
holding one chunk at a time:

- sums follow numpy's pairwise summation tree (halve at a multiple of 8 above 128 items) down to
  leaves of at most LEAF items, each summed by numpy itself, so the float64 result is the same;
- a percentile is the smallest gap whose weight at or below it reaches q% of the total, found
  by a radix selection over the gaps' order-preserving 64-bit keys, 16 bits a pass (4 passes).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Reader = Callable[[int, int], tuple[np.ndarray, np.ndarray]]  # (start, stop) -> values, weights
LEAF = 1 << 20  # items summed by numpy at once (a pairwise-tree node at or below this size)
CHUNK = 1 << 20  # items read at once by the selection passes
SIGN = np.uint64(1 << 63)
DIGITS = 16  # key bits decided per selection pass


def total_weight(read: Reader, n: int) -> int:
    """Sum of every weight (exact)."""
    return sum(int(read(i, min(i + CHUNK, n))[1].sum(dtype=np.int64)) for i in range(0, n, CHUNK))


def pairwise_sum(term: Callable[[np.ndarray, np.ndarray], np.ndarray], read: Reader,
                 start: int, stop: int) -> float:
    """`np.sum` of term(values, weights) over items [start, stop), as numpy sums one array."""
    n = stop - start
    if n <= max(LEAF, 128):  # numpy sums 128 items or fewer without splitting
        values, weights = read(start, stop)
        return float(np.sum(term(values, weights)))
    half = n // 2
    half -= half % 8
    return pairwise_sum(term, read, start, start + half) + pairwise_sum(term, read,
                                                                        start + half, stop)


def weighted_mean_std(read: Reader, n: int, total: int) -> tuple[float, float]:
    """`np.average(values, weights=weights)` and `sim.metrics.summary.weighted_std`, bit for bit."""
    scale = float(total)  # np.average's weight sum: an exact integer in float64
    mean = pairwise_sum(lambda v, w: np.multiply(v, w, dtype=np.float64), read, 0, n) / scale
    mean64 = np.float64(mean)

    def squares(v: np.ndarray, w: np.ndarray) -> np.ndarray:
        d = v - mean64
        np.square(d, out=d)
        return np.multiply(d, w, dtype=np.float64)

    return mean, float(np.sqrt(pairwise_sum(squares, read, 0, n) / scale))


def keys(values: np.ndarray) -> np.ndarray:
    """Unsigned 64-bit keys in the order of the float64 values (negatives flipped)."""
    bits = values.view(np.uint64)
    return np.where(bits & SIGN, ~bits, bits | SIGN)


def from_key(key: int) -> float:
    """The float64 value of a key of `keys`."""
    k = np.uint64(key)
    bits = k & ~SIGN if k & SIGN else ~k
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


def weighted_percentiles(read: Reader, n: int, total: int, qs: Sequence[float]) -> list[float]:
    """For each q (percent), the smallest value whose weight at or below it reaches q/100 of
    `total` (numpy: searchsorted of the cumulative weights in stable sort order, side left),
    or the largest value when none does."""
    targets = [q / 100.0 * np.int64(total) for q in qs]  # float64, as compared by searchsorted
    return select(read, n, targets)


def select(read: Reader, n: int, targets: Sequence[float]) -> list[float]:
    """For each target weight t, the smallest value whose weight at or below it reaches t
    (the largest value when none does): with unit weights, target k + 1 is the k-th smallest
    value (from 0)."""
    prefix = [0] * len(targets)  # decided high key bits
    below = [0] * len(targets)  # weight of keys under the decided prefix
    for p in range(64 // DIGITS):
        shift = 64 - DIGITS * (p + 1)  # bits under the digit decided in this pass
        hists = _digit_histograms(read, n, prefix, shift, p)
        for j, t in enumerate(targets):
            hist = hists[prefix[j]]
            cum = np.cumsum(hist) + float(below[j])  # exact integers in float64
            d = int(np.searchsorted(cum, t, side="left"))
            if d == len(cum):  # t over the total (q > 100): the largest value
                d = _last_nonzero(hist)
            below[j] = int(cum[d - 1]) if d else below[j]
            prefix[j] = (prefix[j] << DIGITS) | d
    return [from_key(k) for k in prefix]


def _last_nonzero(hist: np.ndarray) -> int:
    """The highest digit holding any weight (the largest value: no target was reached)."""
    nz = np.flatnonzero(hist)
    return int(nz[-1]) if len(nz) else len(hist) - 1


def _digit_histograms(read: Reader, n: int, prefixes: list[int], shift: int,
                      p: int) -> dict[int, np.ndarray]:
    """For each distinct prefix (the key's top 16 * p bits), the weight of its keys per next
    16-bit digit (exact: integer weights summed in float64 stay below 2**53)."""
    size = 1 << DIGITS
    hists = {q: np.zeros(size, dtype=np.float64) for q in set(prefixes)}
    for i in range(0, n, CHUNK):
        values, weights = read(i, min(i + CHUNK, n))
        k = keys(values)
        digit = ((k >> np.uint64(shift)) & np.uint64(size - 1)).astype(np.int64)
        if p == 0:
            hists[0] += np.bincount(digit, weights=weights, minlength=size)
            continue
        top = k >> np.uint64(shift + DIGITS)
        for q, h in hists.items():
            sel = top == np.uint64(q)
            h += np.bincount(digit[sel], weights=weights[sel], minlength=size)
    return hists

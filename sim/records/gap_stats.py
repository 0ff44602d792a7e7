"""Exact weighted ITL statistics over gaps read in chunks (bounded memory).

`sim.metrics.summary` computes the mean, population std and inverted-CDF percentiles of gaps repeated by
their weights from whole arrays (`np.average`, a stable argsort and a cumulative sum). Over gaps
spilled to disk (sim/records/gap_store.py) these functions give the same numbers to the last bit while
holding one chunk at a time:

- sums follow numpy's pairwise summation tree (halve at a multiple of 8 above 128 items) down to
  leaves of at most LEAF items, each summed by numpy itself, so the float64 result is the same;
- a percentile is the smallest gap whose weight at or below it reaches q% of the total, found
  by a radix selection over the gaps' order-preserving 64-bit keys, 16 bits a pass (4 passes).

`weighted_summary` takes all of them in four reads of the gaps, not seven: the total weight
and the selection's first histogram ride on the mean's read, its second on the std's.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Reader = Callable[[int, int], tuple[np.ndarray, np.ndarray]]  # (start, stop) -> values, weights
LEAF = 1 << 20  # items summed by numpy at once (a pairwise-tree node at or below this size)
CHUNK = 1 << 20  # items read at once by the selection passes
SIGN = np.uint64(1 << 63)
DIGITS = 16  # key bits decided per selection pass
PASSES = 64 // DIGITS  # histogram passes of a selection


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
    mean = pairwise_sum(_weighted, read, 0, n) / float(total)  # float(total): np.average's
    return mean, _std(read, n, total, mean)  # weight sum, an exact integer in float64


def _weighted(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each value times its weight (float64): the weighted mean's terms."""
    return np.multiply(values, weights, dtype=np.float64)


def _std(read: Reader, n: int, total: int, mean: float) -> float:
    """`sim.metrics.summary.weighted_std` about `mean` (the weighted mean), bit for bit."""
    mean64 = np.float64(mean)

    def squares(v: np.ndarray, w: np.ndarray) -> np.ndarray:
        d = v - mean64
        np.square(d, out=d)
        return np.multiply(d, w, dtype=np.float64)

    return float(np.sqrt(pairwise_sum(squares, read, 0, n) / float(total)))


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
    return select(read, n, _targets(total, qs))


def _targets(total: int, qs: Sequence[float]) -> list[float]:
    """q/100 of `total` for each q: float64, as numpy's searchsorted compares them."""
    return [q / 100.0 * np.int64(total) for q in qs]


def select(read: Reader, n: int, targets: Sequence[float]) -> list[float]:
    """For each target weight t, the smallest value whose weight at or below it reaches t
    (the largest value when none does): with unit weights, target k + 1 is the k-th smallest
    value (from 0)."""
    radix = RadixSelect(targets)
    for p in range(PASSES):
        radix.decide(_digit_histograms(read, n, radix, p))
    return radix.values()


def weighted_summary(read: Reader, n: int,
                     qs: Sequence[float]) -> tuple[int, float, float, list[float]]:
    """(total weight, `weighted_mean_std`, `weighted_percentiles` at each q) in four reads of
    the `n` gaps: the total and the first digit's histogram counted as the mean reads them,
    the second digit's as the std does (each read covers every gap once). The same floats as
    the functions one at a time; NaN everywhere when the total weight is 0."""
    total, hists = [0], RadixSelect([]).histograms(0)

    def counting(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        values, weights = read(start, stop)
        total[0] += int(weights.sum(dtype=np.int64))
        RadixSelect.accumulate(hists, values, weights, 0)
        return values, weights

    weighted = pairwise_sum(_weighted, counting, 0, n)
    if not total[0]:
        nan = float("nan")
        return 0, nan, nan, [nan] * len(qs)
    radix = RadixSelect(_targets(total[0], qs))
    radix.decide(hists)
    mean = weighted / float(total[0])
    hists = radix.histograms(1)

    def binning(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        values, weights = read(start, stop)
        radix.accumulate(hists, values, weights, 1)
        return values, weights

    std = _std(binning, n, total[0], mean)
    radix.decide(hists)
    for p in range(2, PASSES):
        radix.decide(_digit_histograms(read, n, radix, p))
    return total[0], mean, std, radix.values()


class RadixSelect:
    """The state of a radix selection (`select`): each target's decided high key bits and
    the weight below them, one 16-bit digit decided a pass from that pass's histograms."""

    def __init__(self, targets: Sequence[float]) -> None:
        self.targets = list(targets)  # weights to reach (float64 values)
        self.prefix = [0] * len(self.targets)  # decided high key bits
        self.below = [0] * len(self.targets)  # weight of keys under the decided prefix
        self.num_passes = 0  # digits decided

    def histograms(self, p: int) -> dict[int, np.ndarray]:
        """Empty histograms of pass `p`, one per distinct prefix (pass 0: the one prefix 0)."""
        prefixes = set(self.prefix) if p else {0}
        return {q: np.zeros(1 << DIGITS, dtype=np.float64) for q in prefixes}

    @staticmethod
    def accumulate(hists: dict[int, np.ndarray], values: np.ndarray, weights: np.ndarray,
                   p: int) -> None:
        """Add the weight of each value's digit of pass `p` to its prefix's histogram (exact:
        integer weights summed in float64 stay below 2**53)."""
        size, shift = 1 << DIGITS, 64 - DIGITS * (p + 1)  # bits under the pass's digit
        k = keys(values)
        digit = ((k >> np.uint64(shift)) & np.uint64(size - 1)).astype(np.int64)
        if p == 0:
            hists[0] += np.bincount(digit, weights=weights, minlength=size)
            return
        top = k >> np.uint64(shift + DIGITS)
        for q, h in hists.items():
            sel = top == np.uint64(q)
            h += np.bincount(digit[sel], weights=weights[sel], minlength=size)

    def decide(self, hists: dict[int, np.ndarray]) -> None:
        """Each target's next digit from this pass's histograms."""
        for j, t in enumerate(self.targets):
            hist = hists[self.prefix[j]]
            cum = np.cumsum(hist) + float(self.below[j])  # exact integers in float64
            d = int(np.searchsorted(cum, t, side="left"))
            if d == len(cum):  # t over the total (q > 100): the largest value
                d = _last_nonzero(hist)
            self.below[j] = int(cum[d - 1]) if d else self.below[j]
            self.prefix[j] = (self.prefix[j] << DIGITS) | d
        self.num_passes += 1

    def values(self) -> list[float]:
        """The selected values (every digit decided)."""
        assert self.num_passes == PASSES, "a selection needs every pass"
        return [from_key(k) for k in self.prefix]


def _last_nonzero(hist: np.ndarray) -> int:
    """The highest digit holding any weight (the largest value: no target was reached)."""
    nz = np.flatnonzero(hist)
    return int(nz[-1]) if len(nz) else len(hist) - 1


def _digit_histograms(read: Reader, n: int, radix: RadixSelect,
                      p: int) -> dict[int, np.ndarray]:
    """Pass `p`'s histograms over every value, read a chunk at a time."""
    hists = radix.histograms(p)
    for i in range(0, n, CHUNK):
        values, weights = read(i, min(i + CHUNK, n))
        radix.accumulate(hists, values, weights, p)
    return hists

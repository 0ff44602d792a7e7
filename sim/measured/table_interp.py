"""Interpolation in measured tables: 1-D log-log curves and scattered 2-D grids.

Both return None outside the measured range, so a caller can fall back to a model there, and
name the nearest measured point so the fallback can be anchored to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

TINY_S = 1e-12  # seconds: floor under measured times so their logarithm exists


@dataclass(frozen=True)
class LogLogCurve:
    """y(x) through measured points, linear in (log x, log y) between them.

    With monotone=True the measured y are replaced by their lower non-decreasing envelope
    (y_i = min over x_j >= x_i of y_j), so measurement noise never makes more work cheaper; on
    a non-decreasing table the curve is exact at every point."""

    x: np.ndarray  # measured abscissae (tokens, bytes), > 0
    y: np.ndarray  # measured seconds at x
    monotone: bool = True  # use the lower non-decreasing envelope of y
    _lx: np.ndarray = field(init=False, repr=False)  # log x, sorted
    _ly: np.ndarray = field(init=False, repr=False)  # log y

    def __post_init__(self) -> None:
        x = np.asarray(self.x, dtype=np.float64)
        y = np.maximum(np.asarray(self.y, dtype=np.float64), TINY_S)
        if x.shape != y.shape or x.ndim != 1 or not len(x):
            raise ValueError(f"x and y must be equal-length 1-D, got {x.shape} and {y.shape}")
        if (x <= 0).any():
            raise ValueError(f"x must be > 0, got min {x.min()}")
        order = np.argsort(x, kind="stable")
        x, y = x[order], y[order]
        if self.monotone:
            y = np.minimum.accumulate(y[::-1])[::-1]
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "_lx", np.log(x))
        object.__setattr__(self, "_ly", np.log(y))

    def inside(self, x: float) -> bool:
        """Whether x lies within the measured range."""
        return bool(self.x[0] <= x <= self.x[-1])

    def __call__(self, x: float) -> float | None:
        """Interpolated seconds at x, None outside the measured range."""
        if not self.inside(x):
            return None
        return float(math.exp(np.interp(math.log(x), self._lx, self._ly)))

    def nearest(self, x: float) -> tuple[float, float]:
        """The measured (x, y) at the end of the range nearest to x."""
        i = 0 if x < self.x[0] else len(self.x) - 1
        return float(self.x[i]), float(self.y[i])


@dataclass(frozen=True)
class ScatterGrid:
    """t(a, b) over scattered measured points: for each measured a, t is linear in b between its
    measured b; between the nearest measured a below and above that both cover b, t is linear in
    a (log-log in a with log_a=True). Exact at measured points; None where no a below and above
    covers b (outside)."""

    a: np.ndarray  # first coordinate of each point (decode batch size, prefill chunk)
    b: np.ndarray  # second coordinate (KV tokens, context tokens)
    t: np.ndarray  # measured seconds
    log_a: bool = False  # interpolate between a values in log-log instead of linearly
    _rows: dict = field(init=False, repr=False)  # a -> (sorted b, t at b)

    def __post_init__(self) -> None:
        a, b, t = (np.asarray(v, dtype=np.float64) for v in (self.a, self.b, self.t))
        if not (a.shape == b.shape == t.shape) or a.ndim != 1:
            raise ValueError("a, b and t must be equal-length 1-D arrays")
        rows = {}
        for value in np.unique(a):
            sel = a == value
            order = np.argsort(b[sel], kind="stable")
            rows[float(value)] = (b[sel][order], np.maximum(t[sel][order], TINY_S))
        object.__setattr__(self, "_rows", rows)

    def _at(self, a: float, b: float) -> float | None:
        bs, ts = self._rows[a]
        return float(np.interp(b, bs, ts)) if bs[0] <= b <= bs[-1] else None

    def __call__(self, a: float, b: float) -> float | None:
        """Interpolated seconds at (a, b), None outside."""
        below = [k for k in self._rows if k <= a and self._at(k, b) is not None]
        above = [k for k in self._rows if k >= a and self._at(k, b) is not None]
        if not below or not above:
            return None
        a0, a1 = max(below), min(above)
        t0, t1 = self._at(a0, b), self._at(a1, b)
        assert t0 is not None and t1 is not None
        if a0 == a1:
            return t0
        if self.log_a and a0 > 0:
            w = math.log(a / a0) / math.log(a1 / a0)
            return float(math.exp((1 - w) * math.log(t0) + w * math.log(t1)))
        w = (a - a0) / (a1 - a0)
        return (1 - w) * t0 + w * t1

    def _side(self, keys: list[float], b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, t) at each b from the first of `keys` whose row covers it (NaN: none does)."""
        a_out, t_out = np.full(len(b), np.nan), np.full(len(b), np.nan)
        for key in keys:
            bs, ts = self._rows[key]
            need = np.isnan(t_out) & (b >= bs[0]) & (b <= bs[-1])
            if need.any():
                t_out[need] = np.interp(b[need], bs, ts)
                a_out[need] = key
        return a_out, t_out

    def many(self, a: float, b: np.ndarray) -> np.ndarray:
        """`self(a, x)` for every x in b at once; NaN where outside."""
        b = np.asarray(b, dtype=np.float64)
        keys = sorted(self._rows)
        a0, t0 = self._side([k for k in reversed(keys) if k <= a], b)
        a1, t1 = self._side([k for k in keys if k >= a], b)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.log_a and a > 0:
                w = np.log(a / a0) / np.log(a1 / a0)
                mixed = np.exp((1 - w) * np.log(t0) + w * np.log(t1))
            else:
                w = (a - a0) / (a1 - a0)
                mixed = (1 - w) * t0 + w * t1
        return np.where(a0 == a1, t0, mixed)

    def nearest_many(self, a: float, b: np.ndarray) -> tuple[np.ndarray, ...]:
        """The measured (a, b, t) nearest to each (a, b_i) in log(1 + coordinate) distance."""
        pa = np.concatenate([np.full(len(bs), k) for k, (bs, _) in self._rows.items()])
        pb = np.concatenate([bs for bs, _ in self._rows.values()])
        pt = np.concatenate([ts for _, ts in self._rows.values()])
        qb = np.log1p(np.maximum(np.asarray(b, dtype=np.float64), 0.0))[:, None]
        d = (np.log1p(pa) - math.log1p(max(a, 0.0))) ** 2 + (np.log1p(pb) - qb) ** 2
        i = np.argmin(d, axis=1)
        return pa[i], pb[i], pt[i]

    def nearest(self, a: float, b: float) -> tuple[float, float, float]:
        """The measured (a, b, t) nearest to (a, b) in log(1 + coordinate) distance."""
        pa, pb, pt = self.nearest_many(a, np.array([b], dtype=np.float64))
        return float(pa[0]), float(pb[0]), float(pt[0])

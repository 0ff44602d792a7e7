"""Continuous learning: collect badly predicted samples, retrain periodically, swap in later.

Magnus retrains its length predictor every 3 minutes on requests whose prediction error exceeded
both 10 tokens and 10% of the true length, and its batch-time estimator every 2 minutes on
batches whose error exceeded both 2 s and 20%, the batch re-estimated with its actual
generation length (`MagnusPolicy._learn`) so the predictor's miss is not counted. Retraining runs beside the serving loop in the
paper; here the fit happens when the period elapses and the new model takes effect
`delay_s` seconds of simulated time later, never blocking the loop.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Generic, TypeVar

from sim.records.recorder import Recorder
from sim.util.errors import check_positive

S = TypeVar("S")  # a collected sample
M = TypeVar("M")  # a trained model


def is_large_error(predicted: float, actual: float, abs_tolerance: float,
                   rel_tolerance: float) -> bool:
    """True when |predicted - actual| exceeds both abs_tolerance and rel_tolerance * actual."""
    error = abs(predicted - actual)
    return error > abs_tolerance and error > rel_tolerance * abs(actual)


class ContinuousLearner(Generic[S, M]):
    """Periodic retraining on collected samples with a delayed model swap."""

    def __init__(self, name: str, period_s: float | None, delay_s: float, max_samples: int,
                 train: Callable[[list[S]], M], recorder: Recorder) -> None:
        check_positive("delay_s", delay_s, allow_zero=True)
        check_positive("max_samples", max_samples)
        self.name = name  # used in recorded events ("retrain_<name>")
        self.period_s = period_s  # seconds between retrains; None: never
        self.delay_s = delay_s  # seconds from a retrain until its model takes effect
        self.train = train  # fits a new model on all collected samples
        self.recorder = recorder  # receives retrain / swap events
        self.samples: deque[S] = deque(maxlen=max_samples)  # most recent collected samples
        self.num_new = 0  # samples collected since the last retrain
        self.num_retrains = 0  # retrains so far
        self.next_retrain_s = period_s if period_s is not None else float("inf")  # seconds
        self.pending: deque[tuple[float, M]] = deque()  # (effective time, model), in time order

    def collect(self, sample: S) -> None:
        self.samples.append(sample)
        self.num_new += 1

    def poll(self, now: float) -> M | None:
        """Retrain if a period has elapsed; return the newest model due by `now`, if any."""
        if now >= self.next_retrain_s:
            if self.num_new:
                model = self.train(list(self.samples))
                self.pending.append((now + self.delay_s, model))
                self.num_retrains += 1
                self.recorder.event(now, f"retrain_{self.name}", -1,
                                    f"{len(self.samples)} samples ({self.num_new} new)")
                self.num_new = 0
            assert self.period_s is not None
            while self.next_retrain_s <= now:
                self.next_retrain_s += self.period_s
        ready = None
        while self.pending and self.pending[0][0] <= now:
            ready = self.pending.popleft()[1]
            self.recorder.event(now, f"swap_{self.name}", -1, "")
        return ready

"""Step timers: cumulative seconds from a step's start to the end of each iteration.

On CPU, `time.perf_counter` (wall clock), or the calling thread's CPU time (`cpu_clock: thread`,
for a shared machine: with one torch thread it leaves out time the OS gave other processes). On
CUDA, events recorded on the compute stream: `mark` records an
event after an iteration's kernels are queued and only synchronizes when the caller must know
the time now (a step that may stop at `until_s`); `ends` synchronizes once at the end. Host work
that starves the GPU between kernels shows up as GPU idle time between the events, as it would
in a serving engine.
"""

from __future__ import annotations

import time

import numpy as np
import torch


CPU_CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


class CpuStepTimer:
    def __init__(self, clock: str = "wall") -> None:
        self._clock = CPU_CLOCKS[clock]  # seconds, monotonic
        self._start = 0.0  # clock at the step start, seconds
        self._marks: list[float] = []  # seconds since start

    def start(self) -> None:
        self._marks = []
        self._start = self._clock()

    def mark(self, sync: bool = False) -> float | None:
        """End of an iteration; returns its cumulative time (always known on CPU)."""
        t = self._clock() - self._start
        self._marks.append(t)
        return t

    def now(self) -> float:
        """Seconds since the start, as of now."""
        return self._clock() - self._start

    def ends(self) -> np.ndarray:
        """Cumulative seconds of every mark."""
        return np.array(self._marks, dtype=np.float64)


class CudaStepTimer:
    def __init__(self, device: torch.device) -> None:
        self.device = device  # the GPU timed
        self._start: torch.cuda.Event | None = None  # recorded at the step start
        self._events: list[torch.cuda.Event] = []  # recorded after each iteration

    def _record(self) -> torch.cuda.Event:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self.device))
        return ev

    def start(self) -> None:
        self._events = []
        self._start = self._record()

    def mark(self, sync: bool = False) -> float | None:
        """End of an iteration; with `sync`, waits for it and returns its cumulative time."""
        ev = self._record()
        self._events.append(ev)
        if not sync:
            return None
        ev.synchronize()
        return self._start.elapsed_time(ev) / 1e3  # type: ignore[union-attr]

    def now(self) -> float:
        ev = self._record()
        ev.synchronize()
        return self._start.elapsed_time(ev) / 1e3  # type: ignore[union-attr]

    def ends(self) -> np.ndarray:
        if not self._events:
            return np.zeros(0)
        self._events[-1].synchronize()
        start = self._start
        return np.array([start.elapsed_time(ev) / 1e3 for ev in self._events])  # type: ignore


def make_timer(device: torch.device, cpu_clock: str = "wall") -> CpuStepTimer | CudaStepTimer:
    return CudaStepTimer(device) if device.type == "cuda" else CpuStepTimer(cpu_clock)

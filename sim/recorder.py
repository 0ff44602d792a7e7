"""What the engine and policies record while a simulation runs: inter-token gaps, steps, events.

Gaps are stored as (value, weight) chunks: a run of decode iterations shared by a batch is one
array of gaps with the batch size as weight, so ITL percentiles are exact without one Python
float per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

STEP_COLUMNS = ("instance_id", "start_s", "duration_s", "num_iterations", "num_seqs",
                "num_new_tokens", "num_context_tokens", "num_computed_tokens", "kv_tokens",
                "reserved_kv_tokens", "oom", "sched_s", "sched_gap_s", "policy_host_s")
# sched_s: modelled scheduler CPU seconds of the step's iterations (sim.overhead); sched_gap_s:
# the part of it the GPU sat idle; policy_host_s: measured host seconds of the policy's
# next_step + update for the step (time.perf_counter; not deterministic)


class GapLog:
    """Weighted samples of inter-token latency (seconds)."""

    def __init__(self) -> None:
        self._values: list[np.ndarray] = []
        self._weights: list[int | np.ndarray] = []  # an int applies to every value of its chunk
        self._scalars: list[float] = []  # single gaps of weight 1, batched for speed

    def add(self, gaps: np.ndarray | float, weight: int | np.ndarray = 1) -> None:
        """Record gaps; `weight` is the number of tokens that saw each gap."""
        if isinstance(gaps, float):
            if weight == 1:
                self._scalars.append(gaps)
                return
            gaps = np.array((gaps,))
        self._values.append(gaps)
        self._weights.append(weight)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All gaps and their weights."""
        values = self._values + [np.asarray(self._scalars, dtype=np.float64)]
        weights = [np.broadcast_to(np.asarray(w, dtype=np.int64), np.shape(v))
                   for v, w in zip(self._values, self._weights)]
        weights.append(np.ones(len(self._scalars), dtype=np.int64))
        return (np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values]),
                np.concatenate([w.ravel() for w in weights]))



@dataclass
class Recorder:
    """Per-simulation log shared by the engine (steps) and policies (gaps, events)."""

    gaps: GapLog = field(default_factory=GapLog)  # inter-token latencies
    steps: dict[str, list] = field(default_factory=lambda: {c: [] for c in STEP_COLUMNS})
    num_oom_events: int = 0  # steps that ran out of KV memory
    events: list[tuple[float, str, int, str]] = field(default_factory=list)  # (t, kind, id, info)

    def record_step(self, instance_id: int, start_s: float, duration_s: float,
                    num_iterations: int, num_seqs: int, num_new_tokens: int,
                    num_context_tokens: int, num_computed_tokens: int, kv_tokens: int,
                    reserved_kv_tokens: int, oom: bool, sched_s: float = 0.0,
                    sched_gap_s: float = 0.0, policy_host_s: float = 0.0) -> None:
        """Append one step's row (see STEP_COLUMNS)."""
        row = (instance_id, start_s, duration_s, num_iterations, num_seqs, num_new_tokens,
               num_context_tokens, num_computed_tokens, kv_tokens, reserved_kv_tokens, oom,
               sched_s, sched_gap_s, policy_host_s)
        for column, value in zip(STEP_COLUMNS, row):
            self.steps[column].append(value)
        if oom:
            self.num_oom_events += 1

    def event(self, now: float, kind: str, request_id: int = -1, info: str = "") -> None:
        """Record a notable scheduler event (preemption, OOM split, retraining...)."""
        self.events.append((now, kind, request_id, info))

    def steps_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.steps, columns=list(STEP_COLUMNS))

    def events_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.events, columns=["time_s", "kind", "request_id", "info"])

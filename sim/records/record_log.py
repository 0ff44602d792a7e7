"""Per-request record columns, filled as requests reach a final state.

A run used to keep every `Request` object to the end and build its records from them
(`sim.metrics.summary.request_records`). `RecordLog` takes each request when it is final (finished,
rejected, failed), folds every `FOLD` of them into compact column chunks and drops the
objects, so memory holds the compact columns and the requests in flight only. `columns()`
returns the columns in request-id order with the dtypes `request_records` infers from the whole
list (int64 or float64 chunks where pandas would infer those, the values themselves otherwise).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from sim.core.request import CLASS_FIELDS, Request

FOLD = 16384  # final requests folded into column chunks at a time
CLASS_ATTRIBUTES = dict(CLASS_FIELDS)  # record column -> Request field (class, priority, ...)


def record_columns(requests: Sequence[Request], extra: Sequence[str] = ()) -> dict[str, list]:
    """One list per record column (before derived latencies), in the order of `requests`;
    `extra` names columns added last, each a Request attribute: the class columns the run's
    workload has (sim.core.request.CLASS_FIELDS: column `class` is attribute `request_class`) and
    those of features a run turned on (KV tiers); a run without them has exactly the columns it
    always had."""
    rs = requests
    columns = {
        "request_id": [r.request_id for r in rs], "arrival_s": [r.arrival_s for r in rs],
        "prompt_tokens": [r.num_prompt_tokens for r in rs],
        "output_tokens": [r.num_output_tokens for r in rs],
        "target_output_tokens": [r.target_output_tokens for r in rs],
        "status": [r.status.value for r in rs], "instance_id": [r.instance_id for r in rs],
        "scheduled_s": [r.scheduled_s for r in rs], "first_token_s": [r.first_token_s for r in rs],
        "finish_s": [r.finish_s for r in rs], "num_preemptions": [r.num_preemptions for r in rs],
        "num_recomputed_tokens": [r.num_recomputed_tokens for r in rs],
        "num_padding_tokens": [r.num_padding_tokens for r in rs],
        "max_itl_s": [r.max_itl_s for r in rs],
        "predicted_output_tokens": [r.predicted_output_tokens for r in rs],
        "app": [r.app for r in rs], "num_spec_steps": [r.num_spec_steps for r in rs],
        "num_draft_tokens": [r.num_draft_tokens for r in rs],
        "num_accepted_tokens": [r.num_accepted_tokens for r in rs],
        "num_cached_tokens": [r.num_cached_tokens for r in rs],
        "requested_output_tokens": [r.requested_output_tokens for r in rs],
        "finish_reason": [r.finish_reason for r in rs], "reason": [r.reason for r in rs],
        "reason_detail": [r.reason_detail for r in rs],
    }
    for name in extra:
        attribute = CLASS_ATTRIBUTES.get(name, name)
        columns[name] = [getattr(r, attribute) for r in rs]
    return columns


def compact(values: list) -> np.ndarray | list:
    """`values` as int64 when all are ints, float64 when all are ints or floats (as pandas
    infers a list), else the list itself (pandas infers it when the frame is built)."""
    kinds = set(map(type, values))
    if kinds and all(issubclass(k, (int, np.integer)) and k is not bool for k in kinds):
        return np.asarray(values, dtype=np.int64)
    if kinds and all(issubclass(k, (int, float, np.integer, np.floating)) and k is not bool
                     for k in kinds):
        return np.asarray(values, dtype=np.float64)
    return values


def join(chunks: list[np.ndarray | list], order: np.ndarray) -> np.ndarray | list:
    """Chunks of one column joined and put in `order`: numeric when every chunk is (int64 only
    when all are), else a list for pandas to infer from, as it would from the whole list."""
    if all(isinstance(c, np.ndarray) for c in chunks):
        kind = np.float64 if any(c.dtype == np.float64 for c in chunks) else np.int64
        return np.concatenate(chunks).astype(kind, copy=False)[order]
    joined: list = []
    for c in chunks:
        joined.extend(c.tolist() if isinstance(c, np.ndarray) else c)
    return [joined[i] for i in order.tolist()]


class RecordLog:
    """Records of final requests as column chunks; the request objects are not kept."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self._pending: list[Request] = []  # final requests not yet folded
        self._chunks: dict[str, list[np.ndarray | list]] = {}  # column -> chunks, final order
        self.num_records = 0  # requests recorded
        self.extra = tuple(extra)  # columns recorded after the rest (record_columns)

    def add_columns(self, names: Sequence[str]) -> None:
        """Also record the Request attributes `names` (before any request is recorded)."""
        if self.num_records or self._pending:
            raise RuntimeError("record columns are added before any request is recorded")
        self.extra += tuple(n for n in names if n not in self.extra)

    def add(self, requests: Iterable[Request]) -> None:
        """Record requests that reached a final state (each exactly once)."""
        self._pending.extend(requests)
        if len(self._pending) >= FOLD:
            self._fold()

    def _fold(self) -> None:
        """Compact the pending requests' columns and drop the objects."""
        if not self._pending:
            return
        for name, values in record_columns(self._pending, self.extra).items():
            self._chunks.setdefault(name, []).append(compact(values))
        self.num_records += len(self._pending)
        self._pending = []

    def columns(self) -> dict[str, np.ndarray | list]:
        """Every column in request-id order (dtypes as pandas infers them from whole lists)."""
        self._fold()
        if not self._chunks:
            return record_columns([], self.extra)
        ids = join(self._chunks["request_id"], np.arange(self.num_records))
        order = np.argsort(np.asarray(ids), kind="stable")
        return {name: join(self._chunks.pop(name), order) for name in list(self._chunks)}

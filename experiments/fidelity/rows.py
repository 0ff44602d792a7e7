"""Predicted vs measured rows of the fidelity report (experiments/fidelity/main.py).

One row per measured shape: `stage` (dense, attention, allreduce, step, layers_no_attn), `tp`,
`regime` (a prefill chunk after a KV prefix, kv_tokens > 0, is `prefill_ctx`), the shape
(num_tokens, batch_size, chunk_tokens, kv_tokens, size_bytes), `measured_s`, `predicted_s` and
`error` = predicted / measured - 1. Measured all-reduces include Vidur's CPU launch cost
(sim.measured.profile_cost_model.ALLREDUCE_LAUNCH_S). Composed `step` rows add the layers of a prefill chunk
or a decode batch from measured tables at TPs with attention rows: num_layers x (dense + attention)
+ 2 x num_layers all-reduces (TP > 1); dense (or all-reduce) at a shape between table points is
read log-log from its neighbours (`interpolated`). The per-step fixed cost (embedding, lm_head,
sampling, CPU) is in no table and left out of both sides. `layers_no_attn` rows (TP > 1, where the
shared data has no attention) are num_layers x (dense + 2 all-reduces) at each dense row.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from sim.core.step_shape import BatchShape
from sim.cost.cost_model import ACT_DTYPE_BYTES
from sim.cost.stage_compose import ComposedCostModel
from sim.cost.stage_times import StageTimes
from sim.measured.profile_cost_model import ALLREDUCE_LAUNCH_S
from sim.measured.profile_tables import ProfileTables
from sim.measured.table_interp import LogLogCurve
from sim.models.catalog import ModelSpec

PREFILL_MIN_TOKENS = 512  # a dense row of at least this many tokens is a prefill
SMALL_BATCH_MAX = 8  # decode batch <= this: "decode_small"
LARGE_BATCH_MIN = 32  # decode batch >= this: "decode_large"
REGIMES = ("prefill", "prefill_ctx", "decode_small", "decode_mid", "decode_large")  # order

StagesFor = Callable[[int], StageTimes | None]  # TP -> stage times (None: TP not modelled)


def regime(tokens: float, prefill: bool | None = None, context: float = 0.0) -> str:
    """prefill (a prefill chunk; prefill_ctx: one after `context` cached tokens), else decode
    small / mid / large by batch (a row that does not say: prefill from 512 tokens)."""
    if prefill and context > 0:
        return "prefill_ctx"
    if prefill or (prefill is None and tokens >= PREFILL_MIN_TOKENS):
        return "prefill"
    if tokens <= SMALL_BATCH_MAX:
        return "decode_small"
    return "decode_large" if tokens >= LARGE_BATCH_MIN else "decode_mid"


def _row(stage: str, tp: int, reg: str, measured: float, predicted: float, **shape: float
         ) -> dict:
    return {"stage": stage, "tp": tp, "regime": reg, **shape, "measured_s": measured,
            "predicted_s": predicted, "error": predicted / measured - 1.0}


def dense_rows(tables: ProfileTables, stages_for: StagesFor) -> list[dict]:
    rows = []
    for tp, group in tables.dense.groupby("tp"):
        stages = stages_for(int(tp))
        if stages is None:
            continue
        for n, sec in zip(group["num_tokens"], group["seconds"]):
            rows.append(_row("dense", int(tp), regime(n), sec, stages.dense_layer_s(int(n)),
                             num_tokens=int(n)))
    return rows


def attention_rows(tables: ProfileTables, stages_for: StagesFor) -> list[dict]:
    rows = []
    for r in tables.attention.itertuples(index=False):
        stages = stages_for(int(r.tp))
        if stages is None:
            continue
        b, c, kv = int(r.batch_size), int(r.chunk_tokens), int(r.kv_tokens)
        if r.is_prefill:
            pred, reg = b * stages.attn_prefill_layer_s(c, kv), regime(c, True, kv)
        else:
            pred, reg = stages.attn_decode_layer_s(b, kv), regime(b, False)
        rows.append(_row("attention", int(r.tp), reg, r.seconds, pred, batch_size=b,
                         chunk_tokens=c, kv_tokens=kv))
    return rows


def _allreduce_curves(tables: ProfileTables) -> dict[int, LogLogCurve]:
    net = tables.network[tables.network["collective"] == "all_reduce"]
    return {int(w): LogLogCurve(g["size_bytes"].to_numpy(), g["seconds"].to_numpy(), False)
            for w, g in net.groupby("num_workers")}


def allreduce_rows(tables: ProfileTables, stages_for: StagesFor, hidden_bytes: int
                   ) -> list[dict]:
    rows = []
    net = tables.network[tables.network["collective"] == "all_reduce"]
    for w, group in net.groupby("num_workers"):
        stages = stages_for(int(w))
        if stages is None:
            continue
        for size, sec in zip(group["size_bytes"], group["seconds"]):
            rows.append(_row("allreduce", int(w), regime(size / hidden_bytes),
                             sec + ALLREDUCE_LAUNCH_S, stages.allreduce_s(float(size)),
                             size_bytes=float(size), num_tokens=size / hidden_bytes))
    return rows


def _measured_layers(dense: LogLogCurve, ar: LogLogCurve | None, model: ModelSpec, tp: int,
                     tokens: int, attention_s: float) -> float | None:
    per_layer = dense(tokens)
    if per_layer is None:
        return None
    per_layer += attention_s
    if tp > 1:
        size = tokens * model.hidden_size * ACT_DTYPE_BYTES
        got = ar(size) if ar is not None else None
        if got is None:
            return None
        per_layer += 2.0 * (got + ALLREDUCE_LAUNCH_S)
    return model.num_layers * per_layer


def step_rows(tables: ProfileTables, stages_for: StagesFor, model: ModelSpec) -> list[dict]:
    """Composed layer times of measured prefill chunks and decode batches (see module doc)."""
    rows, curves = [], _allreduce_curves(tables)
    for tp, group in tables.dense.groupby("tp"):
        tp, stages = int(tp), stages_for(int(tp))
        if stages is None:
            continue
        dense = LogLogCurve(group["num_tokens"].to_numpy(float), group["seconds"].to_numpy(),
                            False)
        points = set(group["num_tokens"].astype(int))
        composed = ComposedCostModel(stages, model, tp)
        for r in tables.attention[tables.attention["tp"] == tp].itertuples(index=False):
            if r.is_prefill and r.batch_size != 1:
                continue
            tokens = int(r.chunk_tokens) if r.is_prefill else int(r.batch_size)
            meas = _measured_layers(dense, curves.get(tp), model, tp, tokens, r.seconds)
            if meas is None:
                continue
            shape = (BatchShape(1, r.chunk_tokens, r.kv_tokens, 0, 0.0) if r.is_prefill
                     else BatchShape(0, 0.0, 0.0, int(r.batch_size), r.kv_tokens))
            rows.append(_row("step", tp, regime(tokens, bool(r.is_prefill), r.kv_tokens), meas,
                             composed.layers_s(shape), num_tokens=tokens,
                             batch_size=int(r.batch_size), kv_tokens=int(r.kv_tokens),
                             interpolated=tokens not in points))
        if tp > 1:
            rows += _layers_no_attn(group, dense, curves.get(tp), stages, model, tp)
    return rows


def _layers_no_attn(group: pd.DataFrame, dense: LogLogCurve, ar: LogLogCurve | None,
                    stages: StageTimes, model: ModelSpec, tp: int) -> list[dict]:
    rows = []
    hidden_bytes = model.hidden_size * ACT_DTYPE_BYTES
    for n in group["num_tokens"].astype(int):
        meas = _measured_layers(dense, ar, model, tp, int(n), 0.0)
        if meas is None:
            continue
        pred = model.num_layers * (stages.dense_layer_s(int(n))
                                   + 2.0 * stages.allreduce_s(float(n * hidden_bytes)))
        rows.append(_row("layers_no_attn", tp, regime(n), meas, pred, num_tokens=int(n)))
    return rows


def all_rows(tables: ProfileTables, stages_for: StagesFor, model: ModelSpec) -> pd.DataFrame:
    """Every comparison row of one profile (see the module doc)."""
    hidden_bytes = model.hidden_size * ACT_DTYPE_BYTES
    rows = (dense_rows(tables, stages_for) + attention_rows(tables, stages_for)
            + allreduce_rows(tables, stages_for, hidden_bytes)
            + step_rows(tables, stages_for, model))
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["abs_error"] = np.abs(frame["error"])
    return frame

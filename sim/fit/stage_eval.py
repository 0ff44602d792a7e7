"""Predicted vs measured stage times per regime, for any `StageTimes` (stage model, roofline).

Rows compared (measured tables as `sim.measured.profile_tables.ProfileTables` holds them, seconds):
  dense      one layer outside attention (sum of mlp.csv ops except emb) by (TP, num_tokens);
  attention  one layer's attention kernel (TP 1 rows of the attention table);
  layer      a whole layer on one GPU: at TP 1 dense(n) + attention for each attention row
             (n = chunk, or batch for decode); at every TP dense(n) + 2 all-reduces of the hidden
             states, the measured all-reduce read off the intra-node curve (rolling median of
             ROLLING sizes, interpolated) plus `launch_s` of host launch, as Vidur adds.
Regimes by tokens in the step (decode: batch size): prefill n >= 512, decode_small n <= 8,
decode_large 32 <= n <= 256; other rows are "other". The summary gives per (kind, TP, regime) the
median |relative error|, the signed bias (median of predicted / measured - 1) and the p90.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from sim.cost.stage_times import StageTimes

ROLLING = 9  # sizes in the rolling median that smooths the measured all-reduce curve
PREFILL_MIN_TOKENS = 512  # tokens: a step at least this large is in the prefill regime
SMALL_MAX_BATCH = 8  # decode batches up to this size are decode_small
LARGE_BATCH = (32, 256)  # decode batches in this range are decode_large

StagesFor = Callable[[int], StageTimes]  # TP degree -> the stage times of that deployment


def regime(num_tokens: int, is_prefill: bool | None = None) -> str:
    """The regime of a row with num_tokens tokens (batch size for decode rows)."""
    if is_prefill is True or (is_prefill is None and num_tokens >= PREFILL_MIN_TOKENS):
        return "prefill"
    if num_tokens <= SMALL_MAX_BATCH:
        return "decode_small"
    if LARGE_BATCH[0] <= num_tokens <= LARGE_BATCH[1]:
        return "decode_large"
    return "other"


def measured_allreduce(network: pd.DataFrame, num_workers: int) -> Callable[[float], float]:
    """Seconds of one measured all-reduce of size bytes among num_workers GPUs (no launch)."""
    rows = network[(network["collective"] == "all_reduce")
                   & (network["num_workers"] == num_workers)].sort_values("size_bytes")
    if rows.empty:
        raise ValueError(f"no all_reduce rows for num_workers={num_workers}")
    sizes = rows["size_bytes"].to_numpy(np.float64)
    secs = rows["seconds"].rolling(ROLLING, center=True, min_periods=1).median().to_numpy()
    return lambda size: float(np.interp(size, sizes, secs))


def _row(kind: str, tp: int, reg: str, shape: str, measured: float, predicted: float) -> dict:
    return {"kind": kind, "tp": tp, "regime": reg, "shape": shape, "measured_s": measured,
            "predicted_s": predicted, "rel_err": predicted / measured - 1.0}


def dense_rows(stages_for: StagesFor, dense: pd.DataFrame, hidden_bytes: float,
               network: pd.DataFrame | None, launch_s: float) -> list[dict]:
    """dense and (TP > 1 with a network table) dense + all-reduce layer rows."""
    out = []
    for tp, rows in dense.groupby("tp"):
        tp = int(tp)
        st = stages_for(tp)
        ar = measured_allreduce(network, tp) if tp > 1 and network is not None else None
        for n, meas in zip(rows["num_tokens"].astype(int), rows["seconds"]):
            pred = st.dense_layer_s(n)
            out.append(_row("dense", tp, regime(n), f"n={n}", meas, pred))
            if ar is not None:
                size = hidden_bytes * n
                out.append(_row("layer", tp, regime(n), f"n={n}",
                                meas + 2 * (ar(size) + launch_s),
                                pred + 2 * st.allreduce_s(size)))
    return out


def attention_rows(stages: StageTimes, dense: pd.DataFrame, attention: pd.DataFrame) -> list:
    """TP-1 attention kernel rows and dense + attention layer rows."""
    out = []
    d1 = dense[dense["tp"] == 1].set_index("num_tokens")["seconds"]
    for r in attention[attention["tp"] == 1].itertuples(index=False):
        b, chunk, kv = int(r.batch_size), int(r.chunk_tokens), int(r.kv_tokens)
        if r.is_prefill:
            pred, n, shape = stages.attn_prefill_layer_s(chunk, kv), chunk, f"chunk={chunk} c={kv}"
        else:
            pred, n, shape = stages.attn_decode_layer_s(b, kv), b, f"b={b} kv={kv}"
        reg = regime(n, bool(r.is_prefill))
        out.append(_row("attention", 1, reg, shape, r.seconds, pred))
        if n in d1.index:
            out.append(_row("layer", 1, reg, shape, r.seconds + d1[n],
                            pred + stages.dense_layer_s(n)))
    return out


def compare(stages_for: StagesFor, dense: pd.DataFrame, attention: pd.DataFrame | None = None,
            network: pd.DataFrame | None = None, hidden_bytes: float = 8192.0,
            launch_s: float = 20e-6, tps: tuple[int, ...] = (1, 2, 4)) -> pd.DataFrame:
    """One row per compared shape (see the module docstring)."""
    dense = dense[dense["tp"].isin(tps)]
    rows = dense_rows(stages_for, dense, hidden_bytes, network, launch_s)
    if attention is not None and not attention.empty and 1 in tps:
        rows += attention_rows(stages_for(1), dense, attention)
    return pd.DataFrame(rows)


def summarize(errors: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, tp, regime): rows, median |error|, signed bias, p90 |error|."""
    g = errors.assign(abs_err=errors["rel_err"].abs()).groupby(["kind", "tp", "regime"])
    return pd.DataFrame({"rows": g.size(), "median_abs": g["abs_err"].median(),
                         "bias": g["rel_err"].median(),
                         "p90_abs": g["abs_err"].quantile(0.9)}).reset_index()

"""Fit one GPU's `StageParams` from one model's measured profile at TP 1.

Each stage is fitted on its own rows by least squares on log-time (relative error) with
scipy.optimize.least_squares, the parameters searched in log space within physical bounds:
  GEMM    gemm_* on the four GEMM ops of mlp.csv (attn_pre_proj, attn_post_proj, mlp_up_proj,
          mlp_down_proj), every num_tokens, TP 1;
  small   norm/rope/act/add efficiencies and small_fixed_s on the norm, RoPE, act and add ops;
  prefill attn_prefill_* on the prefill attention rows;
  decode  attn_decode_* on the decode attention rows;
          rows with prefill over a KV prefix fit the kernel of sim/cost/stage_attention.py with its
          span, split-KV, decode work item and floor (CONTEXT_PREFILL_FIELDS, CONTEXT_DECODE_
          FIELDS; from CONTEXT_START's values where `base` has none); rows without fit the
          chunk-only terms (PREFILL_FIELDS, DECODE_FIELDS) with those set to 0;
  network one (latency, bus bandwidth) per group size on the intra-node all_reduce curve.
Parameters no profile row measures (sampler, CPU/engine, all-reduce launch) are kept from the
`base` params. Inputs are the DataFrames of `sim.measured.profile_tables.ProfileTables` (seconds).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from sim.cost.cost_model import DeploymentSpec
from sim.cost.stage_model import StageCostModel
from sim.cost.stage_params import AllReduceParams, StageParams
from sim.hardware.gpus import GPUSpec
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SMALL_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
GEMM_FIELDS = ("gemm_compute_eff", "gemm_half_tokens", "gemm_weight_eff", "gemm_fixed_s")
SMALL_FIELDS = ("norm_eff", "rope_eff", "act_eff", "add_eff", "small_fixed_s")
PREFILL_FIELDS = ("attn_prefill_eff", "attn_prefill_half_tokens", "attn_prefill_fixed_s")
DECODE_FIELDS = ("attn_decode_eff_small", "attn_decode_eff_large", "attn_decode_half_batch",
                 "attn_decode_fixed_s")
# the attention kernel over a KV prefix (sim/cost/stage_attention.py): span and split-KV terms
CONTEXT_PREFILL_FIELDS = ("attn_prefill_eff", "attn_prefill_key_s", "attn_prefill_split_rows",
                          "attn_prefill_fixed_s")
CONTEXT_DECODE_FIELDS = (*DECODE_FIELDS, "attn_decode_item_s", "attn_decode_floor_s",
                         "attn_decode_floor_half_tokens")
BOUNDS = {  # (low, high) of each fitted field
    "gemm_half_tokens": (0.5, 4096.0), "attn_prefill_half_tokens": (1.0, 16384.0),
    "attn_decode_half_batch": (0.5, 1024.0),
    "gemm_fixed_s": (1e-7, 1e-4), "small_fixed_s": (1e-7, 1e-4),
    "attn_prefill_fixed_s": (1e-7, 2e-4), "attn_decode_fixed_s": (1e-7, 2e-4),
    "attn_prefill_key_s": (1e-10, 1e-6), "attn_prefill_split_rows": (1.0, 1e7),
    "attn_decode_item_s": (1e-11, 1e-6), "attn_decode_floor_s": (1e-7, 2e-4),
    "attn_decode_floor_half_tokens": (1.0, 16384.0)}
EFF_BOUNDS = (0.01, 1.0)  # every efficiency: a fraction of the datasheet peak
LL_MIN_BW = 2e9  # bytes/s: a low-latency all-reduce protocol slower than this fits noise
LL_MIN_SIZES = 8  # measured sizes on which a low-latency protocol must be the faster one

Predict = Callable[[StageParams], np.ndarray]

# Where every fit starts unless told otherwise: round physical guesses (issue 12's figures:
# ~70-80% of peak streaming, 5-20 us per kernel, ~16-20% prefill attention, 20 us launch). The
# log-time objective is flat along some directions (gemm_half_tokens vs gemm_compute_eff), so
# the start is part of a fit's provenance: sim/cost/gpu_params.py's A100 values are fitted from it.
FIT_START = StageParams(
    gemm_compute_eff=0.72, gemm_half_tokens=20.0, gemm_weight_eff=0.78, gemm_fixed_s=4e-6,
    norm_eff=0.35, rope_eff=0.45, act_eff=0.5, add_eff=0.9, small_fixed_s=4e-6,
    attn_prefill_eff=0.18, attn_prefill_half_tokens=400.0, attn_prefill_fixed_s=10e-6,
    attn_decode_eff_small=0.6, attn_decode_eff_large=1.0, attn_decode_half_batch=24.0,
    attn_decode_fixed_s=10e-6,
    allreduce=AllReduceParams((2, 4, 8), (30e-6, 30e-6, 35e-6), (150e9, 160e9, 170e9)),
    allreduce_launch_s=20e-6, sampler_fixed_s=0.2e-3, sampler_per_seq_s=2e-6, cpu_step_s=2.5e-3,
    cpu_per_seq_s=5e-6)
# Where a fit of the attention kernel over a KV prefix starts (the A100's FlashInfer set is
# fitted from it): a FLOP rate independent of the chunk, a 100 ns/key span split below 50k
# query rows, 10 ns per decode work item, a 20 us split-KV floor reached at ~100 tokens
CONTEXT_START = replace(
    FIT_START, attn_prefill_eff=0.6, attn_prefill_half_tokens=0.0, attn_prefill_key_s=1e-7,
    attn_prefill_split_rows=5e4, attn_decode_item_s=1e-8, attn_decode_floor_s=2e-5,
    attn_decode_floor_half_tokens=100.0)


def _bounds(name: str) -> tuple[float, float]:
    return BOUNDS.get(name, EFF_BOUNDS)


def fit_fields(base: StageParams, names: Sequence[str], measured_s: np.ndarray,
               predict: Predict) -> StageParams:
    """`base` with `names` replaced by the least-squares fit of log(predict) to log(measured)."""
    measured = np.asarray(measured_s, dtype=np.float64)
    if measured.size < len(names) or not np.all(measured > 0):
        raise ConfigError("profile", int(measured.size),
                          f"need at least {len(names)} positive measured rows to fit "
                          f"{', '.join(names)}")
    lo = np.log([_bounds(n)[0] for n in names])
    hi = np.log([_bounds(n)[1] for n in names])
    x0 = np.clip(np.log([getattr(base, n) for n in names]), lo + 1e-9, hi - 1e-9)
    log_meas = np.log(measured)
    from scipy.optimize import least_squares  # lazy: scipy comes with scikit-learn

    def residuals(x: np.ndarray) -> np.ndarray:
        params = replace(base, **dict(zip(names, np.exp(x).tolist())))
        return np.log(np.maximum(predict(params), 1e-12)) - log_meas

    sol = least_squares(residuals, x0, bounds=(lo, hi), x_scale=1.0, xtol=1e-10, ftol=1e-10)
    return replace(base, **dict(zip(names, np.exp(sol.x).tolist())))


def _model(model: ModelSpec, gpu: GPUSpec, params: StageParams) -> StageCostModel:
    return StageCostModel(DeploymentSpec(model, gpu, 1, activation_reserve_bytes=0), params)


def fit_dense(base: StageParams, model: ModelSpec, gpu: GPUSpec,
              dense: pd.DataFrame) -> StageParams:
    """GEMM then small-kernel fields from TP-1 rows of a dense table (<op>_s columns)."""
    rows = dense[dense["tp"] == 1]
    if rows.empty:
        raise ConfigError("profile.dense.tp", sorted(dense["tp"].unique().tolist()),
                          "no TP 1 rows to fit on")
    tokens = rows["num_tokens"].to_numpy(np.float64)

    def predictor(ops: Sequence[str]) -> Predict:
        def predict(params: StageParams) -> np.ndarray:
            m = _model(model, gpu, params)
            per_n = [m.dense_ops_s(n) for n in tokens]
            return np.array([[d[op] for d in per_n] for op in ops]).ravel()
        return predict

    for names, ops in ((GEMM_FIELDS, GEMM_OPS), (SMALL_FIELDS, SMALL_OPS)):
        measured = np.concatenate([rows[f"{op}_s"].to_numpy(np.float64) for op in ops])
        base = fit_fields(base, names, measured, predictor(ops))
    return base


def attention_fields(base: StageParams) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(prefill, decode) fields of `base`'s attention form: the KV-prefix kernel's when it has
    a prefill span, else the chunk-only ones."""
    if base.attn_prefill_key_s > 0:
        return CONTEXT_PREFILL_FIELDS, CONTEXT_DECODE_FIELDS
    return PREFILL_FIELDS, DECODE_FIELDS


def attention_start(base: StageParams, with_context: bool) -> StageParams:
    """`base` in the attention form the rows call for (module doc): the KV-prefix kernel's,
    its unset terms from CONTEXT_START, or the chunk-only one, the other terms 0."""
    if with_context:
        extra = [*CONTEXT_PREFILL_FIELDS, *CONTEXT_DECODE_FIELDS]
        return replace(base, attn_prefill_half_tokens=0.0, **{
            f: getattr(CONTEXT_START, f) for f in extra if getattr(base, f) <= 0})
    half = base.attn_prefill_half_tokens or FIT_START.attn_prefill_half_tokens
    return replace(base, attn_prefill_half_tokens=half, attn_prefill_key_s=0.0,
                   attn_prefill_split_rows=0.0, attn_decode_item_s=0.0, attn_decode_floor_s=0.0,
                   attn_decode_floor_half_tokens=0.0)


def fit_attention(base: StageParams, model: ModelSpec, gpu: GPUSpec,
                  attention: pd.DataFrame) -> StageParams:
    """Prefill and decode attention fields from TP-1 attention rows, in the form they call for
    (`attention_start`)."""
    rows = attention[attention["tp"] == 1]
    pre, dec = rows[rows["is_prefill"]], rows[~rows["is_prefill"]]
    base = attention_start(base, bool((pre["kv_tokens"] > 0).any()))

    def predict_pre(params: StageParams) -> np.ndarray:
        m = _model(model, gpu, params)
        return np.array([m.attn_prefill_layer_s(n, c) for n, c in
                         zip(pre["chunk_tokens"], pre["kv_tokens"])])

    def predict_dec(params: StageParams) -> np.ndarray:
        m = _model(model, gpu, params)
        return np.array([m.attn_decode_layer_s(b, kv) for b, kv in
                         zip(dec["batch_size"], dec["kv_tokens"])])

    prefill_fields, decode_fields = attention_fields(base)
    # decode first: a prefill's KV reads bound it at the decode kernel's large-batch rate
    base = fit_fields(base, decode_fields, dec["seconds"].to_numpy(), predict_dec)
    return fit_fields(base, prefill_fields, pre["seconds"].to_numpy(), predict_pre)


def _fit_alpha_beta(moved: np.ndarray, log_t: np.ndarray, x0: list[float], lo: list[float],
                    hi: list[float]) -> tuple[np.ndarray, float]:
    """exp(params) and cost of the least-squares fit of log t = log min over protocols of
    (latency + moved / bandwidth); params alternate (latency, bandwidth) per protocol."""
    from scipy.optimize import least_squares  # lazy: scipy comes with scikit-learn

    def residuals(x: np.ndarray) -> np.ndarray:
        lat, bw = np.exp(x[0::2]), np.exp(x[1::2])
        return np.log(np.min(lat[:, None] + moved[None, :] / bw[:, None], axis=0)) - log_t

    sol = least_squares(residuals, np.log(x0), bounds=(np.log(lo), np.log(hi)))
    return np.exp(sol.x), float(sol.cost)


def fit_allreduce(network: pd.DataFrame) -> AllReduceParams:
    """Per group size, the bulk protocol (latency, bus bandwidth) fitted on log-time of the
    all_reduce curve, t = latency + size * 2 (w - 1) / w / bus_bandwidth, then a low-latency
    protocol beside it (t = the faster of the two, as NCCL picks LL for small messages). Where
    the second protocol is the faster one on fewer than LL_MIN_SIZES measured sizes, or sits at
    its bandwidth bound (a fit to a few noisy points), it is a copy of the first."""
    rows = network[network["collective"] == "all_reduce"]
    workers = sorted(int(w) for w in rows["num_workers"].unique() if w >= 2)
    if not workers:
        raise ConfigError("profile.network", "all_reduce", "no all_reduce rows with >= 2 workers")
    out: list[tuple[float, float, float, float]] = []
    for w in workers:
        r = rows[rows["num_workers"] == w]
        moved = r["size_bytes"].to_numpy(np.float64) * 2 * (w - 1) / w
        log_t = np.log(r["seconds"].to_numpy(np.float64))
        (lat, bus), _ = _fit_alpha_beta(moved, log_t, [20e-6, 100e9], [1e-7, 1e8],
                                           [1e-3, 1e13])
        both, _ = _fit_alpha_beta(moved, log_t, [lat / 2, LL_MIN_BW * 5, lat, bus],
                                  [1e-7, LL_MIN_BW, 1e-7, 1e8], [lat, bus, 1e-3, 1e13])
        ll_wins = both[0] + moved / both[1] < both[2] + moved / both[3]
        if ll_wins.sum() >= LL_MIN_SIZES and both[1] > 1.01 * LL_MIN_BW:
            out.append((float(both[2]), float(both[3]), float(both[0]), float(both[1])))
        else:
            out.append((float(lat), float(bus), float(lat), float(bus)))
    lat_, bus_, ll_lat_, ll_bw_ = (tuple(col) for col in zip(*out))
    return AllReduceParams(tuple(workers), lat_, bus_, ll_lat_, ll_bw_)


def fit_stage_params(base: StageParams, model: ModelSpec, gpu: GPUSpec, dense: pd.DataFrame,
                     attention: pd.DataFrame | None = None,
                     network: pd.DataFrame | None = None) -> StageParams:
    """Every stage the given tables measure, fitted at TP 1; the rest kept from `base`."""
    params = fit_dense(base, model, gpu, dense)
    if attention is not None and not attention.empty:
        params = fit_attention(params, model, gpu, attention)
    if network is not None and (network["collective"] == "all_reduce").any():
        params = replace(params, allreduce=fit_allreduce(network))
    return params


def fit_from_profile_dir(path: str | Path, base: StageParams, model: ModelSpec, gpu: GPUSpec,
                         profile_model: str | None = None,
                         profile_gpu: str | None = None) -> StageParams:
    """Read a Vidur-layout profile (`sim.measured.profile_tables.load_profiles`) and fit on it."""
    from sim.measured.profile_tables import load_profiles  # pandas readers, only when fitting

    tables = load_profiles(path, model=profile_model, gpu=profile_gpu)
    return fit_stage_params(base, model, gpu, tables.dense, tables.attention, tables.network)

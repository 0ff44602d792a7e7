"""A real engine's iteration time: host work overlapped with device work (torch-free).

An engine iteration is two streams of work. The host prepares inputs and launches kernels
(`host`: a cost per iteration, per scheduled request, per extra prefill chunk, and once per
Step); the device streams the weights or computes the dense matmuls, whichever takes longer,
then attention (prefill FLOPs over each query's keys, decode KV bytes) and a floor of fixed
kernel latencies (`device`). An eager engine launch-bound at small batches runs at the host's
pace, a CUDA-graph engine at the device's. A CUDA-graph engine replays its decode-only
iterations of up to `max_graph_batch` rows from graphs and launches every other iteration (any
prefill chunk, or a larger batch) kernel by kernel: those pay `eager_host_s` more host work, so a
small mixed step runs at the eager launch pace while a decode beside it does not; an iteration
holding both prefill chunks and decode rows launches both attention kernels (and the copy that
merges them) in every layer, `mixed_host_s` more. An engine that also captures iterations with
prefill chunks (`max_graph_tokens`, `sim/cost/graph_plan.py`) replays those of up to that many tokens
without either cost, its dense layers computing the token bucket's padding. Decode attention streams the rows' KV at
`kv_efficiency` of HBM bandwidth when the split-KV kernel fills the GPU; with few rows each
program streams at a share of it, `kv_programs` programs together reaching that rate, and the
iteration waits for the busiest program: the longest row's split (`sim/cost/split_kv.py`, the plan
the paged kernel launches, for a GPU of `decode_split_sms` SMs). The iteration takes the smooth maximum
`(host**p + device**p) ** (1 / p)`, with `p` fitted (`overlap`: 1 is host and device in series,
a large p is full overlap). When the host waits for an iteration's end (a Step that may stop at
an arrival reads the clock after each iteration), the device idles while the host prepares the
next one: `sync_host_s` per such iteration, in series. An engine whose kernels build a plan per
attention shape (torch's
sdpa backends, cuDNN) also pays `new_shape_s` the first time it runs each shape
(`sim/cost/engine_shapes.py` keeps the shapes it has run). Every term is physics of the engine and the
GPU, fitted on a profile and on replayed steps (`real/fit_engine.py`), so it carries to shapes and
schedules the profile never timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from sim.core.executor import Step
from sim.cost.graph_plan import mixed_graph_tokens
from sim.cost.split_kv import longest_split_tokens
from sim.hardware.gpus import GPUSpec
from sim.models.catalog import ModelSpec
from sim.util.errors import ConfigError, check_positive

DECODE_KV_MODES = ("paged", "padded")
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass(frozen=True)
class EngineTimeParams:
    """Fitted constants of one engine on one GPU."""

    iteration_host_s: float = 0.0  # seconds of host work per iteration (inputs, launches)
    per_seq_host_s: float = 0.0  # seconds of host work per scheduled request per iteration
    per_chunk_host_s: float = 0.0  # seconds per prefill chunk beyond the first (own kernels)
    step_host_s: float = 0.0  # seconds of host work once per Step (in its first iteration)
    sync_host_s: float = 0.0  # seconds the device idles after an iteration the host waits for
    new_shape_s: float = 0.0  # seconds the first run of an attention shape costs (plans)
    eager_host_s: float = 0.0  # seconds of host work (kernel launches) an iteration launched
    # eagerly adds over a CUDA-graph replay (only where max_graph_batch > 0)
    kv_programs: float = 0.0  # decode-attention programs that together stream KV at
    # kv_efficiency of HBM bandwidth (0: the longest row is not modelled)
    mixed_host_s: float = 0.0  # seconds of host work an iteration with both prefill chunks and
    # decode rows adds (the second attention kernel's launches in every layer)
    chunk_graph_host_s: float = 0.0  # seconds an iteration replayed from a graph of prefill
    # chunks (max_graph_tokens) adds: its rows, chunks and tiles written into the graph's inputs
    weight_efficiency: float = 0.85  # fraction of HBM bandwidth streaming the weights reaches
    compute_efficiency: float = 0.6  # fraction of peak tensor FLOP/s the dense matmuls reach
    attention_efficiency: float = 0.3  # fraction of peak tensor FLOP/s prefill attention reaches
    kv_efficiency: float = 0.6  # fraction of HBM bandwidth decode attention's KV reads reach
    device_floor_s: float = 0.0  # seconds of device time per iteration whatever its size
    overlap: float = 8.0  # p of the smooth maximum of host and device time (1: in series)
    roofline_p: float = 0.0  # p of the smooth maximum of weight streaming and dense compute
    # (0: the hard maximum; small p: the matmuls' memory and compute phases add near the ridge)
    decode_kv: str = "paged"  # paged: a decode row reads its own KV; padded: every decode row
    # reads the batch's longest KV (a padded decode batch, as the sdpa backend runs it)
    shape_granularity: int = 0  # tokens attention shapes are padded to (0: no per-shape cost)
    decode_split_sms: int = 0  # SMs the split-KV decode kernel plans its splits for (0: none)
    max_graph_batch: int = 0  # decode-only iterations of up to this many rows replay a CUDA
    # graph (0: the engine has none, every iteration is launched eagerly)
    max_graph_tokens: int = 0  # tokens: iterations with prefill chunks of up to this many replay
    # a CUDA graph padded to their token bucket (0, or no decode graphs: launched eagerly)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f.name, value, "must be finite")
        for name in ("iteration_host_s", "per_seq_host_s", "per_chunk_host_s", "step_host_s",
                     "sync_host_s", "new_shape_s", "eager_host_s", "mixed_host_s",
                     "chunk_graph_host_s", "device_floor_s"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("weight_efficiency", "compute_efficiency", "attention_efficiency",
                     "kv_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ConfigError(name, value, "must be a fraction in (0, 1]")
        if not 1.0 <= self.overlap <= 64.0:
            raise ConfigError("overlap", self.overlap, "must be in [1, 64]")
        if not (self.roofline_p == 0.0 or 1.0 <= self.roofline_p <= 64.0):
            raise ConfigError("roofline_p", self.roofline_p, "must be 0 (hard maximum) or in "
                              "[1, 64]")
        if self.decode_kv not in DECODE_KV_MODES:
            raise ConfigError("decode_kv", self.decode_kv, f"one of {', '.join(DECODE_KV_MODES)}")
        check_positive("shape_granularity", self.shape_granularity, allow_zero=True)
        check_positive("max_graph_batch", self.max_graph_batch, allow_zero=True)
        check_positive("max_graph_tokens", self.max_graph_tokens, allow_zero=True)
        check_positive("decode_split_sms", self.decode_split_sms, allow_zero=True)
        check_positive("kv_programs", self.kv_programs, allow_zero=True)


@dataclass(frozen=True)
class EngineWork:
    """What one iteration moves and computes on the profiled deployment (one GPU)."""

    weight_bytes: float  # bytes of weights an iteration streams (layers and lm_head)
    flops_per_token: float  # dense matmul FLOPs per computed token
    flops_per_sample: float  # lm_head FLOPs per sampled row
    flops_per_pair: float  # attention FLOPs per (query, key) pair over all layers
    kv_bytes_per_token: float  # bytes of K and V per cached token over all layers
    hbm_bandwidth: float  # bytes/s
    peak_flops: float  # tensor FLOP/s
    num_kv_heads: int = 1  # KV heads per layer on the GPU (decode programs per row and split)
    max_seq_len: int = 4096  # tokens: the longest context the decode kernel plans splits for

    @classmethod
    def of(cls, model: ModelSpec, gpu: GPUSpec, dtype: str) -> "EngineWork":
        if dtype not in DTYPE_BYTES:
            raise ConfigError("engine_dtype", dtype, f"one of {', '.join(DTYPE_BYTES)}")
        elem = DTYPE_BYTES[dtype]
        dense = model.num_layers * model.num_dense_params_per_layer
        head = model.hidden_size * model.vocab_size
        return cls(weight_bytes=float(elem * (dense + head)), flops_per_token=2.0 * dense,
                   flops_per_sample=2.0 * head,
                   flops_per_pair=4.0 * model.num_layers * model.num_attention_heads
                   * model.head_dim,
                   kv_bytes_per_token=float(2 * model.num_layers * model.num_kv_heads
                                            * model.head_dim * elem),
                   hbm_bandwidth=gpu.hbm_bandwidth, peak_flops=gpu.peak_tensor_flops,
                   num_kv_heads=model.num_kv_heads, max_seq_len=model.max_position_embeddings)


@dataclass(frozen=True)
class IterationFeatures:
    """Per-iteration arrays (one entry per iteration) the time model reads."""

    num_tokens: np.ndarray  # tokens computed
    num_seqs: np.ndarray  # requests scheduled
    num_sampled: np.ndarray  # rows that sample a token
    num_prefill: np.ndarray  # rows computing more than one token (prefill chunks)
    pairs: np.ndarray  # (query, key) pairs attention computes: sum n*c + n*(n+1)/2
    kv_paged: np.ndarray  # KV tokens decode rows read, each its own
    kv_padded: np.ndarray  # decode rows x the longest decode row's KV
    first: np.ndarray  # 1.0 for a Step's first iteration
    synced: np.ndarray  # 1.0 where the host waits for the iteration's end (watched Steps)
    kv_longest: np.ndarray  # KV tokens of the longest decode row


def step_iteration_features(step: Step, num_iterations: int, synced: bool = False
                            ) -> IterationFeatures:
    """Features of the first `num_iterations` iterations of `step` (later ones decode);
    `synced`: the engine reads the clock after each iteration (a finite `until_s`)."""
    k = max(num_iterations, 1)
    n = np.asarray(step.num_new_tokens, dtype=np.float64)
    c = np.asarray(step.num_context_tokens, dtype=np.float64)
    b = float(len(n))
    kv = c + n
    dec = n == 1
    dec_max = kv[dec].max() if dec.any() else 0.0
    j = np.arange(k, dtype=np.float64)
    later = j[1:]  # iteration index; iteration j > 0 decodes every row at kv + j
    total_kv = float(kv.sum())
    top = float(kv.max()) if b else 0.0

    def column(first: float, rest: np.ndarray | float) -> np.ndarray:
        out = np.empty(k)
        out[0] = first
        out[1:] = rest
        return out

    return IterationFeatures(
        num_tokens=column(float(n.sum()), b), num_seqs=np.full(k, b),
        num_sampled=column(float(sum(step.samples)), b),
        num_prefill=column(float((~dec).sum()), 0.0),
        pairs=column(float((n * c).sum() + (n * (n + 1)).sum() / 2), total_kv + later * b),
        kv_paged=column(float(kv[dec].sum()), total_kv + later * b),
        kv_padded=column(float(dec.sum()) * dec_max, b * (top + later)),
        first=column(1.0, 0.0), synced=np.full(k, 1.0 if synced else 0.0),
        kv_longest=column(dec_max, top + later))


def smooth_max(a: np.ndarray | float, b: np.ndarray, p: float) -> np.ndarray:
    """(a**p + b**p) ** (1 / p), the hard maximum at p = 0 (or where both are 0)."""
    if p == 0.0:
        return np.maximum(a, b)
    top = np.maximum(np.maximum(a, b), 1e-300)
    return top * ((a / top) ** p + (b / top) ** p) ** (1.0 / p)


class EngineTimeModel:
    """Iteration times of an engine from `EngineTimeParams` and the deployment's work."""

    sync_aware = True  # iteration_times takes `synced` (sim.measured.calibrated.TimeModel)

    def __init__(self, params: EngineTimeParams, work: EngineWork) -> None:
        self.params = params  # fitted constants
        self.work = work  # bytes and FLOPs of the deployment

    def device_s(self, f: IterationFeatures, graph: np.ndarray | None = None) -> np.ndarray:
        """Device seconds of each iteration (`graph`: `graph_tokens(f)`, if already known)."""
        p, w = self.params, self.work
        stream = w.weight_bytes / (w.hbm_bandwidth * p.weight_efficiency)
        tokens = np.maximum(f.num_tokens, self.graph_tokens(f) if graph is None else graph)
        dense = ((w.flops_per_token * tokens + w.flops_per_sample * f.num_sampled)
                 / (w.peak_flops * p.compute_efficiency))
        kv = f.kv_padded if p.decode_kv == "padded" else f.kv_paged
        if p.decode_split_sms > 0 and p.kv_programs > 0.0:
            split = longest_split_tokens(f.kv_longest, f.num_seqs - f.num_prefill,
                                         w.num_kv_heads, w.max_seq_len, p.decode_split_sms)
            kv = np.maximum(kv, split * (p.kv_programs / w.num_kv_heads))
        attention = (w.flops_per_pair * f.pairs / (w.peak_flops * p.attention_efficiency)
                     + w.kv_bytes_per_token * kv / (w.hbm_bandwidth * p.kv_efficiency))
        return smooth_max(stream, dense, p.roofline_p) + attention + p.device_floor_s

    def graph_tokens(self, f: IterationFeatures) -> np.ndarray:
        """Per iteration no decode graph serves, the token bucket of the graph replaying it
        (0: launched eagerly, or served by a decode graph)."""
        p = self.params
        if p.max_graph_batch <= 0 or p.max_graph_tokens <= 0:
            return np.zeros_like(f.num_tokens)
        other = (f.num_prefill > 0) | (f.num_seqs > p.max_graph_batch)
        bucket = mixed_graph_tokens(f.num_tokens, f.num_prefill, f.num_seqs - f.num_prefill,
                                    p.max_graph_tokens, p.max_graph_batch)
        return np.where(other, bucket, 0).astype(np.float64)

    def eager(self, f: IterationFeatures, graph: np.ndarray | None = None) -> np.ndarray:
        """1.0 for iterations launched kernel by kernel, 0.0 for CUDA-graph replays."""
        limit = self.params.max_graph_batch
        if limit <= 0:
            return np.ones_like(f.num_seqs)
        other = (f.num_prefill > 0) | (f.num_seqs > limit)
        if self.params.max_graph_tokens <= 0:
            return other.astype(np.float64)
        graph = self.graph_tokens(f) if graph is None else graph
        return (other & (graph == 0)).astype(np.float64)

    def host_s(self, f: IterationFeatures, graph: np.ndarray | None = None) -> np.ndarray:
        """Host seconds of each iteration (`graph`: `graph_tokens(f)`, if already known)."""
        p = self.params
        if p.max_graph_tokens > 0 and graph is None and (
                p.eager_host_s > 0.0 or p.mixed_host_s > 0.0 or p.chunk_graph_host_s > 0.0):
            graph = self.graph_tokens(f)
        host = (p.iteration_host_s + p.per_seq_host_s * f.num_seqs
                + p.per_chunk_host_s * np.maximum(f.num_prefill - 1.0, 0.0)
                + p.step_host_s * f.first)
        if p.max_graph_batch > 0 and p.eager_host_s > 0.0:
            host = host + p.eager_host_s * self.eager(f, graph)
        if p.mixed_host_s > 0.0:
            mixed = (f.num_prefill > 0) & (f.num_seqs > f.num_prefill) & (self.eager(f, graph)
                                                                          > 0)
            host = host + p.mixed_host_s * mixed
        if p.chunk_graph_host_s > 0.0 and graph is not None:
            host = host + p.chunk_graph_host_s * (graph > 0)
        return host

    def times(self, f: IterationFeatures) -> np.ndarray:
        """Seconds of each iteration (without first-run shape costs)."""
        graph = self.graph_tokens(f)
        host, device = self.host_s(f, graph), self.device_s(f, graph)
        p = self.params.overlap
        gap = self.params.sync_host_s * f.synced
        if p == 1.0:
            return host + device + gap
        return smooth_max(host, device, p) + gap

    def iteration_times(self, step: Step, num_iterations: int,
                        synced: bool = False) -> np.ndarray:
        return self.times(step_iteration_features(step, num_iterations, synced))

"""The stage cost model: per-stage times of one deployment from per-GPU `StageParams`.

Implements `sim.cost.stage_times.StageTimes` (each stage on ONE GPU of the TP group) and composes an
iteration as

    num_layers * (dense_layer_s(N) + attention) + k * num_layers * allreduce_s(2 h N) (TP > 1)
    + step_fixed_s(num_seqs, num_sampled)

(k = `ModelSpec.allreduces_per_layer`: 2, 1 with parallel attention; the GPU part at least
num_layers * cpu_launch_per_layer_s, host launch work it overlaps) with
the formulas of `sim/cost/stage_params.py` (attention: `sim/cost/stage_attention.py`; several prefill
chunks of a step run as one kernel over equal chunks with the step's sums, `sim/core/step_shape.py`).
Fixed per-kernel and per-layer costs do not divide by TP; only the work does.
`iteration_times_from_sums` has the signature and semantics of
`RooflineCostModel.iteration_times_from_sums`, so `CostModelExecutor` can run either. Torch-free;
constants are folded in `__init__` so a call is a few float operations (plus one numpy
expression over the decode iterations of a multi-iteration step). MoE and MLA models compose
their layers in `sim/cost/moe_stage.py` (routed experts at the distinct experts a batch touches,
expert parallelism's all-to-alls); their MoE terms depend on the batch size only, so a decode
run's later iterations stay one numpy expression.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from sim.core.run_ends import ends_of
from sim.core.step_shape import split_from_sums
from sim.cost.cost_model import ACT_DTYPE_BYTES, DeploymentSpec, kv_dtype_bytes, weight_dtype_bytes
from sim.cost.moe_stage import MoEStageTerms
from sim.cost.sampler_cost import LOGIT_BYTES
from sim.cost.score_buffer import ScoreBuffer, ScoreTerms
from sim.cost.stage_attention import AttentionTerms
from sim.cost.stage_params import StageParams
from sim.hardware.gpus import dense_peak_flops


CACHE_ENTRIES = 1 << 16  # memoised dense-layer and fixed-cost entries kept at most


class StageCostModel:
    """Per-stage and per-iteration seconds of a deployment (see the module docstring)."""

    __slots__ = ("deployment", "params", "_layers", "_tp", "_gemms", "_inv_c", "_inv_w",
                 "_half", "_gemm_fixed", "_small_fixed", "_small_spt", "_attn", "_inv_bw",
                 "_ar_fixed", "_ar_spb", "_ar_ll_fixed", "_ar_ll_spb", "_launch_floor",
                 "_overlap", "_hidden_bytes", "_lm_gemm", "_emb_spt", "_norm_spt",
                 "_vocab_bytes", "_moe", "_decode_cache", "_sampler_spr", "_scores",
                 "_ar_per_layer", "_dense_cache", "_fixed_cache")

    def __init__(self, deployment: DeploymentSpec, params: StageParams,
                 score_buffer: ScoreBuffer | None = None) -> None:
        self.deployment = deployment  # the instance modelled
        self.params = params  # the GPU's stage parameters
        m, gpu, tp = deployment.model, deployment.gpu, deployment.tensor_parallel
        p = params
        h, hd = m.hidden_size, m.head_dim
        heads, kvh = m.num_attention_heads // tp, deployment.kv_heads_per_gpu  # per GPU
        inter = m.intermediate_size / tp  # MLP width per GPU (elements)
        up_out = (2 if m.gated_mlp else 1) * inter
        wb = weight_dtype_bytes(deployment.weight_dtype)
        qkv_out = (heads + 2 * kvh) * hd
        shapes = ((h, qkv_out), (heads * hd, h), (h, up_out), (inter, h))  # (in, out) per GEMM
        self._layers = m.num_layers  # layers
        self._launch_floor = m.num_layers * p.cpu_launch_per_layer_s  # seconds per iteration
        self._overlap = p.cpu_overlapped  # host work beside the GPU's (async scheduling)
        self._tp = tp  # GPUs in the group
        self._gemms = tuple(self._gemm_consts(k, o, wb) for k, o in shapes)  # per GEMM
        # s/FLOP at max eff: fp8 (W8A8) weights run the dense GEMMs on fp8 tensor cores
        self._inv_c = 1.0 / (dense_peak_flops(gpu, deployment.weight_dtype) * p.gemm_compute_eff)
        self._inv_w = 1.0 / (gpu.hbm_bandwidth * p.gemm_weight_eff)  # s/byte
        self._half = p.gemm_half_tokens  # tokens
        self._gemm_fixed = p.gemm_fixed_s  # seconds per GEMM
        inv_bw = 1.0 / gpu.hbm_bandwidth  # s/byte at peak
        self._inv_bw = inv_bw  # s/byte at peak
        a = ACT_DTYPE_BYTES
        self._norm_spt = 2 * h * a * inv_bw / p.norm_eff  # s/token of one norm (read + write)
        self._emb_spt = 2 * h * a * inv_bw / p.add_eff  # s/token of the embedding gather
        self._small_spt = (2 * self._norm_spt  # two norms per layer
                           + 2 * (heads + kvh) * hd * a * inv_bw / p.rope_eff  # q, k in + out
                           + (up_out + inter) * a * inv_bw / p.act_eff  # act in + out
                           + 3 * h * a * inv_bw / p.add_eff)  # s/token; add: 2 in + 1 out
        self._small_fixed = 5 * p.small_fixed_s  # seconds: 2 norms, RoPE, act, add per layer
        lat, bus = p.allreduce.curve(tp)
        self._ar_fixed = (p.allreduce_launch_s + lat) if tp > 1 else 0.0  # seconds
        self._ar_spb = (2 * (tp - 1) / tp / bus) if tp > 1 else 0.0  # seconds per byte
        ll = p.allreduce.ll_curve(tp) if tp > 1 else None
        self._ar_ll_fixed = (p.allreduce_launch_s + ll[0]) if ll else math.inf  # seconds
        self._ar_ll_spb = (2 * (tp - 1) / tp / ll[1]) if ll else 0.0  # seconds per byte
        self._hidden_bytes = h * a  # bytes of one token's hidden state
        self._lm_gemm = self._gemm_consts(h, m.vocab_size / tp, a)  # lm_head stays fp16
        self._vocab_bytes = m.vocab_size * a  # bytes of one sequence's logits
        self._sampler_spr = (p.sampler_per_seq_s + p.sampler_logit_passes * m.vocab_size
                             * LOGIT_BYTES * inv_bw / p.add_eff)  # s per sampled row
        self._decode_cache: dict[int, tuple[float, ...]] = {}  # decode terms by batch size
        self._dense_cache: dict[int, float] = {}  # dense_layer_s by token count (seconds)
        self._fixed_cache: dict[tuple[int, int], float] = {}  # gpu_fixed_s by (seqs, sampled)
        self._ar_per_layer = float(m.allreduces_per_layer)  # all-reduces per layer at TP > 1
        self._moe: MoEStageTerms | None = None  # the layers of an MoE / MLA model
        if m.moe is not None or m.mla is not None:
            self._moe = MoEStageTerms(deployment, p)
        fpp = 4.0 * heads * hd  # FLOPs per (query, key) pair per layer
        kv_bpt = 2 * kvh * hd * kv_dtype_bytes(deployment.kv_dtype)  # bytes/token/layer
        if m.mla is not None:  # the cached latent, on every GPU; per-head K and V in prefill
            kv_bpt = m.mla.kv_elements_per_token * kv_dtype_bytes(deployment.kv_dtype)
            fpp = float(heads * m.mla.flops_per_pair_per_head())
        self._attn = AttentionTerms(p, gpu.peak_tensor_flops, gpu.hbm_bandwidth, heads, kvh,
                                    fpp, kv_bpt)  # attention kernels (sim/cost/stage_attention.py)
        self._scores: ScoreTerms | None = None  # unfused prefill attention (sim/cost/score_buffer.py)
        if score_buffer is not None:
            self._scores = ScoreTerms(score_buffer, heads, hd, kv_bpt,
                                      gpu.peak_tensor_flops * p.gemm_compute_eff,
                                      gpu.hbm_bandwidth * p.gemm_weight_eff,
                                      2 * p.gemm_fixed_s + p.small_fixed_s)

    @property
    def _kv_bpt(self) -> float:
        """Bytes of K and V per cached token per layer on one GPU."""
        return self._attn.kv_bpt

    @staticmethod
    def _gemm_consts(k: float, n_out: float, weight_bytes: float) -> tuple[float, float, float]:
        """(FLOPs per token, weight bytes, activation bytes per token) of a k x n_out GEMM."""
        return 2.0 * k * n_out, k * n_out * weight_bytes, (k + n_out) * ACT_DTYPE_BYTES

    def _gemm_s(self, gemm: tuple[float, float, float], n: float) -> float:
        fpt, w_bytes, a_bpt = gemm
        compute = fpt * (n + self._half) * self._inv_c  # = flops / (peak * eff_c(n))
        return max(compute, (w_bytes + a_bpt * n) * self._inv_w) + self._gemm_fixed

    def dense_ops_s(self, num_tokens: float) -> dict[str, float]:
        """Seconds of each kernel of one layer outside attention, by Vidur's mlp.csv op name;
        they sum to `dense_layer_s` (slower: for fitting and reports, not the hot path)."""
        p, inv_bw, a, n = self.params, self._inv_bw, ACT_DTYPE_BYTES, num_tokens
        m, tp = self.deployment.model, self._tp
        heads, kvh = m.num_attention_heads // tp, self.deployment.kv_heads_per_gpu
        inter = m.intermediate_size / tp
        up_out = (2 if m.gated_mlp else 1) * inter
        norm = p.small_fixed_s + self._norm_spt * n
        qkv, o, up, down = (self._gemm_s(g, n) for g in self._gemms)
        return {"input_layernorm": norm, "attn_pre_proj": qkv,
                "attn_rope": p.small_fixed_s + 2 * (heads + kvh) * m.head_dim * a * inv_bw
                / p.rope_eff * n,
                "attn_post_proj": o, "post_attention_layernorm": norm, "mlp_up_proj": up,
                "mlp_act": p.small_fixed_s + (up_out + inter) * a * inv_bw / p.act_eff * n,
                "mlp_down_proj": down,
                "add": p.small_fixed_s + 3 * m.hidden_size * a * inv_bw / p.add_eff * n}

    # ---- the StageTimes protocol ------------------------------------------------------------
    def dense_layer_s(self, num_tokens: int) -> float:
        """One layer outside attention at num_tokens tokens (4 GEMMs + 5 small kernels)."""
        t = self._dense_cache.get(num_tokens)
        if t is not None:
            return t
        if num_tokens <= 0:
            return 0.0
        if self._moe is not None:  # MoE / MLA: the mean over layers (sim/cost/moe_stage.py)
            return self._moe.non_attention_s(num_tokens) / self._layers
        t = self._small_fixed + self._small_spt * num_tokens
        for gemm in self._gemms:
            t += self._gemm_s(gemm, num_tokens)
        if type(num_tokens) is int:  # the same float for the same count (bounded: a step's)
            if len(self._dense_cache) >= CACHE_ENTRIES:
                self._dense_cache.clear()
            self._dense_cache[num_tokens] = t
        return t

    def attn_prefill_layer_s(self, chunk_tokens: float, context_tokens: float) -> float:
        """One layer's attention for one chunk of chunk_tokens after context_tokens cached."""
        return self._prefill_attn_s(1, chunk_tokens, context_tokens)

    def _prefill_attn_s(self, chunks: int, chunk_tokens: float, context_tokens: float) -> float:
        """One layer's prefill attention: the fused kernel, or with a score buffer the
        unfused path (sim/cost/score_buffer.py)."""
        if self._scores is not None:
            return self._scores.prefill_s(chunks, chunk_tokens, context_tokens)
        return self._attn.prefill_s(chunks, chunk_tokens, context_tokens)

    def attn_decode_layer_s(self, batch_size: int, kv_tokens: float) -> float:
        """One layer's decode attention of batch_size requests with kv_tokens context each."""
        return self._attn.decode_s(batch_size, batch_size * kv_tokens)

    def allreduce_s(self, size_bytes: float) -> float:
        """One all-reduce of size_bytes over the TP group, launch included (0 at TP 1): the
        faster of the bulk and the low-latency protocol, as NCCL's tuner picks."""
        if self._tp == 1:
            return 0.0
        return min(self._ar_fixed + self._ar_spb * size_bytes,
                   self._ar_ll_fixed + self._ar_ll_spb * size_bytes)

    def host_s(self, num_seqs: int) -> float:
        """CPU/engine seconds of one iteration (after the GPU's, or beside it when
        `cpu_overlapped`)."""
        return self.params.cpu_step_s + self.params.cpu_per_seq_s * num_seqs

    def gpu_fixed_s(self, num_seqs: int, num_sampled: int) -> float:
        """Embedding and final norm (charged at num_seqs tokens), lm_head + logits gather +
        sampler for num_sampled sequences."""
        key = (num_seqs, num_sampled)
        t = self._fixed_cache.get(key)
        if t is not None:
            return t
        t = self._gpu_fixed_s(num_seqs, num_sampled)
        if type(num_seqs) is int and type(num_sampled) is int:
            if len(self._fixed_cache) >= CACHE_ENTRIES:
                self._fixed_cache.clear()
            self._fixed_cache[key] = t
        return t

    def _gpu_fixed_s(self, num_seqs: int, num_sampled: int) -> float:
        """`gpu_fixed_s`, computed."""
        p, t = self.params, 0.0
        if num_seqs > 0:
            t += 2 * p.small_fixed_s + (self._emb_spt + self._norm_spt) * num_seqs
        if num_sampled > 0:
            t += self._gemm_s(self._lm_gemm, num_sampled)
            t += p.sampler_fixed_s + self._sampler_spr * num_sampled  # sim/cost/sampler_cost.py
            if self._tp > 1:
                t += self.allreduce_s(self._vocab_bytes * num_sampled / self._tp)  # gather
        return t

    def step_fixed_s(self, num_seqs: int, num_sampled: int) -> float:
        """`gpu_fixed_s` + `host_s`: every per-step cost outside the layers."""
        return self.gpu_fixed_s(num_seqs, num_sampled) + self.host_s(num_seqs)

    def step_total_s(self, layers_s, num_seqs: int, num_sampled: int):
        """An iteration from its layers' seconds (a float or an array): plus every per-step
        cost, the host's in series or (`cpu_overlapped`) beside the GPU's."""
        if self._overlap:
            return np.maximum(layers_s + self.gpu_fixed_s(num_seqs, num_sampled),
                              self.host_s(num_seqs))
        return layers_s + self.step_fixed_s(num_seqs, num_sampled)

    # ---- iterations -------------------------------------------------------------------------
    @staticmethod
    def split_sums(num_tokens: int, sum_context: int, sum_new_x_context: int,
                   sum_new_squared: int, num_seqs: int) -> tuple[int, float, float, int, float]:
        """(prefill chunks, tokens per chunk, context per chunk, decode rows, KV tokens the
        decode rows read: context + their new token) from batch sums: the equal-chunk batch
        with these sums (`sim.core.step_shape.split_from_sums`), exact for one chunk or equal
        chunks, with or without decode rows."""
        p, m, c, d, c_dec = split_from_sums(num_tokens, sum_context, sum_new_x_context,
                                            sum_new_squared, num_seqs)
        return p, m, c, d, c_dec + d

    def _layers_s(self, num_tokens: int, attention_s: float) -> float:
        if self._moe is not None:
            return self._moe.layers_s(num_tokens, attention_s, self.allreduce_s)
        return self._layers * (self.dense_layer_s(num_tokens) + attention_s
                               + self._layer_allreduces_s(num_tokens))

    def _layer_allreduces_s(self, num_tokens: int) -> float:
        """One layer's all-reduces of num_tokens tokens' hidden states (0 at TP 1)."""
        if self._tp == 1:
            return 0.0
        return self._ar_per_layer * self.allreduce_s(self._hidden_bytes * num_tokens)

    def _first_s(self, num_tokens: int, sum_context: int, sum_new_x_context: int,
                 sum_new_squared: int, num_seqs: int, num_sampled: int) -> float:
        """Seconds of an iteration computing the given chunks (batch sums)."""
        if not num_tokens:
            return self.params.cpu_step_s  # nothing to compute: no forward pass
        if num_tokens == num_seqs == num_sampled and self._moe is None:  # decodes only:
            # the lines below with the batch size's terms cached (the same floats)
            _, _, host, _, _, _, dense, ar, fixed = self._decode_terms(num_seqs)
            attn = self._attn.decode_s(num_seqs, float(sum_context) + num_seqs)
            gpu = self._layers * (dense + attn + ar) + fixed
        else:
            p, n, c, d, c_dec = split_from_sums(num_tokens, sum_context, sum_new_x_context,
                                                sum_new_squared, num_seqs)
            attn = self._prefill_attn_s(p, n, c) if p else 0.0  # one kernel over the chunks
            if d:
                attn += self._attn.decode_s(d, c_dec + d)  # decode rows read their new token
            gpu = self._layers_s(num_tokens, attn) + self.gpu_fixed_s(num_seqs, num_sampled)
            host = self.host_s(num_seqs)
        if self._overlap:
            return max(gpu, self._launch_floor, host)
        return max(gpu, self._launch_floor) + host

    def iteration_times_from_sums(self, num_tokens: int, sum_context: int, sum_new_x_context: int,
                                  sum_new_squared: int, num_seqs: int, num_sampled: int,
                                  num_iterations: int = 1) -> np.ndarray:
        """Seconds of each iteration from batch sums (sum n_i, sum c_i, sum n_i*c_i,
        sum n_i**2); iterations after the first decode one token per sequence, all sampled."""
        out = np.empty(num_iterations)
        out[0] = self._first_s(num_tokens, sum_context, sum_new_x_context, sum_new_squared,
                               num_seqs, num_sampled)
        if num_iterations == 1:
            return out
        b = num_seqs
        if not b:
            out[1:] = self.params.cpu_step_s  # an empty batch only pays the overhead
            return out
        kv_after = np.arange(1, num_iterations, dtype=np.float64) * b + (sum_context + num_tokens)
        base, slope, host, f_base, f_layers, f_half, _, _, _ = self._decode_terms(b)
        gpu = base + slope * kv_after
        if f_layers:  # decode attention's split-KV floor (sim/cost/stage_attention.py)
            np.maximum(gpu, f_base + f_layers * kv_after / (kv_after + f_half), out=gpu)
        if self._launch_floor:
            np.maximum(gpu, self._launch_floor, out=gpu)
        if self._overlap:
            out[1:] = np.maximum(gpu, host)
        else:
            out[1:] = gpu + host
        return out

    def _decode_terms(self, b: int) -> tuple[float, ...]:
        """(base, slope, host, f_base, f_layers, f_half, dense, ar, fixed) of a decode
        iteration of `b` sequences reading kv tokens: GPU seconds max(base + slope kv, f_base +
        f_layers kv / (kv + f_half)) (the second: attention at its floor; f_layers 0 without
        one), host seconds; and the parts of `_layers_s` and `gpu_fixed_s` at `b` tokens (a
        layer's dense seconds, its all-reduces, the fixed GPU seconds of `b` sampled rows).
        Cached per batch size."""
        terms = self._decode_cache.get(b)
        if terms is None:
            a, layers, fixed = self._attn, self._layers, self.gpu_fixed_s(b, b)
            f_layers = layers * a.floor_s
            terms = self._decode_cache[b] = (
                self._layers_s(b, a.decode_base_s(b)) + fixed,
                layers * a.decode_s_per_kv_token(b), self.host_s(b),
                (self._layers_s(b, 0.0) + fixed) if f_layers else 0.0,
                f_layers, a.floor_half * b, self.dense_layer_s(b), self._layer_allreduces_s(b),
                fixed)
        return terms

    def iteration_ends_from_sums(self, num_tokens: int, sum_context: int,
                                 sum_new_x_context: int, sum_new_squared: int, num_seqs: int,
                                 num_sampled: int, num_iterations: int, until_s: float,
                                 first_extra_s: float = 0.0) -> list[float]:
        """Cumulative ends (seconds) of `iteration_times_from_sums` (plus `first_extra_s` on the
        first), bit for bit, computed only up to the first end at or after `until_s`."""
        first = self._first_s(num_tokens, sum_context, sum_new_x_context, sum_new_squared,
                              num_seqs, num_sampled) + first_extra_s
        ends = [first]
        b = num_seqs
        if num_iterations == 1 or first >= until_s or not b:
            if num_iterations > 1 and first < until_s:  # an empty batch: overhead only
                return ends_of(first, [self.params.cpu_step_s] * (num_iterations - 1), until_s)
            return ends
        base, slope, host, f_base, f_layers, f_half, _, _, _ = self._decode_terms(b)
        floor = self._launch_floor
        if self._overlap:  # the host's work beside the GPU's: a floor like the launch one
            floor, host = max(floor, host), 0.0
        e, kv, append = first, float(sum_context + num_tokens), ends.append
        for _ in range(1, num_iterations):
            kv += b  # exact (integers below 2**53), as the numpy path's arange * b + kv0
            gpu = base + slope * kv
            if f_layers:
                at_floor = f_base + f_layers * kv / (kv + f_half)
                if at_floor > gpu:
                    gpu = at_floor
            if floor and gpu < floor:
                gpu = floor
            e += gpu + host
            append(e)
            if e >= until_s:
                break
        return ends

    def iteration_times(self, num_new_tokens: Sequence[int], num_context_tokens: Sequence[int],
                        num_sampled: int, num_iterations: int = 1) -> np.ndarray:
        """`iteration_times_from_sums` from the per-request chunks of a step."""
        n, c = tuple(num_new_tokens), tuple(num_context_tokens)
        return self.iteration_times_from_sums(
            sum(n), sum(c), sum(a * b for a, b in zip(n, c)), sum(a * a for a in n),
            len(n), num_sampled, num_iterations)

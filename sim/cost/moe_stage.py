"""The stage model's layers for MoE and MLA models (sim/cost/stage_model.py calls it; dense models
never reach this module, so their step times are untouched).

Per layer, on one GPU of the group, with n tokens (all kernels in the stage model's forms,
sim/cost/stage_params.py):

    attention side  (every layer) the attention projections (q, k, v, o; MLA: q_a, q_b, kv_a,
                    kv_b, o, with q_a and kv_a replicated on every GPU as vLLM does), 2 norms,
                    RoPE and the residual add;
    dense MLP       (dense layers) gate/up and down GEMMs and the activation;
    MoE MLP         (MoE layers) router GEMM (hidden -> experts, replicated), shared experts as
                    a dense MLP, and the routed experts as two grouped GEMMs (gate/up, down) of
                    rows(n) rows over distinct(n) experts (sim/cost/moe_cost.py): compute at the GEMM
                    efficiency of the per-expert batch m = rows / distinct,
                    eff(m) = eff_max m / (m + n_half), weights of distinct(n) experts streamed;
                    then the activation over the rows, top-k softmax and the permute / unpermute
                    copies of the rows (3 small kernels);
    communication   2 all-reduces of the hidden states per layer at TP > 1; with EP a dispatch
                    and a combine all-to-all per MoE layer at the all-reduce curve's latency
                    and bus bandwidth for ep GPUs (plus the all-reduce launch), replacing the
                    MoE layer's second all-reduce when EP spans the TP group.
"""

from __future__ import annotations

from typing import Callable

from sim.cost.cost_model import ACT_DTYPE_BYTES, DeploymentSpec, weight_dtype_bytes
from sim.cost.moe_cost import MoEPlan, alltoall_seconds, tokens_per_expert
from sim.cost.stage_params import StageParams
from sim.hardware.gpus import dense_peak_flops

Gemm = tuple[float, float, float]  # (FLOPs per row, weight bytes, activation bytes per row)


def _attention_shapes(dep: DeploymentSpec) -> list[tuple[float, float]]:
    """(in, out) of each attention projection GEMM on one GPU."""
    m, tp = dep.model, dep.tensor_parallel
    h, heads = m.hidden_size, m.num_attention_heads // tp
    if m.mla is None:
        return [(h, (heads + 2 * dep.kv_heads_per_gpu) * m.head_dim), (heads * m.head_dim, h)]
    a = m.mla
    q = ([(h, a.q_lora_rank), (a.q_lora_rank, heads * a.qk_head_dim)] if a.q_lora_rank
         else [(h, heads * a.qk_head_dim)])
    return q + [(h, a.kv_elements_per_token),
                (a.kv_lora_rank, heads * (a.qk_nope_head_dim + a.v_head_dim)),
                (heads * a.v_head_dim, h)]


class MoEStageTerms:
    """Per-layer seconds of an MoE / MLA model's layers outside attention kernels."""

    __slots__ = ("plan", "_p", "_inv_c", "_inv_w", "_inv_bw", "_attn_gemms", "_mlp_gemms",
                 "_router", "_shared", "_experts", "_attn_small_spt", "_act_spt", "_shared_spt",
                 "_row_spt", "_layers", "_moe_layers", "_tp", "_hidden_bytes", "_a2a_lat",
                 "_a2a_bw")

    def __init__(self, dep: DeploymentSpec, p: StageParams) -> None:
        m, gpu, tp, a = dep.model, dep.gpu, dep.tensor_parallel, ACT_DTYPE_BYTES
        wb, h = weight_dtype_bytes(dep.weight_dtype), m.hidden_size
        self._p = p  # stage parameters
        self._inv_c = 1.0 / (dense_peak_flops(gpu, dep.weight_dtype) * p.gemm_compute_eff)
        self._inv_w = 1.0 / (gpu.hbm_bandwidth * p.gemm_weight_eff)  # s/byte
        self._inv_bw = inv_bw = 1.0 / gpu.hbm_bandwidth  # s/byte at peak
        self._attn_gemms = tuple(self._consts(k, o, wb) for k, o in _attention_shapes(dep))
        inter = m.intermediate_size / tp  # dense MLP width per GPU
        self._mlp_gemms = (self._consts(h, 2 * inter, wb), self._consts(inter, h, wb))
        heads, kvh = m.num_attention_heads // tp, dep.kv_heads_per_gpu
        self._attn_small_spt = (4 * h * a * inv_bw / p.norm_eff  # two norms
                                + 2 * (heads + kvh) * m.head_dim * a * inv_bw / p.rope_eff
                                + 3 * h * a * inv_bw / p.add_eff)  # s/token
        self._act_spt = 3 * inter * a * inv_bw / p.act_eff  # s/token of the dense activation
        self._layers, self._tp = m.num_layers, tp  # layers, GPUs
        self._hidden_bytes = h * a  # bytes of one token's hidden state
        self.plan: MoEPlan | None = None  # routing of an MoE model
        self._moe_layers = 0  # MoE layers
        if m.moe is not None:
            self._init_moe(dep, wb)

    def _init_moe(self, dep: DeploymentSpec, wb: float) -> None:
        m, moe, p, a = dep.model, dep.model.moe, self._p, ACT_DTYPE_BYTES
        assert moe is not None
        h, tp = m.hidden_size, dep.tensor_parallel
        plan = self.plan = MoEPlan(m, tp, dep.expert_parallel, dep.expert_zipf, a)
        self._moe_layers = plan.num_moe_layers
        width = moe.expert_intermediate_size / plan.expert_tp  # one expert's width per GPU
        self._router = self._consts(h, moe.num_experts, wb)
        shared = moe.shared_intermediate_size / tp
        self._shared = ((self._consts(h, 2 * shared, wb), self._consts(shared, h, wb))
                        if shared else ())
        self._shared_spt = 3 * shared * a * self._inv_bw / p.act_eff  # s/token
        self._experts = (self._consts(h, 2 * width, wb), self._consts(width, h, wb))
        self._row_spt = (3 * width * a * self._inv_bw / p.act_eff  # activation per row
                         + 4 * h * a * self._inv_bw / p.add_eff)  # permute + unpermute copies
        lat, bus = p.allreduce.curve(plan.expert_parallel)
        self._a2a_lat, self._a2a_bw = p.allreduce_launch_s + lat, bus  # seconds, bytes/s

    @staticmethod
    def _consts(k: float, n_out: float, weight_bytes: float) -> Gemm:
        return 2.0 * k * n_out, k * n_out * weight_bytes, (k + n_out) * ACT_DTYPE_BYTES

    def _gemm_s(self, gemm: Gemm, rows: float, per_expert: float, copies: float = 1.0) -> float:
        """A (grouped) GEMM of `rows` rows, `per_expert` rows per weight matrix, `copies`
        weight matrices read."""
        fpt, w_bytes, a_bpt = gemm
        half = self._p.gemm_half_tokens
        compute = fpt * rows * (per_expert + half) / per_expert * self._inv_c
        return max(compute, (copies * w_bytes + a_bpt * rows) * self._inv_w) + self._p.gemm_fixed_s

    def attention_side_s(self, n: float) -> float:
        """One layer's attention projections and small kernels (attention kernel excluded)."""
        t = 4 * self._p.small_fixed_s + self._attn_small_spt * n
        return t + sum(self._gemm_s(g, n, n) for g in self._attn_gemms)

    def dense_mlp_s(self, n: float) -> float:
        """One dense layer's MLP (gate/up, activation, down)."""
        t = self._p.small_fixed_s + self._act_spt * n
        return t + sum(self._gemm_s(g, n, n) for g in self._mlp_gemms)

    def moe_mlp_s(self, n: int) -> float:
        """One MoE layer's MLP on the busiest GPU: router, shared experts, routed experts."""
        assert self.plan is not None
        p = self._p
        rows, distinct = self.plan.rows_distinct(n)
        m = tokens_per_expert(rows, distinct)
        t = self._gemm_s(self._router, n, n) + 3 * p.small_fixed_s + self._row_spt * rows
        for g in self._experts:
            t += self._gemm_s(g, rows, m, distinct)
        if self._shared:
            t += p.small_fixed_s + self._shared_spt * n
            t += sum(self._gemm_s(g, n, n) for g in self._shared)
        return t

    def a2a_s(self, n: int) -> float:
        """One all-to-all (dispatch or combine) of one MoE layer (0 without EP)."""
        if self.plan is None or self.plan.expert_parallel == 1:
            return 0.0
        return alltoall_seconds(self.plan.a2a_bytes(n), self._a2a_lat, self._a2a_bw)

    def non_attention_s(self, n: int) -> float:
        """All layers' time outside the attention kernels and the communication."""
        if n <= 0:
            return 0.0
        dense_layers = self._layers - self._moe_layers
        t = self._layers * self.attention_side_s(n) + dense_layers * self.dense_mlp_s(n)
        return t + (self._moe_layers * self.moe_mlp_s(n) if self._moe_layers else 0.0)

    def layers_s(self, n: int, attention_s: float,
                 allreduce_s: Callable[[float], float]) -> float:
        """All layers of one iteration: non-attention work, attention (per layer) and the
        all-reduces and all-to-alls."""
        if n <= 0:
            return self._layers * attention_s
        comm = 0.0
        if self._tp > 1:
            ar = allreduce_s(self._hidden_bytes * n)
            replaced = self._moe_layers if self.plan and self.plan.replaces_allreduce else 0
            comm = (2 * self._layers - replaced) * ar
        if self.plan is not None and self.plan.expert_parallel > 1:
            comm += 2 * self._moe_layers * self.a2a_s(n)
        return self.non_attention_s(n) + self._layers * attention_s + comm

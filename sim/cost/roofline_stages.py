"""Today's roofline cost model (sim/cost/cost_model.py) seen one stage at a time, as a StageTimes.

Each stage is the roofline's own formula restricted to that stage, on one GPU of the group:
  dense      max(2 * layer weights / TP * tokens / compute, (layer weight bytes + activation
             bytes * tokens) / memory) + dequantization, per layer (the model's is L times it);
  attention  max(4 * head_dim * heads / TP * (query, key) pairs / compute, KV bytes / memory)
             per layer, one prefill chunk or one decode batch at a time;
  all-reduce interconnect latency + 2 (TP - 1) / TP * bytes / (interconnect bandwidth * eff);
  fixed      the lm_head for sampled sequences (its own roofline) + step and per-sequence
             overheads.
Composed with `sim.cost.stage_times`' formula this equals RooflineCostModel except where the roofline
takes one max over several parts together (dense with the lm_head; attention of a whole batch):
there the per-stage sum is a little larger (never smaller).
"""

from __future__ import annotations

from sim.cost.cost_model import ACT_DTYPE_BYTES, RooflineCostModel, weight_dtype_bytes


class RooflineStages:
    """A StageTimes view of one RooflineCostModel (same deployment, same CostModelConfig)."""

    __slots__ = ("cost_model", "_inv_c", "_inv_m", "_dense_fpt", "_layer_bytes", "_act_bpt",
                 "_dequant_s", "_attn_fpp", "_kv_bpt", "_ar_lat", "_ar_spb", "_lm_fps",
                 "_lm_bytes")

    def __init__(self, cost_model: RooflineCostModel) -> None:
        self.cost_model = cost_model  # the roofline whose stages are exposed
        dep, cfg = cost_model.deployment, cost_model.config
        m, gpu, tp = dep.model, dep.gpu, dep.tensor_parallel
        layer_params = m.num_dense_params_per_layer / tp  # weights per GPU per layer
        self._inv_c = 1.0 / (gpu.peak_tensor_flops * cfg.compute_efficiency)  # s/FLOP
        self._inv_m = 1.0 / (gpu.hbm_bandwidth * cfg.memory_efficiency)  # s/byte
        self._dense_fpt = 2.0 * layer_params  # FLOPs per token per layer
        self._layer_bytes = layer_params * weight_dtype_bytes(dep.weight_dtype)  # bytes/layer
        self._act_bpt = cfg.activation_bytes_factor * m.hidden_size * ACT_DTYPE_BYTES  # B/token
        self._dequant_s = (layer_params * cfg.dequant_ops_per_weight(dep.weight_dtype)
                           / gpu.peak_vector_flops)  # seconds per layer
        self._attn_fpp = 4.0 * (m.num_attention_heads // tp) * m.head_dim  # FLOPs per pair
        self._kv_bpt = dep.kv_bytes_per_token_per_gpu / m.num_layers  # bytes/token/layer
        self._ar_lat = gpu.interconnect_latency_s if tp > 1 else 0.0  # seconds
        self._ar_spb = (2.0 * (tp - 1) / tp / (gpu.interconnect_bandwidth
                                               * cfg.interconnect_efficiency))  # s/byte
        self._lm_fps = 2.0 * m.vocab_size * m.hidden_size / tp  # FLOPs per sampled sequence
        self._lm_bytes = m.num_embedding_params * ACT_DTYPE_BYTES / tp  # bytes

    def dense_layer_s(self, num_tokens: int) -> float:
        """Seconds of one layer's linear layers (and activations) at num_tokens tokens."""
        if num_tokens <= 0:
            return 0.0
        flops = self._dense_fpt * num_tokens
        moved = self._layer_bytes + self._act_bpt * num_tokens
        return max(flops * self._inv_c, moved * self._inv_m) + self._dequant_s

    def _attention(self, pairs: float, kv_tokens: float) -> float:
        return max(self._attn_fpp * pairs * self._inv_c, self._kv_bpt * kv_tokens * self._inv_m)

    def attn_prefill_layer_s(self, chunk_tokens: int, context_tokens: int) -> float:
        """One layer's attention of one chunk after context_tokens cached tokens (causal)."""
        if chunk_tokens <= 0:
            return 0.0
        pairs = chunk_tokens * (context_tokens + (chunk_tokens + 1) / 2)
        return self._attention(pairs, context_tokens + chunk_tokens)

    def attn_decode_layer_s(self, batch_size: int, kv_tokens: int) -> float:
        """One layer's attention of batch_size one-token queries over kv_tokens cached each."""
        if batch_size <= 0:
            return 0.0
        return self._attention(batch_size * (kv_tokens + 1.0), batch_size * (kv_tokens + 1.0))

    def allreduce_s(self, size_bytes: float) -> float:
        """One ring all-reduce of size_bytes over the TP group (0 at TP 1)."""
        if not self._ar_lat and not self._ar_spb:
            return 0.0
        return self._ar_lat + self._ar_spb * size_bytes

    def step_fixed_s(self, num_seqs: int, num_sampled: int) -> float:
        """The lm_head of the sampled sequences plus the step and per-sequence overheads."""
        cfg = self.cost_model.config
        head = 0.0
        if num_sampled:
            head = max(self._lm_fps * num_sampled * self._inv_c, self._lm_bytes * self._inv_m)
        return head + cfg.step_overhead_s + cfg.per_seq_overhead_s * num_seqs

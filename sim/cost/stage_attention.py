"""The stage model's attention kernels on one GPU: prefill over a KV prefix, and decode.

Prefill (a FlashAttention-2 / FlashInfer-style kernel: query tiles stream the cached and the new
keys, online softmax) of p chunks of n query tokens, each after c cached tokens, in one kernel:

    fixed + max(work + span, kv bytes / (HBM x eff_kv_large))
    work = 4 heads head_dim p n (c + (n + 1) / 2) / (peak x eff(p n))    context + causal part
    span = key_s x (c + n) x r / (r + split_rows),   r = p n heads       query rows per GPU

`work` is the FLOPs at the kernel's rate, eff(t) = eff t / (t + half) for the kernel's t query
tokens together (the FlashInfer sets have half 0; the flash_attention set's half was fitted on
single chunks, and several small chunks fill the GPU as one larger one); `span` the serial loop
of the longest query tile over its c + n keys, which the GPU cannot spread: a kernel with few
query rows splits that loop across idle SMs (split-KV), so the span fades as r falls below
split_rows. Decode of b sequences with kv
cached tokens each (one work item per sequence and KV head):

    max(floor x kv / (kv + floor_half), fixed + item_s x b x kv_heads + kv bytes / (HBM x eff(b)))

the floor being the split-KV path a long context takes (partial attention, then a merge kernel).
Parameters: `sim.cost.stage_params.StageParams` (their defaults give the chunk-only prefill and the
linear decode of the earlier parameter sets). Torch-free, no state beyond folded constants.
"""

from __future__ import annotations

from sim.cost.stage_params import StageParams


class AttentionTerms:
    """Prefill and decode attention seconds of one layer on one GPU (module docstring)."""

    __slots__ = ("kv_bpt", "_fpp", "_heads", "_kvh", "_inv_c", "_half", "_key_s", "_split",
                 "_fixed", "_kv_inv_large", "_inv_bw", "_dec_small", "_dec_span", "_dec_half",
                 "dec_fixed", "_item", "floor_s", "floor_half")

    def __init__(self, params: StageParams, peak_flops: float, hbm_bandwidth: float,
                 heads: int, kv_heads: int, flops_per_pair: float, kv_bytes_per_token: float
                 ) -> None:
        p = params
        self.kv_bpt = kv_bytes_per_token  # bytes of K and V per token per layer on this GPU
        self._fpp = flops_per_pair  # FLOPs per (query, key) pair per layer
        self._heads = heads  # query heads per GPU
        self._kvh = kv_heads  # KV heads per GPU
        self._inv_c = 1.0 / (peak_flops * p.attn_prefill_eff)  # s/FLOP at the kernel's rate
        self._half = p.attn_prefill_half_tokens  # tokens
        self._key_s = p.attn_prefill_key_s  # seconds per key of the longest tile's loop
        self._split = p.attn_prefill_split_rows  # query rows
        self._fixed = p.attn_prefill_fixed_s  # seconds per layer
        self._inv_bw = 1.0 / hbm_bandwidth  # s/byte at peak
        self._kv_inv_large = self._inv_bw / p.attn_decode_eff_large  # s/byte
        self._dec_small = p.attn_decode_eff_small  # fraction of peak
        self._dec_span = p.attn_decode_eff_large - p.attn_decode_eff_small  # fraction of peak
        self._dec_half = p.attn_decode_half_batch  # sequences
        self.dec_fixed = p.attn_decode_fixed_s  # seconds per layer
        self._item = p.attn_decode_item_s * kv_heads  # seconds per sequence
        self.floor_s = p.attn_decode_floor_s  # seconds per layer
        self.floor_half = p.attn_decode_floor_half_tokens  # context tokens per sequence

    def prefill_s(self, num_chunks: float, chunk_tokens: float, context_tokens: float) -> float:
        """One kernel over `num_chunks` chunks of chunk_tokens, each after context_tokens."""
        n, c, p = chunk_tokens, context_tokens, num_chunks
        if n <= 0 or p <= 0:
            return 0.0
        tokens = p * n  # query tokens of the kernel: they fill the GPU together
        work = (self._fpp * tokens * (c + (n + 1) * 0.5) * (tokens + self._half) / tokens
                * self._inv_c)
        if self._key_s:
            rows = p * n * self._heads
            work += self._key_s * (c + n) * rows / (rows + self._split)
        memory = p * (c + n) * self.kv_bpt * self._kv_inv_large
        return max(work, memory) + self._fixed

    def decode_s_per_kv_token(self, batch_size: float) -> float:
        """Seconds per cached token read by a decode batch of batch_size sequences."""
        eff = self._dec_small + self._dec_span * batch_size / (batch_size + self._dec_half)
        return self.kv_bpt * self._inv_bw / eff

    def decode_base_s(self, batch_size: float) -> float:
        """Seconds of a decode batch outside its KV reads (fixed + one item per sequence and
        KV head)."""
        return self.dec_fixed + self._item * batch_size

    def decode_floor_s(self, batch_size: float, kv_total: float) -> float:
        """The split-KV floor of a decode batch reading kv_total cached tokens in all."""
        if not self.floor_s or batch_size <= 0:
            return 0.0
        return self.floor_s * kv_total / (kv_total + self.floor_half * batch_size)

    def decode_s(self, batch_size: float, kv_total: float) -> float:
        """One layer's decode attention of batch_size sequences reading kv_total tokens (the
        three methods above, inlined: it runs every step)."""
        b = batch_size
        if b <= 0:
            return 0.0
        eff = self._dec_small + self._dec_span * b / (b + self._dec_half)
        t = self.dec_fixed + self._item * b + kv_total * self.kv_bpt * self._inv_bw / eff
        if self.floor_s:
            floor = self.floor_s * kv_total / (kv_total + self.floor_half * b)
            if floor > t:
                return floor
        return t

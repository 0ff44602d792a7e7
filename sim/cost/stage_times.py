"""The per-stage timing interface of one deployment (model, GPU, tensor parallelism).

A step's time composes as::

    num_layers * (dense_layer_s + attention)
    + k * num_layers * allreduce_s(hidden_bytes * num_tokens)   # only when TP > 1; k = 2, 1 with
      # parallel attention (ModelSpec.allreduces_per_layer)
    + step_fixed_s

where attention is the sum of attn_prefill_layer_s over the step's prefill chunks and
attn_decode_layer_s over its decoding requests. Every stage is the time on ONE GPU of the
tensor-parallel group (each GPU runs its shard at the same time).
"""

from __future__ import annotations

from typing import Protocol


class StageTimes(Protocol):
    """Per-stage seconds of one deployment (model, GPU, TP), each on ONE GPU of the group."""

    def dense_layer_s(self, num_tokens: int) -> float:
        """One transformer layer outside attention at num_tokens tokens: norms, QKV GEMM, RoPE,
        output GEMM, gate/up GEMM, activation, down GEMM, residual adds (Vidur's mlp.csv ops
        except emb, summed)."""
        ...

    def attn_prefill_layer_s(self, chunk_tokens: int, context_tokens: int) -> float:
        """One layer's attention kernel for one prefill chunk after context_tokens cached
        tokens."""
        ...

    def attn_decode_layer_s(self, batch_size: int, kv_tokens: int) -> float:
        """One layer's attention kernel decoding batch_size requests with kv_tokens context
        each."""
        ...

    def allreduce_s(self, size_bytes: float) -> float:
        """One all-reduce of size_bytes over the TP group (0 when TP == 1), launch included."""
        ...

    def step_fixed_s(self, num_seqs: int, num_sampled: int) -> float:
        """Per-iteration cost outside the layers: embedding, final norm, lm_head + sampling for
        num_sampled sequences, CPU/engine overhead."""
        ...

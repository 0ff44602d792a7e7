"""Attention with materialised scores on a paged engine (`cluster.cost_model.score_buffer`).

When FlashAttention cannot be used, prefill attention runs unfused: a batched GEMM writes the
score matrix (every query against every key, head by head), a masked softmax turns it into
probabilities, a second GEMM multiplies them with V. RTP-LLM needs this wherever queries and
keys differ in length (its docs: KV reuse and speculative decoding "cannot use flash attention
because q and kv lengths differ; set ENABLE_FMHA=OFF"), so a prefill over a cached prefix and a
speculative verify row both take this path. Decode rows keep the decode kernel.

    cluster.cost_model: {score_buffer: {max_prefill_tokens: 2048}}          # bytes_per_pair: 6
    cluster.cost_model: {score_buffer: {max_prefill_tokens: 2048, bytes_per_pair: 2}}

Memory. The buffer holds one layer's scores (it is reused layer after layer) for the largest
prefill the engine admits, `max_prefill_tokens` query tokens against as many keys:
heads per GPU x max_prefill_tokens^2 x bytes_per_pair bytes, reserved like activations, so it
comes out of the KV pool. bytes_per_pair 6: fp16 scores plus the fp32 copy the softmax runs on
(FasterTransformer's context attention allocates `qk_buf_` and `qk_buf_float_`; the HF engine's
`score_bytes_per_pair`, sim/cluster/hf_static.py, is the same 6); 2: fp16 only, softmax in place.

Time, per layer, of p chunks of n query tokens each after c cached tokens (pairs = p n (c + n):
the whole matrix, the causal half masked, not skipped):
    max(4 heads head_dim pairs / (peak * gemm_compute_eff),
        (p (c + n) kv_bytes_per_token + 2 heads pairs bytes_per_pair) / (bw * gemm_weight_eff))
    + 2 gemm_fixed_s + small_fixed_s
(both GEMMs' FLOPs at the dense GEMMs' efficiency; K and V read once; every live score byte
written once and read once; two GEMM launches and the softmax's). Torch-free, no state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from sim.util.errors import ConfigError

WHERE = "cluster.cost_model.score_buffer"  # the config field
KEYS = ("max_prefill_tokens", "bytes_per_pair")  # its fields
DEFAULT_BYTES_PER_PAIR = 6.0  # fp16 scores + the fp32 softmax copy (module docstring)


@dataclass(frozen=True, slots=True)
class ScoreBuffer:
    """The materialised score matrix of unfused prefill attention (module docstring)."""

    max_prefill_tokens: int  # tokens: the largest prefill (queries and keys) the buffer holds
    bytes_per_pair: float = DEFAULT_BYTES_PER_PAIR  # bytes live per (query, key, head)

    def __post_init__(self) -> None:
        t = self.max_prefill_tokens
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise ConfigError(f"{WHERE}.max_prefill_tokens", t, "must be an int >= 1")
        b = self.bytes_per_pair
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) \
                or b <= 0:
            raise ConfigError(f"{WHERE}.bytes_per_pair", b, "must be a finite number > 0")

    def reserve_bytes(self, heads_per_gpu: int) -> float:
        """Bytes per GPU the buffer takes from the KV pool: one layer's scores of the largest
        prefill."""
        return float(heads_per_gpu) * self.max_prefill_tokens ** 2 * self.bytes_per_pair


def score_buffer_of(options: Mapping[str, Any]) -> ScoreBuffer | None:
    """The buffer `cluster.cost_model.score_buffer` describes, or None (FlashAttention)."""
    value = options.get("score_buffer")
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(WHERE, value, "an object {max_prefill_tokens: N, bytes_per_pair: B}")
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ConfigError(f"{WHERE}.{unknown[0]}", value[unknown[0]],
                          f"unknown; known: {', '.join(KEYS)}")
    if "max_prefill_tokens" not in value:
        raise ConfigError(f"{WHERE}.max_prefill_tokens", None, "missing: the largest prefill "
                          "(tokens) the engine reserves the score buffer for")
    return ScoreBuffer(**value)


class ScoreTerms:
    """Per-layer seconds of unfused prefill attention on one GPU (module docstring)."""

    __slots__ = ("_fpp", "_score_bpp", "_kv_bpt", "_inv_c", "_inv_w", "_fixed")

    def __init__(self, buffer: ScoreBuffer, heads_per_gpu: int, head_dim: int,
                 kv_bytes_per_token: float, compute_rate: float, weight_bandwidth: float,
                 fixed_s: float) -> None:
        self._fpp = 4.0 * heads_per_gpu * head_dim  # FLOPs per (query, key) pair, both GEMMs
        self._score_bpp = 2.0 * heads_per_gpu * buffer.bytes_per_pair  # bytes moved per pair
        self._kv_bpt = kv_bytes_per_token  # bytes of K and V per token per layer on one GPU
        self._inv_c = 1.0 / compute_rate  # s/FLOP at the dense GEMMs' efficiency
        self._inv_w = 1.0 / weight_bandwidth  # s/byte at the GEMMs' streaming efficiency
        self._fixed = fixed_s  # seconds: two GEMM launches and the softmax's

    def prefill_s(self, num_chunks: int, chunk_tokens: float, context_tokens: float) -> float:
        """One layer's attention of `num_chunks` chunks of `chunk_tokens` query tokens, each
        after `context_tokens` cached ones."""
        keys = context_tokens + chunk_tokens
        pairs = num_chunks * chunk_tokens * keys
        moved = num_chunks * keys * self._kv_bpt + self._score_bpp * pairs
        return max(self._fpp * pairs * self._inv_c, moved * self._inv_w) + self._fixed

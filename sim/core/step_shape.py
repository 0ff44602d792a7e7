"""The batch behind a Step's sums: how many prefill chunks and decoding rows, how long each.

`RooflineCostModel.iteration_times_from_sums` sees only sum n_i, sum c_i, sum n_i c_i, sum n_i^2
and the row count. A per-stage model needs prefill chunks and decode rows apart. Assuming the
prefill chunks are of one length m (and n = 1 rows decode), the sums determine the split:
    T = p m + d,  S = p m^2 + d,  N = p + d   =>   d = (N S - T^2) / (N + S - 2 T),
and the contexts: sum n_i c_i = m C_p + C_d, sum c_i = C_p + C_d. The result is exact for a
pure decode batch, one chunk, a batch of equal prefills, and any of those plus decodes; other
batches get the equal-chunk batch with the same sums.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.util.errors import ConfigError


@dataclass(frozen=True, slots=True)
class BatchShape:
    """One iteration's batch as equal prefill chunks plus decoding rows."""

    num_prefill: int  # prefill chunks (rows computing more than one token)
    chunk_tokens: float  # tokens per prefill chunk
    prefill_context: float  # cached tokens before each chunk (mean)
    num_decode: int  # rows computing one token
    decode_kv: float  # cached tokens before each decoding row's token (mean)

    def __post_init__(self) -> None:
        for name in ("num_prefill", "chunk_tokens", "prefill_context", "num_decode",
                     "decode_kv"):
            if getattr(self, name) < 0:
                raise ConfigError(f"BatchShape.{name}", getattr(self, name), "must be >= 0")

    @property
    def num_tokens(self) -> float:
        """Tokens the iteration computes."""
        return self.num_prefill * self.chunk_tokens + self.num_decode


def split_from_sums(num_tokens: int, sum_context: int, sum_new_x_context: int,
                    sum_new_squared: int, num_seqs: int) -> tuple[int, float, float, int, float]:
    """(prefill chunks, tokens per chunk, context per chunk, decode rows, their total context)
    of the equal-chunk batch with these sums (see the module doc); plain floats, for hot paths."""
    if num_seqs <= 0 or num_tokens <= 0:
        return 0, 0.0, 0.0, 0, 0.0
    if num_tokens <= num_seqs:  # every row computes one token
        return 0, 0.0, 0.0, num_seqs, float(sum_context)
    t, n, s, c = float(num_tokens), float(num_seqs), float(sum_new_squared), float(sum_context)
    denom = n + s - 2.0 * t
    d = (n * s - t * t) / denom if denom > 0 else 0.0
    decode = round(d)  # clamped to [0, num_seqs - 1] (comparisons: this runs every step)
    decode = 0 if decode < 0 else (num_seqs - 1 if decode > num_seqs - 1 else decode)
    prefill = num_seqs - decode
    chunk = (t - decode) / prefill
    if not decode:
        c_prefill = c
    elif chunk > 1.0:
        c_prefill = (float(sum_new_x_context) - c) / (chunk - 1.0)
        c_prefill = 0.0 if c_prefill < 0.0 else (c if c_prefill > c else c_prefill)
    else:
        c_prefill = c * prefill / num_seqs
    return prefill, chunk, c_prefill / prefill, decode, c - c_prefill


def shape_from_sums(num_tokens: int, sum_context: int, sum_new_x_context: int,
                    sum_new_squared: int, num_seqs: int) -> BatchShape:
    """The equal-chunk batch with these sums (see the module doc)."""
    p, chunk, c_prefill, decode, c_decode = split_from_sums(
        num_tokens, sum_context, sum_new_x_context, sum_new_squared, num_seqs)
    return BatchShape(p, chunk, c_prefill, decode, c_decode / decode if decode else 0.0)

"""Token ids of each request: synthetic prompts seeded by request id, then sampled outputs.

Traces carry token counts, not text, so the token at position p of request r's prompt is a hash
of (seed, r, p) (splitmix64, vectorized over a batch): any chunking of the prompt sees the same
ids, and a request recomputed after a preemption replays exactly its earlier tokens. Sampled
tokens overwrite the sequence from their position on (a static batch retried after an OOM
samples again).
"""

from __future__ import annotations

import numpy as np

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
    return x ^ (x >> np.uint64(31))


def synthetic_tokens(seed: int, request_ids: np.ndarray, positions: np.ndarray,
                     vocab_size: int) -> np.ndarray:
    """Prompt token ids in [1, vocab_size) at (request, position) pairs (arrays, any length)."""
    base = (np.asarray(request_ids, dtype=np.int64).astype(np.uint64)
            + np.uint64((seed * 1_000_003) % 2**64))
    mixed = _splitmix64(np.asarray(positions, dtype=np.uint64) ^ _splitmix64(base))
    return (1 + mixed % np.uint64(max(vocab_size - 1, 1))).astype(np.int64)


class TokenStore:
    """The known token ids of every request the engine has seen."""

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        self.vocab_size = vocab_size  # tokens in the vocabulary
        self.seed = seed  # seeds the synthetic prompts
        self._known: dict[int, np.ndarray] = {}  # request id -> token ids set so far

    def get(self, request_id: int, start: int, stop: int) -> np.ndarray:
        """Token ids of positions [start, stop): known ones, then synthetic prompt tokens."""
        return self.get_batch((request_id,), np.array([start]), np.array([stop]))

    def get_batch(self, request_ids: tuple[int, ...] | list[int], starts: np.ndarray,
                  stops: np.ndarray) -> np.ndarray:
        """Token ids of positions [starts[i], stops[i]) of each request, concatenated."""
        lens = np.asarray(stops, dtype=np.int64) - starts
        offsets = np.cumsum(lens) - lens
        positions = np.arange(int(lens.sum())) - np.repeat(offsets - starts, lens)
        out = synthetic_tokens(self.seed, np.repeat(np.asarray(request_ids, dtype=np.int64),
                                                    lens), positions, self.vocab_size)
        for i, rid in enumerate(request_ids):
            known = self._known.get(rid)
            start = int(starts[i])
            if known is not None and start < len(known):
                upto = min(int(stops[i]), len(known))
                out[offsets[i]: offsets[i] + upto - start] = known[start:upto]
        return out

    def set_sampled(self, request_id: int, position: int, tokens: np.ndarray) -> None:
        """Tokens were sampled at `position`, `position + 1`, ...: the sequence now ends with
        them (anything known past `position` is replaced)."""
        prefix = self.get(request_id, 0, position)
        self._known[request_id] = np.concatenate([prefix, np.asarray(tokens, dtype=np.int64)])

    def num_known(self, request_id: int) -> int:
        """Tokens set explicitly (sampled, or the prompt prefix before a sample)."""
        known = self._known.get(request_id)
        return 0 if known is None else len(known)

    def drop(self, request_id: int) -> None:
        self._known.pop(request_id, None)

    def reset(self) -> None:
        self._known.clear()

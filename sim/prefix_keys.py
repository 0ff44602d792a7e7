"""Content keys of a request's KV blocks, from the trace's content ids (`block_ids`).

A trace may name the content of a request's token stream in granules of `block_tokens` tokens:
id i covers tokens [i * G, (i + 1) * G) (G = `block_tokens`; Mooncake's `hash_ids` have G = 512),
and equal ids mean equal content. The ids cover the prompt (the last granule may end early, at the
prompt's end); ids beyond the prompt's granules cover the request's output as well (a session
workload knows the answer a turn will give, since the next turn's prompt contains it).

A KV block of `block_size` tokens [k * B, (k + 1) * B) gets a key only when all its tokens are
covered. The key hashes (chained hash of the ids of every granule up to the one the block ends in,
end token): two requests share a key only if every granule before the block's end is the same,
so a cache hit is always a true prefix (a prompt sharing a later id but not the earlier ones gets
no hit), and two blocks ending at different offsets of one granule get different keys. Hashes are
Python's 64-bit `hash` of int tuples, which is deterministic (no string hashing, no per-run
salt); a collision (odds ~ 2**-64 per pair) would be a false hit, as in vLLM's hashed keys.
"""

from __future__ import annotations

from typing import Sequence

BlockKey = int  # hash of (chained hash of the content ids so far, end token of the block)


def covered_tokens(num_ids: int, block_tokens: int, num_prompt_tokens: int,
                   num_total_tokens: int) -> int:
    """Leading tokens of a request's stream whose content the ids name: the prompt (at most),
    or prompt and outputs (at most `num_total_tokens`) when there are ids beyond the prompt's."""
    prompt_ids = -(-num_prompt_tokens // block_tokens)
    limit = num_prompt_tokens if num_ids <= prompt_ids else num_total_tokens
    return min(num_ids * block_tokens, limit)


def block_keys(block_ids: Sequence[int], block_tokens: int, block_size: int,
               num_prompt_tokens: int, num_total_tokens: int) -> list[BlockKey]:
    """The keys of the leading full KV blocks whose tokens the ids cover, in order."""
    if block_tokens < 1 or block_size < 1:
        raise ValueError(f"block_tokens={block_tokens}, block_size={block_size}: must be >= 1")
    covered = covered_tokens(len(block_ids), block_tokens, num_prompt_tokens, num_total_tokens)
    keys: list[BlockKey] = []
    chain, done = 0, 0  # hash over the first `done` ids
    for end in range(block_size, covered + 1, block_size):
        granules = -(-end // block_tokens)  # granules the block's last token reaches into
        while done < granules:
            chain = hash((chain, int(block_ids[done])))
            done += 1
        keys.append(hash((chain, end)))
    return keys

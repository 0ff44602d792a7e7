"""Content keys of a request's KV blocks, from the trace's content ids (`block_ids`).

A trace may name the content of a request's token stream in granules of `block_tokens` tokens:
id i covers tokens [i * G, (i + 1) * G) (G = `block_tokens`; Mooncake's `hash_ids` have G = 512),
and equal ids mean equal content. The ids cover the prompt (the last granule may end early, at the
prompt's end); ids beyond the prompt's granules cover the request's output as well (a session
workload knows the answer a turn will give, since the next turn's prompt contains it).

A KV block of `block_size` tokens [k * B, (k + 1) * B) gets a key only when all its tokens are
covered. The key is (end token of the block, chained hash of the ids of every granule up to the
one the block ends in), packed losslessly into one int: two requests share a key only if every
granule before the block's end is the same, so a cache hit is always a true prefix (a prompt
sharing a later id but not the earlier ones gets no hit), and two blocks ending at different
offsets of one granule get different keys.

The chain is a real 64-bit hash: BLAKE2b (8-byte digest) of a fixed little-endian encoding of
(parent chain, block id), the same in every process and Python version. (CPython's `hash` is not
one: hash(-1) == hash(-2), so ids -1 and -2 collided and a trace reported false hits.) A collision
(odds ~ 2**-64 per pair of distinct prefixes) would be a false hit, as in vLLM's hashed keys.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Sequence

BlockKey = int  # (end token of the block) << 64 | (chained hash of the content ids so far)

CHAIN_BITS = 64  # bits of the chained hash (BLAKE2b digest of 8 bytes)
EMPTY_CHAIN = bytes(8)  # the chained hash of no ids (8 zero bytes)
_ID = struct.Struct("<q")  # a block id in int64 range: 8 bytes, little-endian two's complement
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # range of ids with the fixed 8-byte encoding


def chain_hash(parent: bytes, block_id: int) -> bytes:
    """The 8-byte chained hash after `parent` (EMPTY_CHAIN for no ids) and one more block id:
    BLAKE2b over parent + id. Ids in int64 range take 8 bytes; larger ids their minimal
    two's-complement bytes (at least 9), so the encoding is injective."""
    if _INT64_MIN <= block_id <= _INT64_MAX:
        data = parent + _ID.pack(block_id)
    else:
        data = parent + block_id.to_bytes((block_id.bit_length() + 8) // 8, "little",
                                          signed=True)
    return hashlib.blake2b(data, digest_size=8).digest()


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
    last_end = covered // block_size * block_size  # end token of the last full block
    keys: list[BlockKey] = []
    chain = EMPTY_CHAIN  # hash over the ids of granules 0..g
    blake2b, pack = hashlib.blake2b, _ID.pack  # locals: this loop is on the admission path
    for g in range(-(-last_end // block_tokens)):
        block_id = int(block_ids[g])
        if _INT64_MIN <= block_id <= _INT64_MAX:  # chain_hash, inlined
            chain = blake2b(chain + pack(block_id), digest_size=8).digest()
        else:
            chain = chain_hash(chain, block_id)
        # blocks ending in granule g: ends in (g * G, (g + 1) * G], multiples of block_size
        first = (g * block_tokens // block_size + 1) * block_size
        last = min((g + 1) * block_tokens, last_end) // block_size * block_size
        if first == last:
            keys.append((first << CHAIN_BITS) + int.from_bytes(chain, "little"))
        elif first < last:  # keys step by block_size << 64 (the hash is < 2**64)
            value = int.from_bytes(chain, "little")
            keys.extend(range((first << CHAIN_BITS) + value, (last << CHAIN_BITS) + value + 1,
                              block_size << CHAIN_BITS))
    return keys

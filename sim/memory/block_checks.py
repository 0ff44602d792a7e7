"""The invariants of a `BlockManager` (sim/memory/block_manager.py), asserted by its `check()` in tests
and by the real engine's KV cache: every block owned or free exactly once, reference counts equal
to the tables' holders, tables as long as their tokens need, and the prefix cache's keys, LRU
and holder sets consistent with them."""

from __future__ import annotations

from collections import Counter
from typing import Any


def check_block_manager(bm: Any) -> None:
    """Assert `bm`'s accounting and cache invariants (AssertionError naming the first broken)."""
    refs = Counter(b for t in bm._tables.values() for b in t)
    free = set(bm._free) | set(bm._evictable)
    assert len(refs) + len(free) == bm.num_total_blocks, "blocks leaked"
    assert len(free) == len(bm._free) + len(bm._evictable), "a block listed free twice"
    assert not set(refs) & free, "a block is both owned and free"
    for b in range(bm.num_total_blocks):
        assert bm._ref[b] == refs.get(b, 0), f"block {b}: ref count off"
    for rid, table in bm._tables.items():
        assert len(table) == bm.blocks_for(bm._tokens[rid]), f"table of {rid} off"
        assert len(set(table)) == len(table), f"table of {rid} repeats a block"
    assert len(bm._cached) == len(bm._key_of), "a key maps to two blocks"
    for b, key in bm._key_of.items():
        assert bm._cached[key] == b, f"block {b}: key maps elsewhere"
    assert not set(bm._free) & set(bm._key_of), "a never-keyed free block has a key"
    for b, key in bm._evictable.items():
        assert bm._key_of.get(b) == key, f"evictable block {b} lost its key"
    _check_holders(bm, refs)


def _check_holders(bm: Any, refs: Counter) -> None:
    """The holder sets, shared blocks and extra references agree with the tables."""
    held = {b for b in bm._key_of if refs.get(b)}
    assert set(bm._holders) == held, "holders tracked for the wrong blocks"
    for b in held:
        who = {rid for rid, t in bm._tables.items() if b in t}
        assert bm._holders[b] == who, f"block {b}: holders off"
    assert bm._multi == {b for b, n in refs.items() if n > 1}, "shared blocks off"
    assert not bm._multi - set(bm._key_of), "an unkeyed block is shared"
    assert bm._num_extra_refs == sum(n - 1 for n in refs.values()), "extra refs off"

"""The counting block manager answers exactly as the table-keeping one without prefix caching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.memory.block_counter import CountingBlockManager, make_block_manager
from sim.memory.block_manager import BlockManager, OutOfBlocks

OPS = st.lists(st.tuples(st.sampled_from(["allocate", "append", "free", "trim", "append_all"]),
                         st.integers(0, 5), st.integers(0, 70)), max_size=60)


def call(bm, op: str, rid: int, n: int):
    """Apply one operation; the outcome is its result or the type of error it raised."""
    try:
        if op == "allocate":
            out = bm.allocate(rid, n)
        elif op == "append":
            out = bm.append(rid, n)
        elif op == "append_all":
            out = bm.append_all([rid, (rid + 1) % 6], n % 9)
        elif op == "free":
            out = bm.free(rid)
        else:
            out = bm.trim(rid, n % 20)
    except (OutOfBlocks, ValueError, KeyError) as exc:
        return type(exc).__name__
    return len(out) if isinstance(out, list) else out


def state(bm, n: int) -> tuple:
    """Everything a policy can ask, for request ids 0..5 and growths up to `n`."""
    per = tuple((bm.has(r), bm.num_tokens(r), bm.num_blocks(r), bm.blocks_to_append(r, n),
                 bm.can_append(r, n)) for r in range(6))
    return (bm.num_free_blocks, bm.num_used_blocks, bm.num_cached_blocks,
            bm.num_blocks_to_allocate(n), bm.can_allocate(n), bm.shared_tokens(range(6)),
            bm.find_cached_prefix([1, 2]), bm.num_hit_blocks, bm.num_queried_blocks, per)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(1, 24), block_size=st.integers(1, 8),
       watermark=st.sampled_from([0.0, 0.1, 0.5]), ops=OPS)
def test_counting_equals_table_keeping(num_blocks: int, block_size: int, watermark: float,
                                       ops: list) -> None:
    tables = BlockManager(num_blocks, block_size, watermark)
    counts = CountingBlockManager(num_blocks, block_size, watermark)
    for op, rid, n in ops:
        if op == "append" and not tables.has(rid):
            continue  # the table-keeping manager leaks blocks there (a caller's bug): skip
        if op == "append_all" and not (tables.has(rid) and tables.has((rid + 1) % 6)):
            continue
        assert call(tables, op, rid, n) == call(counts, op, rid, n), (op, rid, n)
        tables.check()
        counts.check()
        assert state(tables, n) == state(counts, n)


def test_make_block_manager_keeps_tables_only_for_caching() -> None:
    assert isinstance(make_block_manager(8, 4), CountingBlockManager)
    assert isinstance(make_block_manager(8, 4, enable_caching=True), BlockManager)


def test_counting_has_no_block_ids() -> None:
    bm = CountingBlockManager(8, 4)
    bm.allocate(1, 5)
    with pytest.raises(TypeError, match="no block ids"):
        bm.block_table(1)
    with pytest.raises(ValueError):
        bm.num_blocks_to_allocate(4, hits=[0])

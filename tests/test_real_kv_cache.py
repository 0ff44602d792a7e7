"""The paged KV cache, its block accounting, and the synthetic token ids of requests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from real.attention import BatchLayout  # noqa: E402
from real.executor import TorchExecutor  # noqa: E402
from real.kv_cache import KVCacheOOM, PagedKVCache  # noqa: E402
from real.tokens import TokenStore  # noqa: E402
from sim.core.executor import Step  # noqa: E402


def small_cache(num_blocks: int = 8, block_size: int = 4) -> PagedKVCache:
    return PagedKVCache(num_layers=1, num_blocks=num_blocks, block_size=block_size,
                        num_kv_heads=2, head_dim=3, dtype=torch.float32, device="cpu")


def test_blocks_are_allocated_on_demand_and_freed():
    cache = small_cache()
    tables = cache.append_all((7, 9), np.array([5, 4]))
    assert [len(t) for t in tables] == [2, 1]  # ceil(5/4), ceil(4/4)
    assert cache.num_tokens(7) == 5 and cache.blocks.num_free_blocks == 5
    cache.append_all((7, 9), np.array([3, 1]))  # 8 tokens: still 2 blocks; 5 tokens: 2 blocks
    assert cache.blocks.num_free_blocks == 4
    assert cache.free(7) == 2 and not cache.has(7)
    cache.check()


def test_running_out_raises_and_changes_nothing():
    cache = small_cache(num_blocks=3)
    cache.append_all((1,), np.array([8]))
    with pytest.raises(KVCacheOOM) as err:
        cache.append_all((1, 2), np.array([1, 4]))  # 1 + 1 blocks > 1 free
    assert err.value.num_needed_blocks == 2 and err.value.num_free_blocks == 1
    assert cache.num_tokens(1) == 8 and not cache.has(2)
    cache.check()


def test_slots_address_each_token_once():
    cache = small_cache(num_blocks=6, block_size=4)
    tables = cache.append_all((1, 2), np.array([6, 9]))
    layout = BatchLayout(np.array([6, 9]), np.array([0, 0]), tables, 4)
    slots = np.concatenate([layout.slots(0, 0, 6), layout.slots(1, 0, 9)])
    assert len(set(slots.tolist())) == 15
    for i, rid in enumerate((1, 2)):  # slots lie in the request's own blocks, in order
        s = layout.slots(i, 0, int(layout.num_new[i]))
        assert set((s // 4).tolist()) <= set(cache.block_table(rid).tolist())
        assert (np.diff(s[s // 4 == s[0] // 4]) == 1).all()


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12), st.booleans()),
                    max_size=40))
def test_block_accounting_survives_any_sequence(ops):
    cache = small_cache(num_blocks=10, block_size=4)
    held = {}
    for rid, grow, drop in ops:
        if drop:
            cache.free(rid)
            held.pop(rid, None)
            continue
        try:
            cache.append_all((rid,), np.array([grow]))
            held[rid] = held.get(rid, 0) + grow
        except KVCacheOOM:
            pass
        cache.check()
    assert {r: cache.num_tokens(r) for r in held} == held
    owned = [b for r in held for b in cache.block_table(r).tolist()]
    assert len(owned) == len(set(owned))


def test_token_ids_do_not_depend_on_chunking():
    store = TokenStore(vocab_size=256, seed=5)
    whole = store.get(3, 0, 40)
    parts = np.concatenate([store.get(3, 0, 7), store.get(3, 7, 30), store.get(3, 30, 40)])
    assert (whole == parts).all() and whole.min() >= 1 and whole.max() < 256
    assert not (store.get(4, 0, 40) == whole).all()  # seeded by request id
    store.set_sampled(3, 10, np.array([99, 98]))
    got = store.get_batch((3, 3), np.array([8, 12]), np.array([13, 14]))
    assert got.tolist() == [*whole[8:10], 99, 98, *whole[12:13], *whole[12:14]]


def test_preemption_drops_and_recomputes_consistently():
    ex = TorchExecutor("tiny", "cpu", kv_tokens=256, block_size=16, warmup_iterations=0)
    ex.execute(Step(0, (1, 2), (20, 35), (0, 0), (True, True)))
    ex.execute(Step(0, (1, 2), (1, 1), (20, 35), (True, True), num_iterations=5))
    first_outputs = ex.tokens.get(2, 35, 41).copy()
    used = ex.cache.blocks.num_used_blocks
    ex.check()
    # request 2 is preempted by recomputation: the policy schedules its 41 known tokens again
    ex.execute(Step(0, (2,), (41,), (0,), (True,)))
    ex.check()
    assert ex.cache.num_tokens(2) == 41
    assert ex.cache.blocks.num_used_blocks == used  # 40 -> 41 tokens: the same 3 blocks
    assert (ex.tokens.get(2, 35, 41) == first_outputs).all()  # its tokens were replayed
    twin = TorchExecutor("tiny", "cpu", kv_tokens=256, block_size=16, warmup_iterations=0)
    twin.execute(Step(0, (1, 2), (20, 35), (0, 0), (True, True)))
    twin.execute(Step(0, (1, 2), (1, 1), (20, 35), (True, True), num_iterations=6))
    assert twin.tokens.get(2, 41, 42) == ex.tokens.get(2, 41, 42)  # as if never preempted
    ex.execute(Step(0, (1, 2), (1, 1), (25, 41), (True, True)))
    ex.execute(Step(0, (2,), (1,), (42,), (True,), freed_request_ids=(1,)))
    assert not ex.cache.has(1)
    ex.check()


def test_context_mismatch_is_an_error():
    ex = TorchExecutor("tiny", "cpu", kv_tokens=256, warmup_iterations=0)
    ex.execute(Step(0, (1,), (10,), (0,), (True,)))
    with pytest.raises(RuntimeError, match="out of step"):
        ex.execute(Step(0, (1,), (1,), (12,), (True,)))

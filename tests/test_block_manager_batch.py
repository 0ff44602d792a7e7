"""BlockManager's batched paths give what the one-at-a-time paths give: `grow_to_held` takes
blocks as `append` request by request would, `cache_computed` caches as `cache_full_blocks`
would (private keys of a request never preempted registered when it releases its blocks), and
`free` of an unshared table fills the LRU and the free list in the block-by-block order, and a
finished request's private blocks, parked as one dead run, are evicted in that order too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from sim.memory.block_manager import BlockManager


@dataclass
class Req:
    """The request fields `cache_computed` reads."""

    request_id: int  # id
    num_computed_tokens: int = 0  # tokens
    num_preemptions: int = 0  # times preempted


def private(rid: int, n: int) -> list[int]:
    """Private keys of blocks 0..n-1 (policies/prefix_caching.private_keys)."""
    return [-1 - ((rid << 32) | j) for j in range(n)]


class Eager(BlockManager):
    lazy_private_keys = False  # every key registered as computed


def lazy_and_eager(num_blocks: int) -> tuple[BlockManager, Eager]:
    """A manager that registers private keys on release and one that registers them all as
    computed, both with caching and blocks of 4 tokens."""
    return (BlockManager(num_blocks, 4, enable_caching=True),
            Eager(num_blocks, 4, enable_caching=True))


def allocate_computed(managers: tuple[BlockManager, ...], rid: int, num_tokens: int,
                      num_computed: int, num_keys: int) -> None:
    """Request `rid` holding `num_tokens` tokens, its first `num_computed` computed and their
    full blocks cached under its first `num_keys` private keys, on each manager."""
    r = Req(rid, num_computed_tokens=num_computed)
    for bm in managers:
        bm.allocate(rid, num_tokens)
        bm.cache_computed([r], lambda _: private(rid, num_keys))


def state(bm: BlockManager) -> tuple:
    """Everything that decides later allocations, hits and evictions."""
    bm.register_lazy_keys()
    return (dict(bm._cached), dict(bm._key_of), list(bm._evictable.items()), list(bm._free),
            {r: list(t) for r, t in bm._tables.items()}, dict(bm._tokens),
            bm.num_evicted_blocks, {b: set(h) for b, h in bm._holders.items()})


def test_grow_to_held_takes_blocks_as_appends_in_order():
    one, many = BlockManager(8, 4, enable_caching=True), BlockManager(8, 4, enable_caching=True)
    for bm in (one, many):
        bm.allocate(9, 16, keys=[5, 6, 7, 8])  # blocks 0-3 keyed ...
        bm.cache_full_blocks(9, [5, 6, 7, 8], 16)
        bm.free(9)  # ... evictable, tail first: 3, 2, 1, 0
        bm.allocate(1, 4)  # block 4
        bm.allocate(2, 4)  # block 5
    one.append(1, 9)  # 13 tokens: never-keyed 6, 7, then evicts 3
    one.append(2, 5)  # 9 tokens: evicts 2, 1
    assert many.grow_to_held([1, 2], [13, 9]) == [13, 9]
    assert many.block_table(1) == one.block_table(1) == [4, 6, 7, 3]
    assert many.block_table(2) == one.block_table(2) == [5, 2, 1]
    assert state(many) == state(one) and many.num_evicted_blocks == 3
    before = state(many)
    assert many.grow_to_held([1, 2], [24, 9]) is None  # 2 more blocks, 1 free: nothing moves
    assert state(many) == before
    many.check()


def test_unpreempted_private_keys_register_when_released():
    lazy, eager = lazy_and_eager(6)
    allocate_computed((lazy, eager), 7, 14, 12, 4)  # blocks 0-3, the last holding 2 tokens
    assert eager.num_cached_blocks == lazy.num_cached_blocks == 3  # full and computed
    assert not lazy._key_of and len(eager._key_of) == 3  # lazy: not registered yet
    for bm in (lazy, eager):
        bm.free(7)
    assert list(lazy._evictable) == [2, 1, 0] and list(lazy._free)[-1] == 3
    assert state(lazy) == state(eager)
    assert lazy.find_cached_prefix(private(7, 4)) == [0, 1, 2]
    lazy.check()


def test_a_preempted_request_registers_as_it_computes():
    bm = BlockManager(6, 4, enable_caching=True)
    bm.allocate(7, 8)
    bm.cache_computed([Req(7, 8, num_preemptions=1)], lambda _: private(7, 2))
    assert bm._key_of == {0: private(7, 2)[0], 1: private(7, 2)[1]}


@pytest.mark.parametrize("seed", [3, 5])
def test_lazy_and_eager_managers_agree_through_a_random_run(seed: int):
    rng = np.random.default_rng(seed)
    lazy, eager = lazy_and_eager(60)
    reqs: dict[int, Req] = {}  # requests holding blocks
    preempted: dict[int, Req] = {}  # released, to come back (a finished one never does)
    shared = [11, 12, 13]  # content keys some requests start with
    finished: set[int] = set()  # ids not used again
    for step in range(3000):
        rid = int(rng.integers(0, 150))
        if rid in finished:
            continue
        r = reqs.get(rid)
        keys = (shared if rid % 3 == 0 else []) + private(rid, 40)[3 if rid % 3 == 0 else 0:]
        if r is None:
            n = int(rng.integers(1, 20))
            hits = lazy.find_cached_prefix(keys[: n // 4])
            if lazy.num_blocks_to_allocate(n, hits) > lazy.num_free_blocks:
                continue
            for bm in (lazy, eager):
                bm.allocate(rid, n, keys=keys[: n // 4])
            r = preempted.pop(rid, None) or Req(rid)
            r.num_computed_tokens = len(hits) * 4
            reqs[rid] = r
            if rng.random() < 0.5:  # its prompt computed in the admitting step
                r.num_computed_tokens = n
                for bm in (lazy, eager):
                    bm.cache_computed([r], lambda _: keys)
        elif rng.random() < 0.4:
            done = rng.random() >= 0.5  # finished, else preempted: it may come back
            for bm in (lazy, eager):
                bm.free(rid, finished=done)
            del reqs[rid]
            if done:  # its private blocks park as one dead run in the lazy manager
                finished.add(rid)
            else:
                r.num_preemptions += 1
                preempted[rid] = r
        else:
            grow = int(rng.integers(1, 6))
            target = lazy.num_tokens(rid) + grow
            held = lazy.grow_to_held([rid], [target])
            assert held == eager.grow_to_held([rid], [target])
            if held is not None:
                r.num_computed_tokens = min(target, r.num_computed_tokens + grow)
                for bm in (lazy, eager):
                    bm.cache_computed([r], lambda _: keys)
        assert lazy.num_cached_blocks == eager.num_cached_blocks
        assert lazy.num_free_blocks == eager.num_free_blocks
        assert lazy.num_evicted_blocks == eager.num_evicted_blocks
        if step % 200 == 0:
            assert state(lazy) == state(eager)
    assert lazy._num_runs_made > 10  # finished requests parked their private blocks as runs
    assert state(lazy) == state(eager)
    lazy.check()
    eager.check()


def test_a_finished_requests_private_blocks_park_as_one_run():
    lazy, eager = lazy_and_eager(8)
    allocate_computed((lazy, eager), 7, 18, 16, 4)  # blocks 0-4, the last holding 2 tokens
    for bm in (lazy, eager):
        bm.free(7, finished=True)  # 3, 2, 1, 0 evictable (one run in `lazy`), 4 free
    assert len(lazy._evictable) == 1 and lazy.num_run_blocks == 4
    assert lazy.num_free_blocks == eager.num_free_blocks == 8
    assert lazy.num_cached_blocks == eager.num_cached_blocks == 4
    for bm in (lazy, eager):
        bm.allocate(1, 16)  # never-keyed 5, 6, 7, 4, then evicts 3 (the run's head)
        bm.allocate(2, 4)  # evicts 2
    assert lazy.block_table(1) == eager.block_table(1) == [5, 6, 7, 4]
    assert lazy.block_table(2) == eager.block_table(2) == [3]
    for bm in (lazy, eager):
        bm.allocate(3, 4)
    assert lazy.block_table(3) == eager.block_table(3) == [2]
    assert lazy.num_run_blocks == 2 and lazy.num_evicted_blocks == eager.num_evicted_blocks == 2
    assert lazy.num_free_blocks == eager.num_free_blocks == 2
    assert state(lazy) == state(eager)  # expands the run: 1, 0 registered, at the LRU's head
    assert list(lazy._evictable) == [1, 0] and lazy.num_run_blocks == 0
    lazy.check()


def test_a_run_and_single_entries_are_evicted_in_queue_order():
    lazy, eager = lazy_and_eager(6)
    for bm in (lazy, eager):
        bm.allocate(1, 8, keys=[11])  # block 0 keyed by content, 1 private
        bm.cache_full_blocks(1, [11], 4)
        bm.cache_computed([Req(1, 8)], lambda _: [11, *private(1, 2)[1:]])
        bm.allocate(2, 8)
        bm.cache_computed([Req(2, 8)], lambda _: private(2, 2))
        bm.free(1, finished=True)  # run [1], then 0 (content)
        bm.free(2, finished=True)  # run [3, 2]
        bm.allocate(3, 16)  # 4, 5 free, then evicts 1, 0
    assert lazy.block_table(3) == eager.block_table(3) == [4, 5, 1, 0]
    assert lazy.find_cached_prefix([11]) == eager.find_cached_prefix([11]) == []
    assert state(lazy) == state(eager)

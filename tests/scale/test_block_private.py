"""PrivateBlocks (prefix caching by counts while every key is private) answers as BlockManager
does on V1-like operation sequences: admissions that look up their own parked blocks, chunked
growth and decodes, registration after each step, preemption and finishing; and
`to_block_manager`, taken anywhere in a sequence, is a BlockManager that goes on the same."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from sim.memory.block_manager import BlockManager, OutOfBlocks
from sim.memory.block_private import PrivateBlocks, key_owner, private_key


@dataclass
class Req:
    """The request fields the managers' callers read."""

    request_id: int  # id
    num_tokens: int  # known tokens (prompt + outputs so far)
    num_computed_tokens: int = 0  # tokens
    num_preemptions: int = 0  # times preempted


def keys_of(r: Req) -> list[int]:
    """Its private keys (policies/prefix_caching.private_keys), generously many."""
    return [private_key(r.request_id, j) for j in range(64)]


def canonical(bm: BlockManager) -> tuple:
    """Everything that decides later answers, block ids left out: per held request its tokens
    and keys, the LRU's keys in order, the never-keyed free count and the counters."""
    bm.register_lazy_keys()
    held = {rid: (bm._tokens[rid], bm._num_keyed[rid], [bm._key_of.get(b) for b in t])
            for rid, t in bm._tables.items()}
    return (held, [bm._key_of[b] for b in bm._evictable], len(bm._free),
            bm.num_evicted_blocks, bm.num_hit_blocks, bm.num_queried_blocks)


class Driver:
    """A V1-like caller of several managers at once, checking they answer alike."""

    def __init__(self, managers: list, rng: np.random.Generator, bs: int) -> None:
        self.managers, self.rng, self.bs = managers, rng, bs
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.next_id = 0

    def same(self, f):
        """f(manager) on each: all equal (exceptions by type)."""
        out = []
        for bm in self.managers:
            try:
                out.append(f(bm))
            except (OutOfBlocks, ValueError) as exc:
                out.append(type(exc).__name__)
        assert all(o == out[0] for o in out), out
        return out[0]

    def arrive(self) -> None:
        self.waiting.append(Req(self.next_id, int(self.rng.integers(1, 9 * self.bs))))
        self.next_id += 1

    def admit(self) -> None:
        if not self.waiting:
            return
        r = self.waiting[0]
        keys = keys_of(r)[: r.num_tokens // self.bs]
        hits = self.same(lambda bm: len(bm.find_cached_prefix(keys)))
        cached = min(hits * self.bs, r.num_tokens - 1)
        n = int(self.rng.integers(1, r.num_tokens - cached + 1))
        take = self.same(lambda bm: bm.num_blocks_to_allocate(
            cached + n, bm.find_cached_prefix(keys)))
        if take > self.same(lambda bm: bm.num_free_blocks):
            return
        self.waiting.pop(0)
        self.same(lambda bm: bool(bm.allocate(r.request_id, cached + n,
                                              keys=keys[: (cached + n) // self.bs])))
        r.num_computed_tokens = cached + n  # its first chunk, computed in this step
        self.running.append(r)
        self.register([r])

    def step(self) -> None:
        """Running requests grow (a decode, or their next prefill chunk) all at once or one
        by one (preempting the last admitted while short), then compute and register."""
        if not self.running:
            return
        want = [r.num_computed_tokens + 1 for r in self.running]
        ids = [r.request_id for r in self.running]
        if self.same(lambda bm: bm.grow_to_held(ids, want)) is None:
            r = self.running[0]
            while self.same(lambda bm: bm.blocks_to_append(r.request_id, 1)) > \
                    self.same(lambda bm: bm.num_free_blocks):
                self.preempt(self.running[-1])
                if not self.running or self.running[0] is not r:
                    return
            self.same(lambda bm: bool(bm.append(r.request_id, 1)))  # a block taken
            want, batch = [r.num_computed_tokens + 1], [r]
        else:
            batch = list(self.running)
        for r, t in zip(batch, want):
            r.num_computed_tokens = t
            r.num_tokens = max(r.num_tokens, t + 1)  # sampled a token
        m = int(self.rng.integers(1, 4))  # iterations of a jump: m - 1 more tokens each
        ids = [r.request_id for r in batch]
        if m > 1 and self.same(lambda bm: bm.append_all(ids, m - 1)) is None:
            for r in batch:
                r.num_computed_tokens += m - 1
                r.num_tokens = r.num_computed_tokens + 1
        self.register(batch)

    def register(self, batch: list[Req]) -> None:
        for bm in self.managers:
            bm.cache_computed(batch, keys_of)

    def preempt(self, r: Req) -> None:
        self.running.remove(r)
        self.same(lambda bm: bm.free(r.request_id, num_computed_tokens=r.num_computed_tokens))
        r.num_computed_tokens = 0
        r.num_preemptions += 1
        self.waiting.insert(0, r)

    def finish(self) -> None:
        if self.running:
            r = self.running[int(self.rng.integers(len(self.running)))]
            self.running.remove(r)
            self.same(lambda bm: bm.free(r.request_id, finished=True,
                                         num_computed_tokens=r.num_computed_tokens))

    def check(self) -> None:
        self.same(lambda bm: (bm.num_free_blocks, bm.num_used_blocks, bm.num_evicted_blocks,
                              bm.num_hit_blocks, bm.num_queried_blocks,
                              bm.num_tokens_of(list(range(self.next_id)))))
        for bm in self.managers:
            bm.check()


@pytest.mark.parametrize("seed", range(40))
def test_private_blocks_answer_as_block_manager(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 2, 4, 16]))
    num_blocks = int(rng.integers(8, 40))
    private = PrivateBlocks(num_blocks, bs)
    d = Driver([BlockManager(num_blocks, bs, enable_caching=True), private], rng, bs)
    switch = int(rng.integers(50, 400))  # where the counts become block tables
    for i in range(400):
        op = rng.choice(["arrive", "admit", "step", "step", "preempt", "finish"],
                        p=[0.2, 0.25, 0.2, 0.2, 0.05, 0.1])
        if op == "preempt":
            if d.running:
                d.preempt(d.running[-1])
        else:
            getattr(d, str(op))()
        d.check()
        if i == switch:
            computed = {r.request_id: r.num_computed_tokens for r in d.running}
            tables = private.to_block_manager(computed)
            tables.check()
            assert canonical(tables) == canonical(d.managers[0])
            d.managers[1] = tables  # goes on with block ids
    assert d.managers[0].num_hit_blocks > 0 or seed % 7  # hits happen (most seeds)


def test_parked_run_is_found_shared_whole_and_evicted_from_the_top() -> None:
    bm = PrivateBlocks(10, 4)
    bm.allocate(3, 16)  # 4 blocks
    assert bm.free(3, num_computed_tokens=13) == 4  # 3 full computed blocks park, 1 is free
    keys = [private_key(3, j) for j in range(4)]
    assert bm.find_cached_prefix(keys) == keys[:3]
    assert bm.find_cached_prefix(keys[2:3]) == keys[2:3] and not bm.find_cached_prefix(keys[3:])
    bm.allocate(5, 28)  # 7 blocks: 7 never-keyed free, no eviction
    assert bm.num_evicted_blocks == 0
    bm.append(5, 4)  # the 8th evicts request 3's block 2 (its top)
    assert bm.num_evicted_blocks == 1 and bm.find_cached_prefix(keys) == keys[:2]
    assert bm.num_blocks_to_allocate(12, keys[:2]) == 3  # the hits leave the free pool too
    bm.allocate(3, 8, keys=keys[:2])
    assert bm.num_hit_blocks == 2 and bm.num_free_blocks == 0
    bm.check()


def test_finished_runs_are_never_found_and_content_keys_refused() -> None:
    bm = PrivateBlocks(8, 2)
    bm.allocate(1, 8)
    bm.free(1, finished=True, num_computed_tokens=8)
    assert bm.num_free_blocks == 8 and not bm.find_cached_prefix([private_key(1, 0)])
    with pytest.raises(ValueError, match="content key"):
        bm.find_cached_prefix([12345])
    bm.allocate(2, 2)
    with pytest.raises(TypeError, match="num_computed_tokens"):
        bm.free(2)
    with pytest.raises(TypeError, match="block ids"):
        bm.block_table(2)
    assert key_owner(private_key(7, 5)) == (7, 5)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vllm_runs_alike_on_counts_and_on_tables(seed: int, monkeypatch) -> None:
    """Whole `vllm` runs with little KV (preemptions, re-admissions finding their own blocks,
    evictions): the same records, steps and events whether the instances count or keep
    block tables from the start."""
    from policies.simulate import simulate
    from policies.vllm_v1 import VllmV1Policy
    from tests.factories import LinearExecutor, random_trace

    trace = random_trace(np.random.default_rng(seed), 80, rate=40.0, max_prompt=120,
                         max_output=60)
    params = {"max_num_batched_tokens": 64, "max_num_seqs": 16, "block_size": 8}
    ex = LinearExecutor(capacity=400, per_ctx_s=1e-6)
    counts = simulate(trace, "vllm", params, [ex, ex])
    init = VllmV1Policy.__init__

    def with_tables(self, *args, **kwargs):
        init(self, *args, **kwargs)
        assert self.private_blocks
        self.use_block_tables()

    monkeypatch.setattr(VllmV1Policy, "__init__", with_tables)
    tables = simulate(trace, "vllm", params, [ex, ex])
    assert counts.records["num_preemptions"].sum() > 0
    assert counts.records["num_cached_tokens"].sum() > 0  # own blocks found again
    pd.testing.assert_frame_equal(counts.records, tables.records)
    wall = [c for c in counts.steps.columns if c.endswith("host_s")]  # the host's clock
    pd.testing.assert_frame_equal(counts.steps.drop(columns=wall),
                                  tables.steps.drop(columns=wall))
    pd.testing.assert_frame_equal(counts.events, tables.events)

"""The prefix cache's host and remote tiers (sim/memory/kv_tiers.py): demotion on eviction, promotion
on a hit, reference counts across both, capacities, and a run's per-tier accounting."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.simulate import simulate
from sim.memory.block_manager import OutOfBlocks
from sim.memory.kv_moves import KVMoves
from sim.memory.kv_tiers import LRUTier, TieredBlockManager
from tests.factories import TierExecutor, make_trace, random_trace, stream_block_ids
from tests.test_properties import check_invariants

BPT = 1000.0  # bytes of KV per token


def manager(gpu: int = 4, host: int = 8, remote: int | None = None,
            watermark: float = 0.0) -> TieredBlockManager:
    """A tiered manager of `gpu` GPU blocks of 4 tokens over host (and remote) tiers."""
    tier = None if remote is None else LRUTier("remote", remote)
    return TieredBlockManager(gpu, 4, watermark, LRUTier("host", host), tier, KVMoves(BPT))


def keys(family: int, n: int) -> list[int]:
    return [family * 100 + j for j in range(n)]


def test_demoted_blocks_are_promoted_with_consistent_reference_counts():
    bm = manager()
    k = keys(1, 3)
    bm.allocate(1, 12, k)
    bm.cache_full_blocks(1, k, 12)
    bm.allocate(2, 12, k)  # shares all three: references 2
    assert bm.num_hit_blocks == 3 and bm.shared_tokens([1, 2]) == 12
    bm.check()
    bm.free(1)
    bm.free(2)  # cached, evictable
    bm.check()
    bm.allocate(3, 16)  # all four GPU blocks: the three cached ones are evicted, demoted
    assert bm.num_cached_blocks == 0 and bm.host.keys() == [k[2], k[1], k[0]]  # tail first
    assert bm.moves.counters["kv_host_out_bytes"] == 3 * 4 * BPT
    assert bm.moves.swap_in_tokens == 0  # demotion is written back off the critical path
    bm.check()
    bm.free(3)
    table = bm.allocate(4, 14, k)  # a hit on all three: promoted, one reference each
    assert bm.last_hits == (0, 3, 0) and bm.num_hit_blocks == 6
    assert len(bm.host) == 0 and bm.find_cached_prefix(k) == table[:3]
    assert bm.moves.swap_in_tokens == 12  # whole blocks copied host -> GPU
    assert bm.moves.counters["kv_host_in_bytes"] == 12 * BPT
    assert [bm._ref[b] for b in table] == [1, 1, 1, 1]
    bm.check()
    bm.allocate(5, 8, k[:2])  # the promoted blocks are ordinary cached blocks now: shared
    assert [bm._ref[b] for b in table[:2]] == [2, 2] and bm.last_hits == (2, 0, 0)
    bm.check()
    for rid in (4, 5):
        bm.free(rid)
    bm.check()
    assert bm.num_free_blocks == 4 and bm.num_cached_blocks == 3


def test_host_overflow_moves_to_remote_and_a_hit_there_pays_the_remote_link():
    bm = manager(gpu=4, host=2, remote=2)
    k = keys(2, 4)
    bm.allocate(1, 16, k)
    bm.cache_full_blocks(1, k, 16)
    bm.free(1)  # evictable tail first: k3, k2, k1, k0
    bm.allocate(2, 16)  # evicts all four: host keeps the last two demoted, remote the others
    assert bm.host.keys() == [k[1], k[0]] and bm.remote.keys() == [k[3], k[2]]
    c = bm.moves.counters
    assert c["kv_host_out_bytes"] == 4 * 4 * BPT and c["kv_remote_out_bytes"] == 2 * 4 * BPT
    bm.free(2)
    bm.allocate(3, 16, k)  # k0, k1 from the host, k2, k3 from the remote store
    assert bm.last_hits == (0, 2, 2)
    assert (bm.moves.swap_in_tokens, bm.moves.remote_in_tokens) == (8, 8)
    assert bm.split_hit_tokens(15) == (8, 7)  # the last token is recomputed: remote's share
    assert len(bm.host) == len(bm.remote) == 0
    bm.check()


def test_a_full_remote_tier_drops_its_oldest_key_and_no_tier_means_dropped():
    bm = manager(gpu=3, host=1, remote=1)
    k = keys(3, 3)
    bm.allocate(1, 12, k)
    bm.cache_full_blocks(1, k, 12)
    bm.free(1)
    bm.allocate(2, 12)
    assert bm.moves.counters["num_remote_dropped_blocks"] == 1
    alone = manager(gpu=2, host=1)
    alone.allocate(1, 8, k[:2])
    alone.cache_full_blocks(1, k[:2], 8)
    alone.free(1)
    alone.allocate(2, 8)
    assert alone.moves.counters["num_host_dropped_blocks"] == 1 and len(alone.host) == 1


def test_out_of_blocks_claims_nothing_from_a_lower_tier():
    bm = manager(gpu=2, host=4)
    k = keys(4, 2)
    bm.allocate(1, 8, k)
    bm.cache_full_blocks(1, k, 8)
    bm.free(1)
    bm.allocate(2, 8)  # demotes both
    with pytest.raises(OutOfBlocks):
        bm.allocate(3, 8, k)
    assert len(bm.host) == 2 and bm.moves.swap_in_tokens == 0


# ---- invariants on random operation sequences ------------------------------------------
OPS = st.lists(st.tuples(st.sampled_from(["alloc", "grow", "cache", "free"]),
                         st.integers(0, 5), st.integers(0, 1), st.integers(1, 24)),
               min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, gpu=st.integers(2, 8), host=st.integers(0, 4), remote=st.integers(0, 4),
       watermark=st.sampled_from([0.0, 0.2]))
def test_tiers_keep_counts_and_capacities_under_any_operations(ops, gpu, host, remote,
                                                                watermark):
    bm = manager(gpu, host, remote or None, watermark)
    held: dict[int, int] = {}  # request id -> its family
    for op, rid, family, tokens in ops:
        if op == "alloc" and rid not in held:
            k = keys(family, tokens // 4)
            if bm.num_blocks_to_allocate(tokens, bm.find_cached_prefix(k)) <= bm.num_free_blocks:
                bm.allocate(rid, tokens, k)  # shares GPU hits, promotes lower-tier ones
                bm.cache_full_blocks(rid, k, tokens)  # its prefill computed the rest
                held[rid] = family
        elif op == "grow" and rid in held and bm.can_append(rid, tokens % 5):
            bm.append(rid, tokens % 5)
        elif op == "cache" and rid in held:
            n = bm.num_tokens(rid)
            bm.cache_full_blocks(rid, keys(held[rid], n // 4), n)
        elif op == "free" and rid in held:
            bm.free(rid)
            del held[rid]
        bm.check()  # GPU blocks within capacity, reference counts, tiers within capacity
        assert bm.num_used_blocks + bm.num_free_blocks == gpu
        assert len(bm.host) <= host and (bm.remote is None or len(bm.remote) <= remote)
    for rid in list(held):
        bm.free(rid)
    bm.check()
    assert bm.num_free_blocks == gpu


# ---- a run ------------------------------------------------------------------------------
def three_requests(families: tuple[int, int, int]):
    """A (16 + 2 tokens) at 0, C (36 + 2, another family) at 1, B (A's prefix again) at 2."""
    rows = [(0.0, 16, 2), (1.0, 36, 2), (2.0, 16, 2)]
    trace = make_trace(rows)
    trace["block_ids"] = [stream_block_ids(f, p + o, 4) for f, (_, p, o) in zip(families, rows)]
    trace["block_tokens"] = 4
    return trace


@pytest.mark.parametrize("host,remote,from_host,from_remote", [
    (100, 0, 16, 0),  # every demoted block fits the host tier
    (2, 100, 8, 8),  # two in the host tier, the older two in the remote one
])
def test_a_run_promotes_demoted_prefix_blocks_at_link_cost(host, remote, from_host,
                                                          from_remote):
    ex = TierExecutor(capacity=40, kv_bytes_per_token=BPT)
    block = 4 * BPT / 2**30  # GiB of one block of 4 tokens (half a block more: no rounding)
    params = {"block_size": 4, "watermark": 0.0, "enable_prefix_caching": True,
              "host_prefix_cache_gib": (host + 0.5) * block,
              "remote_prefix_cache_gib": (remote + 0.5) * block if remote else 0.0}
    res = simulate(three_requests((1, 2, 1)), "vllm_v0", params, [ex])
    rec = res.records.set_index("request_id")
    # C's 9 + 1 blocks evicted A's 4 cached ones; B finds all 4 below the GPU: 15 tokens cached
    assert rec.loc[2, "num_cached_tokens"] == 15
    assert rec.loc[2, "num_host_hit_tokens"] == min(from_host, 15)
    assert rec.loc[2, "num_remote_hit_tokens"] == 15 - min(from_host, 15)
    s = res.summary
    assert s["kv_host_in_bytes"] == from_host * BPT
    assert s.get("kv_remote_in_bytes", 0.0) == from_remote * BPT
    assert s["prefix_hit_rate_gpu"] + s["prefix_hit_rate_host"] + s["prefix_hit_rate_remote"] \
        == pytest.approx(s["prefix_hit_rate"], rel=1e-12)
    # B's admitting step pays the copies up: latency + bytes / bandwidth per link used
    st_ = res.steps
    compute = st_["num_iterations"] * ex.base_s + st_["num_computed_tokens"] * ex.per_token_s
    extra = (st_["duration_s"] - compute).to_numpy()
    want = ex.host_latency_s + from_host * BPT / ex.host_bandwidth
    if from_remote:
        want += ex.remote_latency_s + from_remote * BPT / ex.remote_bandwidth
    assert extra[np.abs(extra) > 1e-12] == pytest.approx([want], rel=1e-9)
    # without a host tier B recomputes its prompt: nothing cached, no tier columns
    gpu_only = simulate(three_requests((1, 2, 1)), "vllm_v0",
                        {"block_size": 4, "watermark": 0.0, "enable_prefix_caching": True},
                        [ex])
    assert gpu_only.records.set_index("request_id").loc[2, "num_cached_tokens"] == 0
    assert "num_host_hit_tokens" not in gpu_only.records.columns
    assert "prefix_hit_rate_host" not in gpu_only.summary


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_invariants_hold_with_prefix_tiers(policy, seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 40, rate=10.0, max_prompt=300, max_output=80, block_tokens=8)
    ex = TierExecutor(capacity=int(rng.integers(400, 1500)), per_ctx_s=1e-6)
    block = 8 * 1000.0 / 2**30  # GiB of one block of 8 tokens
    params = {"block_size": 8, "enable_prefix_caching": True,
              "host_prefix_cache_gib": int(rng.integers(2, 40)) * block,
              "remote_prefix_cache_gib": (seed % 2) * 50 * block,
              "preemption_mode": ["recompute", "swap"][seed % 3 == 0]}
    if policy == "sarathi":
        params.update(token_budget=300, max_num_seqs=8)
    check_invariants(trace, policy, [ex] * (1 + seed % 2), params)
    res = simulate(trace, policy, params, [ex] * (1 + seed % 2))
    rec = res.records
    assert (rec["num_host_hit_tokens"] + rec["num_remote_hit_tokens"]
            <= rec["num_cached_tokens"]).all()
    assert res.summary["kv_host_in_bytes"] >= rec["num_host_hit_tokens"].sum() * 1000.0

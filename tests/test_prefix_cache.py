"""Prefix KV reuse: the block manager's cache (LRU, reference counts), content keys (true
prefixes only), and the paged policies' admission with cache hits (analytic step checks)."""

import numpy as np
import pytest

from experiments.config.experiment import experiment_from_dict
from policies.paged import PagedPolicy
from policies.simulate import simulate
from sim.memory.block_manager import BlockManager
from sim.memory.prefix_keys import block_keys, covered_tokens
from sim.util.errors import ConfigError, TraceError
from tests.factories import LinearExecutor, make_trace, random_trace, stream_block_ids
from tests.test_engine import OneIterationExecutor
from traces.schema import validate_trace


def cached_bm(num_blocks: int = 6, block_size: int = 2) -> BlockManager:
    return BlockManager(num_blocks, block_size, enable_caching=True)


# ---- block manager ----------------------------------------------------------------------------
def test_lru_evicts_never_keyed_first_then_least_recently_freed():
    bm = cached_bm()
    assert bm.allocate(1, 4) == [0, 1]
    bm.cache_full_blocks(1, ["a1", "a2"], 4)
    assert bm.allocate(2, 4) == [2, 3]
    bm.cache_full_blocks(2, ["b1", "b2"], 4)
    bm.free(1)
    bm.free(2)  # tail first: LRU order is a2, a1, b2, b1
    bm.check()
    assert bm.num_free_blocks == 6 and bm.num_cached_blocks == 4
    assert bm.allocate(3, 6) == [4, 5, 1]  # never-keyed 4, 5 first, then evict a2
    assert bm.num_evicted_blocks == 1
    assert bm.find_cached_prefix(["a1", "a2"]) == [0]
    assert bm.allocate(4, 2, keys=["b1"]) == [2]  # a hit leaves the LRU...
    bm.free(4)  # ...and comes back at its most recently used end
    bm.free(3)  # never-keyed blocks go back to the plain free list
    bm.check()
    assert bm.allocate(5, 8) == [1, 5, 4, 0]  # freed tail first; then a1 (block 0) is evicted
    assert bm.allocate(6, 4) == [3, 2]  # b2 before b1 (b1 was used last)
    assert bm.num_evicted_blocks == 4 and bm.num_cached_blocks == 0
    bm.check()


def test_shared_blocks_are_freed_by_their_last_holder_only():
    bm = cached_bm(8, 2)
    bm.allocate(1, 6)
    bm.cache_full_blocks(1, ["k1", "k2", "k3"], 5)  # only 2 full blocks are computed
    assert bm.find_cached_prefix(["k1", "k2", "k3"]) == [0, 1]
    assert bm.num_blocks_to_allocate(5, [0, 1]) == 1  # in use: sharing takes no free block
    assert bm.allocate(2, 5, keys=["k1", "k2"]) == [0, 1, 3]
    assert bm.num_hit_blocks == 2 and bm.num_queried_blocks == 2
    assert bm.shared_tokens([1, 2]) == 4 and bm.shared_tokens([2]) == 0
    bm.check()
    assert bm.free(1) == 1  # its unshared last block only
    assert bm.num_used_blocks == 3 and bm.shared_tokens([2]) == 0
    bm.check()
    assert bm.free(2) == 3
    assert bm.num_free_blocks == 8 and bm.find_cached_prefix(["k1", "k2"]) == [0, 1]
    # reviving evictable hits takes them out of the free pool
    assert bm.num_blocks_to_allocate(5, [0, 1]) == 3
    bm.check()


def test_a_key_computed_twice_maps_to_one_block():
    bm = cached_bm(8, 2)
    bm.allocate(1, 4)
    bm.allocate(2, 4)  # same content computed concurrently
    bm.cache_full_blocks(1, ["x", "y"], 4)
    assert bm.cache_full_blocks(2, ["x", "y"], 4) == 0
    bm.check()
    bm.free(2)
    assert bm.num_cached_blocks == 2 and bm.find_cached_prefix(["x", "y"]) == [0, 1]
    bm.check()


def test_without_caching_nothing_is_kept():
    bm = BlockManager(4, 2)
    bm.allocate(1, 4)
    assert bm.cache_full_blocks(1, ["a", "b"], 4) == 0
    bm.free(1)
    assert bm.find_cached_prefix(["a"]) == [] and bm.allocate(2, 2) == [2]
    bm.check()


def test_allocate_rejects_keys_beyond_its_tokens():
    with pytest.raises(ValueError, match="block keys"):
        cached_bm().allocate(1, 3, keys=["a", "b"])


# ---- content keys -------------------------------------------------------------------------------
def test_keys_match_only_true_prefixes():
    a = block_keys((1, 2, 3), 16, 16, 48, 60)
    assert len(a) == 3
    assert block_keys((1, 2, 4), 16, 16, 48, 60)[:2] == a[:2]
    assert block_keys((1, 2, 4), 16, 16, 48, 60)[2] != a[2]
    same_later = block_keys((9, 2, 3), 16, 16, 48, 60)  # same later ids, different first
    assert not set(same_later) & set(a)


def test_keys_cover_whole_blocks_inside_the_ids():
    # granules of 8 tokens, KV blocks of 16: a block is keyed by both granules it spans
    assert len(block_keys((1, 2, 3), 8, 16, 20, 30)) == 1  # 20 prompt tokens: 1 full block
    assert block_keys((1, 2, 3), 8, 16, 20, 30)[0] == block_keys((1, 2, 7), 8, 16, 20, 30)[0]
    assert block_keys((1, 2), 8, 16, 16, 30)[0] != block_keys((1, 5), 8, 16, 16, 30)[0]
    # granules of 32 tokens, blocks of 16: two blocks in one granule have different keys
    k = block_keys((1,), 32, 16, 32, 40)
    assert len(k) == 2 and k[0] != k[1]
    # prompt-only ids never cover outputs; extra ids cover them (sessions)
    assert covered_tokens(2, 512, 1000, 1300) == 1000
    assert covered_tokens(3, 512, 1000, 1300) == 1300
    assert block_keys((1, 2, 3), 16, 16, 40, 48) == block_keys((1, 2, 3), 16, 16, 40, 60)
    assert block_keys((4, 5), 16, 16, 20, 40)[0] == block_keys((4, 5, 6), 16, 16, 40, 60)[0]


def test_keys_are_deterministic_ints():
    keys = block_keys(tuple(range(5)), 16, 16, 80, 80)
    assert all(isinstance(k, int) for k in keys) and len(set(keys)) == 5
    assert keys == block_keys(tuple(range(5)), 16, 16, 80, 80)


# ---- policies ------------------------------------------------------------------------------------
def trace_with_ids(rows, block_tokens=16, families=None):
    df = make_trace(rows)
    fam = families or [0] * len(rows)
    df["block_ids"] = [stream_block_ids(f, p + o, block_tokens)
                       for f, (_, p, o) in zip(fam, rows)]
    df["block_tokens"] = block_tokens
    return df


CACHING = {"enable_prefix_caching": True, "watermark": 0.0}


def first_step_after(steps, t):
    return steps[steps["start_s"] >= t].iloc[0]


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_second_identical_prompt_skips_exactly_its_cached_full_blocks(policy):
    ex = LinearExecutor(capacity=4000, base_s=0.01, per_token_s=1e-3, per_ctx_s=1e-5)
    df = trace_with_ids([(0.0, 100, 4), (5.0, 100, 4)])
    res = simulate(df, policy, CACHING, [ex])
    rec = res.records
    assert rec["num_cached_tokens"].tolist() == [0, 96]  # 6 full blocks of 16
    second = first_step_after(res.steps, 5.0)
    assert second["num_new_tokens"] == 4 and second["num_context_tokens"] == 96
    ttft = rec["ttft_s"].iloc[1]
    assert ttft == pytest.approx(0.01 + 4 * 1e-3 + 96 * 1e-5)
    assert res.summary["prefix_hit_rate"] == pytest.approx(96 / 200)
    off = simulate(df, policy, {"watermark": 0.0}, [ex])
    assert off.records["num_cached_tokens"].sum() == 0 and off.summary["prefix_hit_rate"] == 0
    assert off.records["ttft_s"].iloc[1] == pytest.approx(0.01 + 100 * 1e-3)


def test_full_hit_recomputes_the_last_token():
    ex = LinearExecutor(capacity=4000)
    res = simulate(trace_with_ids([(0.0, 32, 2), (5.0, 32, 2)]), "vllm_v0", CACHING, [ex])
    assert res.records["num_cached_tokens"].tolist() == [0, 31]
    second = first_step_after(res.steps, 5.0)
    assert second["num_new_tokens"] == 1 and second["num_context_tokens"] == 31


def test_partial_last_block_never_hits():
    ex = LinearExecutor(capacity=4000)
    df = trace_with_ids([(0.0, 15, 1), (5.0, 15, 1)], block_tokens=15)
    assert simulate(df, "vllm_v0", CACHING, [ex]).records["num_cached_tokens"].sum() == 0


def test_later_ids_without_the_first_never_hit():
    ex = LinearExecutor(capacity=4000)
    df = trace_with_ids([(0.0, 64, 2), (5.0, 64, 2)], families=[0, 3])  # 3: other first id
    assert simulate(df, "vllm_v0", CACHING, [ex]).records["num_cached_tokens"].sum() == 0


def test_next_turn_hits_the_previous_answer():
    ex = LinearExecutor(capacity=4000)
    df = trace_with_ids([(0.0, 40, 30), (5.0, 90, 2)])  # turn 2 = turn 1 + answer + 20 new
    res = simulate(df, "vllm_v0", CACHING, [ex])
    assert res.records["num_cached_tokens"].tolist() == [0, 64]  # (40 + 30 - 1) // 16 blocks


def test_shared_blocks_count_once_in_the_kv_footprint():
    ex = LinearExecutor(capacity=4000)
    df = trace_with_ids([(0.0, 64, 40), (0.2, 64, 40)])
    res = simulate(df, "vllm_v0", CACHING, [ex])
    assert res.records["num_cached_tokens"].tolist() == [0, 63]
    both = res.steps[res.steps["num_seqs"] == 2].iloc[0]
    held = both["num_context_tokens"] + both["num_computed_tokens"]
    assert both["kv_tokens"] == held - 64  # 4 shared blocks of 16 counted once


@pytest.mark.parametrize("policy,params", [
    ("vllm_v0", {"block_size": 4}), ("sarathi", {"token_budget": 64, "max_num_seqs": 8}),
    ("vllm_v0", {"block_size": 8, "router": "round_robin"})])
def test_cache_invariants_hold_after_every_step(policy, params, monkeypatch):
    update = PagedPolicy.update
    totals = {"hits": 0, "evicted": 0}

    def checked(self, step, result, now):
        done = update(self, step, result, now)
        blocks = self.state[step.instance_id].blocks
        blocks.check()
        totals["hits"] = sum(s.blocks.num_hit_blocks for s in self.state)
        totals["evicted"] = sum(s.blocks.num_evicted_blocks for s in self.state)
        return done

    monkeypatch.setattr(PagedPolicy, "update", checked)
    for seed in range(3):
        df = random_trace(np.random.default_rng(seed), 40, rate=20.0, block_tokens=8)
        ex = LinearExecutor(capacity=600, per_ctx_s=1e-6)
        res = simulate(df, policy, {**params, "enable_prefix_caching": True}, [ex, ex])
        assert (res.steps["kv_tokens"] <= 600).all()
    assert totals["hits"] > 0 and totals["evicted"] > 0


def test_disabled_caching_ignores_block_ids():
    rng = np.random.default_rng(4)
    df = random_trace(rng, 30, rate=20.0, block_tokens=8)
    ex = LinearExecutor(capacity=800)
    plain = simulate(df[["arrival_s", "prompt_tokens", "output_tokens"]], "sarathi", {}, [ex])
    ids = simulate(df, "sarathi", {}, [ex])
    assert plain.records.equals(ids.records)


# ---- configuration and traces --------------------------------------------------------------------
def test_prefix_caching_on_the_real_backend_is_a_config_error():
    raw = {"workload": {"synthetic": {"num_requests": 5}},
           "cluster": {"backend": "real"}, "request_rates": [1],
           "policies": [{"name": "vllm_v0", "params": {"enable_prefix_caching": True}}]}
    with pytest.raises(ConfigError, match="policies\\[0\\].params.enable_prefix_caching"):
        experiment_from_dict(raw, "x")
    raw["cluster"] = {"backend": "sim"}
    experiment_from_dict(raw, "x")


def test_prefix_caching_flag_must_be_a_bool():
    raw = {"workload": {"synthetic": {"num_requests": 5}}, "request_rates": [1],
           "policies": [{"name": "sarathi", "params": {"enable_prefix_caching": "yes"}}]}
    with pytest.raises(ConfigError, match="enable_prefix_caching"):
        experiment_from_dict(raw, "x")


def test_block_tokens_column_is_validated():
    df = trace_with_ids([(0.0, 10, 2)])
    assert validate_trace(df, "t")["block_tokens"].tolist() == [16]
    df["block_tokens"] = 0
    with pytest.raises(TraceError, match="block_tokens"):
        validate_trace(df, "t")


def test_mooncake_loader_sets_512_token_granules(tmp_path):
    from sim.engine.trace_rows import requests_from_trace
    from traces.mooncake import load_mooncake

    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, '
                    '"hash_ids": [7, 8]}\n')
    r = requests_from_trace(load_mooncake(path))[0]
    assert r.block_ids == (7, 8) and r.block_tokens == 512


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_prefix_caching_combines_with_speculative_decoding(policy):
    ex = LinearExecutor(capacity=4000, draft_s=1e-3)
    df = trace_with_ids([(0.0, 32, 9), (5.0, 32, 9), (5.0, 48, 9)])
    params = {**CACHING, "num_speculative_tokens": 3, "acceptance_rate": 0.5}
    res = simulate(df, policy, params, [ex], seed=1)
    rec = res.records
    assert (rec["status"] == "finished").all() and (rec["output_tokens"] == 9).all()
    assert rec["num_cached_tokens"].tolist()[:2] == [0, 31]
    second = first_step_after(res.steps, 5.0)  # the full hit prefills one token, no verify
    assert second["num_new_tokens"] < 4 + 48 and second["num_context_tokens"] >= 31
    assert (rec["num_spec_steps"] > 0).all() and res.summary["spec_verify_steps"] > 0


# ---- key collisions (issue 13: CPython's hash(-1) == hash(-2)) -----------------------------------
def test_ids_minus_one_and_minus_two_get_different_keys():
    assert block_keys((-1,), 16, 16, 16, 16) != block_keys((-2,), 16, 16, 16, 16)
    assert block_keys((5, -1), 16, 16, 32, 32)[1] != block_keys((5, -2), 16, 16, 32, 32)[1]
    big = 2**70  # beyond int64: still a distinct, deterministic key
    assert block_keys((big,), 16, 16, 16, 16) != block_keys((big + 1,), 16, 16, 16, 16)


def test_keys_are_the_same_in_every_process():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = "from sim.memory.prefix_keys import block_keys; print(block_keys((-1, 7, 2**70), 8, 8, 24, 24))"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=root,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert runs == {f"{block_keys((-1, 7, 2**70), 8, 8, 24, 24)}\n"}


def test_swapped_negative_ids_hit_nothing():
    ex = LinearExecutor(capacity=4000)
    ids_a = (-1, -2) + tuple(range(-3, -49, -1))  # 48 granules of 16 tokens = 768 tokens
    ids_b = (-2, -1) + ids_a[2:]
    df = make_trace([(0.0, 768, 1), (5.0, 768, 1)])
    df["block_ids"] = [ids_a, ids_b]
    df["block_tokens"] = 16
    res = simulate(df, "vllm_v0", CACHING, [ex])
    assert res.records["num_cached_tokens"].tolist() == [0, 0]
    assert res.summary["prefix_hit_rate"] == 0


@pytest.mark.parametrize("policy,params", [
    ("sarathi", {"token_budget": 64, "max_num_seqs": 8, "block_size": 4}),
    ("sarathi", {"token_budget": 32, "max_num_seqs": 16, "block_size": 8}),
    ("vllm_v0", {"max_num_batched_tokens": 256, "max_num_seqs": 8, "block_size": 4}),
    ("vllm_v0", {"max_num_seqs": 8, "block_size": 8, "watermark": 0.0})])
def test_paged_jumps_are_exact_with_prefix_cache_hits_and_evictions(policy, params):
    # little KV and shared prefixes and outputs: a preempted request's prefix stays cached in
    # others' blocks (it fits again at once), decodes complete blocks a waiting request misses
    # or another decode completes later, evictable keys are recomputed; decode jumps must
    # still equal one-iteration steps
    for seed in (0, 2, 3, 7, 11):
        trace = random_trace(np.random.default_rng(seed), 24, rate=20.0, max_prompt=120,
                             max_output=40, block_tokens=8)
        ex = LinearExecutor(capacity=200, per_ctx_s=1e-6)
        params = {**params, "enable_prefix_caching": True}
        jump = simulate(trace, policy, params, [ex])
        step = simulate(trace, policy, params, [OneIterationExecutor(ex)])
        for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s",
                    "num_cached_tokens"):
            np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9,
                                       atol=1e-9)

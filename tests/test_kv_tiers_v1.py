"""KV offload tiers on `vllm` (vLLM V1's KV connectors, policies/vllm_offload.py): the closed
forms of the `vllm_v0` tier and swap tests (tests/test_kv_tiers_swap.py, test_kv_tiers_prefix.py)
ported to V1's semantics, exact jumps, invariants, and the settings refused."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config.experiment import experiment_from_dict
from policies.simulate import simulate
from sim.memory.kv_offload import OffloadStore, OffloadTier
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, TierExecutor, random_trace
from tests.test_kv_tiers_prefix import three_requests
from tests.test_kv_tiers_swap import TWO, OneIteration, executor, link_extras
from tests.test_properties import check_invariants

BPT = 1000.0  # bytes of KV per token (TierExecutor)
BLOCK4 = 4 * BPT / 2**30  # GiB of one block of 4 tokens
V1 = {"block_size": 4, "max_num_batched_tokens": 64, "max_num_seqs": 8}  # batch limits set:
# the test executors name no GPU


def host(blocks: float, backend: str = "native", **extra) -> dict:
    """`vllm` parameters with a host tier of `blocks` blocks of 4 tokens (+ half: no rounding)."""
    return {**V1, "host_prefix_cache_gib": (blocks + 0.5) * BLOCK4,
            "kv_offloading_backend": backend, **extra}


# ---- a preempted request reloads its blocks (vllm_v0's swap tests, ported) ------------------
@pytest.mark.parametrize("backend", ["native", "lmcache"])
def test_a_preempted_request_reloads_its_offloaded_blocks_and_recomputes_nothing(backend):
    """vllm_v0 swaps B's 5 blocks out and back. V1 has no swap: B's blocks were stored to the
    host as they were computed; preempted, B is recomputation's victim, but when it is admitted
    again its first 3 blocks are still cached on the GPU (A's two new blocks evicted B's last
    two, tail first) and the other 2 (8 tokens) come from the host: nothing is recomputed."""
    ex = executor()
    res = simulate(TWO, "vllm", host(100, backend), [ex])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_cached_tokens"] == 20  # all B had computed: 12 GPU + 8 host
    assert rec.loc[1, "num_host_hit_tokens"] == 8 and rec.loc[1, "num_remote_hit_tokens"] == 0
    assert list(rec["num_preemptions"]) == [0, 1]
    assert (rec["status"] == "finished").all()
    s = res.summary
    assert s["num_computed_tokens"] == 2 * (16 + 10 - 1)  # useful tokens only, as with swap
    assert s["kv_host_in_bytes"] == 8 * BPT
    assert s["kv_host_out_bytes"] == 12 * 4 * BPT  # A's 6 full blocks, B's 6: each stored once
    assert "num_swap_outs" not in s and "num_swapped_out_tokens" not in res.records.columns
    copy = ex.host_latency_s + 8 * BPT / ex.host_bandwidth
    extras = link_extras(res, ex)
    paid = extras[np.abs(extras) > 1e-12]
    # lmcache loads in the admitting step; the native connector loads beside the steps
    assert list(paid) == pytest.approx([copy] if backend == "lmcache" else [], rel=1e-9)


@pytest.mark.parametrize("backend", ["native", "lmcache"])
def test_offload_timeline_closed_form_vllm(backend):
    """Steps: prefill of both (32 tokens); 4 decode iterations of both; A alone for 1 iteration
    (B preempted: V1 admits nothing then); A's last 4 in 3 + 1 (a jump ends where a block
    completes, since that block is stored); then B, admitted as A finishes, loads its 8 tokens:
    `lmcache` in its first step (it + copy), `native` while the instance idles (copy, then it).
    vllm_v0's timeline (tests/test_kv_tiers_swap.py) pays a 20-token copy out at the preempting
    step and back at B's: V1 stores as it computes (off the critical path) and loads only what
    the GPU no longer caches."""
    ex = executor()
    res = simulate(TWO, "vllm", host(100, backend), [ex])
    copy = ex.host_latency_s + 8 * BPT / ex.host_bandwidth
    it = ex.base_s + ex.per_token_s  # one decode iteration of one request
    two = ex.base_s + 2 * ex.per_token_s
    prefill = ex.base_s + 32 * ex.per_token_s
    a = [prefill, 4 * two, it, 3 * it, it]
    b = [it + copy, 3 * it, it] if backend == "lmcache" else [4 * it, it]
    assert res.steps["duration_s"].to_numpy() == pytest.approx(a + b, rel=1e-9)
    rec = res.records.set_index("request_id")
    assert rec.loc[0, "finish_s"] == pytest.approx(sum(a), rel=1e-12)
    assert rec.loc[1, "finish_s"] == pytest.approx(sum(a) + copy + 5 * it, rel=1e-12)
    if backend == "native":  # the load is an event; the instance waits for it idle
        load = res.events.query("kind == 'kv_load'")
        assert list(load["request_id"]) == [1] and "8 tokens" in load["info"].iloc[0]
        assert res.steps["start_s"].iloc[5] == pytest.approx(sum(a) + copy, rel=1e-12)


def test_without_a_host_tier_vllm_recomputes_what_the_gpu_no_longer_caches():
    """V1 hashes every block, content ids or not: the victim B drops its 20 tokens, finds its
    first 3 blocks (12 tokens) still cached on the GPU when admitted again (A's two new blocks
    evicted B's last two, tail first) and recomputes only the other 8."""
    res = simulate(TWO, "vllm", dict(V1, block_size=4), [executor()])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_recomputed_tokens"] == 20 and rec.loc[1, "num_cached_tokens"] == 12
    assert res.summary["num_computed_tokens"] == 2 * (16 + 10 - 1) + 8
    assert "num_host_hit_tokens" not in res.records.columns  # no tier columns when off
    assert not [k for k in res.summary if k.startswith(("kv_", "prefix_hit_rate_"))]


def test_a_host_tier_too_small_to_keep_the_victims_blocks_falls_back_to_recomputation():
    """vllm_v0 recomputes a victim its full swap space cannot hold. Here a host tier of 4
    blocks keeps only the latest stores: B's blocks 3 and 4 were pushed out by A's and B's own
    later ones, so B finds its 3 GPU-cached blocks and recomputes its other 9 tokens."""
    res = simulate(TWO, "vllm", host(4), [executor()])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_cached_tokens"] == 12 and rec.loc[1, "num_host_hit_tokens"] == 0
    s = res.summary
    assert s["kv_host_in_bytes"] == 0.0
    assert s["num_computed_tokens"] == 2 * 25 + 20 - 12  # B's 21 - 12 tokens again
    assert s["num_host_dropped_blocks"] == 12 - 4  # 12 blocks stored, 4 held at the end


# ---- host and remote prefix tiers (vllm_v0's promotion test, ported) ------------------------
def test_lmcache_reads_host_then_remote_hits_at_link_cost():
    """A (16 + 2 tokens) at 0, C (36 + 2, another family) at 1, B (A's prefix) at 2 on 10 GPU
    blocks. vllm_v0 demotes A's 4 blocks when C evicts them; V1 stored them when A computed
    them, in both tiers (LMCache writes each tier). A host tier of 12 blocks then takes C's 9
    by evicting its least recently used, A's last block (V1 touches a request's blocks last
    first), which the remote store still has: B reads 3 blocks from the host and 1 from the
    remote store, paid in its admitting step, and computes its last token only."""
    ex = TierExecutor(capacity=40, kv_bytes_per_token=BPT)
    params = host(12, "lmcache", remote_prefix_cache_gib=100.5 * BLOCK4)
    res = simulate(three_requests((1, 2, 1)), "vllm", params, [ex])
    rec = res.records.set_index("request_id")
    assert rec.loc[2, "num_cached_tokens"] == 15  # 16, less the token computed to sample
    assert rec.loc[2, "num_host_hit_tokens"] == 12 and rec.loc[2, "num_remote_hit_tokens"] == 3
    s = res.summary
    assert (s["kv_host_in_bytes"], s["kv_remote_in_bytes"]) == (12 * BPT, 4 * BPT)
    assert s["kv_host_out_bytes"] == s["kv_remote_out_bytes"] == 13 * 4 * BPT  # A's 4, C's 9
    assert s["num_host_dropped_blocks"] == 1 and s["num_remote_dropped_blocks"] == 0
    assert s["prefix_hit_rate_gpu"] + s["prefix_hit_rate_host"] + s["prefix_hit_rate_remote"] \
        == pytest.approx(s["prefix_hit_rate"], rel=1e-12)
    want = (ex.host_latency_s + 12 * BPT / ex.host_bandwidth
            + ex.remote_latency_s + 4 * BPT / ex.remote_bandwidth)
    extras = link_extras(res, ex)
    assert extras[np.abs(extras) > 1e-12] == pytest.approx([want], rel=1e-9)
    gpu_only = simulate(three_requests((1, 2, 1)), "vllm", V1, [ex])
    assert gpu_only.records.set_index("request_id").loc[2, "num_cached_tokens"] == 0


def test_native_loads_while_the_request_waits_its_ttft_is_load_plus_one_token():
    """The same three requests with the native connector: B's 4 blocks (16 tokens) load from
    the host while it waits (no step pays them); its first token comes one 1-token step after
    they land."""
    ex = TierExecutor(capacity=40, kv_bytes_per_token=BPT)
    res = simulate(three_requests((1, 2, 1)), "vllm", host(100), [ex])
    rec = res.records.set_index("request_id")
    assert rec.loc[2, "num_host_hit_tokens"] == 15
    load = ex.host_latency_s + 16 * BPT / ex.host_bandwidth
    assert rec.loc[2, "first_token_s"] == pytest.approx(
        2.0 + load + ex.base_s + ex.per_token_s, rel=1e-12)
    extras = link_extras(res, ex)
    assert not (np.abs(extras) > 1e-12).any()


def test_kv_offloading_size_is_host_prefix_cache_gib():
    ex = executor()
    gib = 100.5 * BLOCK4
    a = simulate(TWO, "vllm", {**V1, "host_prefix_cache_gib": gib}, [ex])
    b = simulate(TWO, "vllm", {**V1, "kv_offloading_size": gib}, [ex])
    assert a.records.equals(b.records)
    cols = ["start_s", "duration_s", "num_iterations", "num_computed_tokens"]  # not host time
    assert a.steps[cols].equals(b.steps[cols])


# ---- jumps and invariants ----------------------------------------------------------------------
@pytest.mark.parametrize("extra", [
    {}, {"kv_offloading_backend": "lmcache", "remote_prefix_cache_gib": 60 * BLOCK4},
    {"scheduling_policy": "priority"}, {"host_prefix_cache_gib": 20 * BLOCK4}])
def test_jumps_stay_exact_with_offloading(extra):
    trace = random_trace(np.random.default_rng(5), 60, rate=20.0, max_output=150,
                         block_tokens=8)
    ex = TierExecutor(capacity=600, per_ctx_s=1e-6)
    params = {**V1, "block_size": 8, "host_prefix_cache_gib": 200 * BLOCK4, **extra}
    jump = simulate(trace, "vllm", params, [ex, ex])
    step = simulate(trace, "vllm", params, [OneIteration(ex)] * 2)
    assert jump.summary["num_preemptions"] > 0 and jump.summary["kv_host_in_bytes"] > 0
    for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s", "num_cached_tokens",
                "num_host_hit_tokens", "num_remote_hit_tokens", "num_recomputed_tokens"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    for key in ("kv_host_in_bytes", "kv_host_out_bytes", "num_computed_tokens"):
        assert jump.summary[key] == step.summary[key]
    assert len(jump.steps) < len(step.steps)


@pytest.mark.parametrize("seed", range(6))
def test_invariants_hold_with_offloading(seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 40, rate=10.0, max_prompt=300, max_output=80,
                         block_tokens=[None, 8][seed % 2])
    ex = TierExecutor(capacity=int(rng.integers(400, 1500)), per_ctx_s=1e-6, draft_s=1e-3)
    block = 8 * 1000.0 / 2**30  # GiB of one block of 8 tokens
    variants = [{}, {"kv_offloading_backend": "lmcache", "remote_prefix_cache_gib": 50 * block},
                {"num_speculative_tokens": 2}]
    params = {"block_size": 8, "max_num_batched_tokens": 256, "max_num_seqs": 8,
              "host_prefix_cache_gib": int(rng.integers(2, 40)) * block,
              **variants[seed % len(variants)]}
    check_invariants(trace, "vllm", [ex] * (1 + seed % 2), params)  # KV within capacity too
    res = simulate(trace, "vllm", params, [ex] * (1 + seed % 2))
    rec = res.records
    assert (rec["status"] == "finished").all()
    assert (rec["num_host_hit_tokens"] + rec["num_remote_hit_tokens"]
            <= rec["num_cached_tokens"]).all()
    assert res.summary["kv_host_in_bytes"] >= rec["num_host_hit_tokens"].sum() * 1000.0


OPS = st.lists(st.tuples(st.sampled_from(["store", "touch", "match"]), st.integers(0, 4),
                         st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, host_blocks=st.integers(0, 6), remote_blocks=st.integers(0, 8))
def test_offload_tiers_stay_within_capacity_and_keep_what_they_stored(ops, host_blocks,
                                                                     remote_blocks):
    counters: dict = {}
    remote = OffloadTier("remote", remote_blocks) if remote_blocks else None
    store = OffloadStore(OffloadTier("host", host_blocks), remote, 4, BPT, counters)
    for op, family, a, b in ops:
        keys = [family * 100 + j for j in range(8)]
        start, end = min(a, b), max(a, b)
        if op == "store":
            before = store.host.keys()
            if store.store(keys, start, end):  # the host tier holds them all now
                assert all(k in store.host for k in keys[start:end])
            else:  # it could not make room: nothing changed there
                assert store.host.keys() == before
        elif op == "touch":
            store.touch(keys[:end])
            if end and keys[0] in store.host:
                assert store.host.keys()[-1] == keys[0]  # the first block: most recent
        else:
            hit = store.match(keys)
            assert all(k in t for k, t in zip(keys, hit))
        store.check()
    written = counters.get("kv_host_out_bytes", 0.0) / (4 * BPT)
    assert written - counters.get("num_host_dropped_blocks", 0) == len(store.host)


# ---- settings refused ----------------------------------------------------------------------
def experiment(params: dict) -> dict:
    return {"workload": {"synthetic": {"num_requests": 5}}, "request_rates": [1],
            "policies": [{"name": "vllm", "params": params}]}


@pytest.mark.parametrize("params,field,why", [
    ({"preemption_mode": "swap"}, "preemption_mode", "host_prefix_cache_gib"),
    ({"kv_offloading_backend": "mooncake"}, "kv_offloading_backend", "native"),
    ({"kv_offloading_size": -1}, "kv_offloading_size", "GiB"),
    ({"kv_offloading_size": float("inf")}, "kv_offloading_size", "GiB"),
    ({"kv_offloading_size": True}, "kv_offloading_size", "not bool"),
    ({"kv_offloading_size": 8, "host_prefix_cache_gib": 4}, "kv_offloading_size", "one of"),
    ({"host_prefix_cache_gib": 8, "remote_prefix_cache_gib": 64}, "remote_prefix_cache_gib",
     "lmcache"),
    ({"host_prefix_cache_gib": 8, "enable_prefix_caching": False}, "host_prefix_cache_gib",
     "enable_prefix_caching"),
])
def test_bad_settings_on_vllm_name_the_field(params, field, why):
    with pytest.raises(ConfigError, match=why) as info:
        experiment_from_dict(experiment(params), "x")
    assert info.value.field == f"policies[0].params.{field}", info.value


def test_the_native_connector_needs_links_to_time_its_loads():
    class NoLinks(TierExecutor):
        def instance_info(self, instance_id):
            import dataclasses

            return dataclasses.replace(super().instance_info(instance_id), kv_links=None)

    with pytest.raises(ConfigError, match="KV links") as info:
        simulate(TWO, "vllm", host(10), [NoLinks(capacity=40)])
    assert info.value.field == "kv_offloading_backend"
    with pytest.raises(ConfigError, match="KV bytes per token"):
        simulate(TWO, "vllm", host(10), [LinearExecutor(capacity=40)])
    assert simulate(TWO, "vllm", host(10, "lmcache"), [NoLinks(capacity=40)]).summary[
        "kv_host_in_bytes"] > 0  # lmcache's loads are priced by the executor


def test_tiers_run_on_vllm_with_the_cost_model():
    exp = experiment_from_dict(experiment({"kv_offloading_size": 4}), "x")
    assert exp.policies[0].params["kv_offloading_size"] == 4

"""Swap preemption (`preemption_mode: swap`, policies/swap.py): accounting against a hand-built
case, the swap-space fallback to recomputation, exact jumps and the token identity."""

import numpy as np
import pytest

from policies.simulate import simulate
from tests.factories import TierExecutor, make_trace, random_trace
from tests.test_engine import OneIterationExecutor
from tests.test_properties import check_invariants

BPT = 1000.0  # bytes of KV per token (TierExecutor)
# two requests of 16 prompt and 10 output tokens in 10 blocks of 4 tokens: after 4 decode
# iterations both hold 20 tokens (5 blocks each, the cache full); A's next slot preempts B
TWO = make_trace([(0.0, 16, 10), (0.0, 16, 10)])
PARAMS = {"block_size": 4, "watermark": 0.0}
TIER_BLOCK = 8 * BPT / 2**30  # GiB of one block of 8 tokens


class OneIteration(OneIterationExecutor):
    """One iteration per interruptible step, on an executor that reports its KV size."""

    def instance_info(self, instance_id):
        return self.inner.instance_info(instance_id)


def executor() -> TierExecutor:
    return TierExecutor(capacity=40, base_s=0.01, per_token_s=1e-4, kv_bytes_per_token=BPT)


def link_extras(res, ex: TierExecutor) -> np.ndarray:
    """Each step's time beyond the linear model's compute (per_ctx_s = 0): its KV copies."""
    st = res.steps
    compute = st["num_iterations"] * ex.base_s + st["num_computed_tokens"] * ex.per_token_s
    return (st["duration_s"] - compute).to_numpy()


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_swap_moves_the_victims_blocks_out_and_back_and_recomputes_nothing(policy):
    ex = executor()
    res = simulate(TWO, policy, {**PARAMS, "preemption_mode": "swap"}, [ex])
    rec = res.records.set_index("request_id")
    # B held 20 tokens in 5 whole blocks when A's 21st token needed a block: 20 tokens out, in
    assert rec.loc[1, "num_swapped_out_tokens"] == rec.loc[1, "num_swapped_in_tokens"] == 20
    assert rec.loc[0, "num_swapped_out_tokens"] == rec.loc[0, "num_swapped_in_tokens"] == 0
    assert list(rec["num_preemptions"]) == [0, 1]
    assert list(rec["num_recomputed_tokens"]) == [0, 0]  # no recomputation with swap
    assert (rec["status"] == "finished").all()
    s = res.summary
    assert s["kv_swap_out_bytes"] == s["kv_swap_in_bytes"] == 20 * BPT
    assert s["num_swap_outs"] == 1 and s["num_swap_recomputes"] == 0
    assert s["num_computed_tokens"] == 2 * (16 + 10 - 1)  # useful tokens only
    # the swap-out and the swap-in step each pay latency + bytes / bandwidth, nothing else does
    copy = ex.host_latency_s + 20 * BPT / ex.host_bandwidth
    extras = link_extras(res, ex)
    paid = extras[np.abs(extras) > 1e-12]
    assert paid == pytest.approx([copy, copy], rel=1e-9)
    kinds = list(res.events["kind"])
    assert kinds.count("preempt") == 1 and kinds.count("swap_in") == 1


def test_swap_timeline_closed_form_vllm_v0():
    """Steps: prefill of both (32 tokens); 4 decode iterations of both; A alone for 1 iteration
    paying the swap-out (B preempted, a swap-in could follow); A's last 4; B swapped in, paying
    the copy back, and its last 5 outputs."""
    ex = executor()
    res = simulate(TWO, "vllm_v0", {**PARAMS, "preemption_mode": "swap"}, [ex])
    copy = ex.host_latency_s + 20 * BPT / ex.host_bandwidth
    it = ex.base_s + ex.per_token_s  # one decode iteration of one request
    two = ex.base_s + 2 * ex.per_token_s  # ... of two
    prefill = ex.base_s + 32 * ex.per_token_s
    steps = [prefill, 4 * two, it + copy, 4 * it, 5 * it + copy]
    assert res.steps["duration_s"].to_numpy() == pytest.approx(steps, rel=1e-9)
    rec = res.records.set_index("request_id")
    assert rec.loc[0, "finish_s"] == pytest.approx(sum(steps[:4]), rel=1e-12)
    assert rec.loc[1, "finish_s"] == pytest.approx(sum(steps), rel=1e-12)


def test_recompute_mode_recomputes_what_swap_copies():
    res = simulate(TWO, "vllm_v0", dict(PARAMS), [executor()])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_recomputed_tokens"] == 20  # B's 20 computed tokens, again
    assert "num_swapped_out_tokens" not in res.records.columns  # no tier columns when off
    assert not any("swap" in key for key in res.summary)


def test_full_swap_space_falls_back_to_recomputation():
    ex = executor()
    tiny = 4 * 4 * BPT / 2**30  # GiB of 4 blocks: B's 5 do not fit
    res = simulate(TWO, "vllm_v0", {**PARAMS, "preemption_mode": "swap", "swap_space": tiny},
                   [ex])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_recomputed_tokens"] == 20
    assert rec.loc[1, "num_swapped_out_tokens"] == 0
    assert res.summary["num_swap_recomputes"] == 1 and res.summary["num_swap_outs"] == 0
    assert res.summary["kv_swap_out_bytes"] == 0.0
    assert "swap_full" in set(res.events["kind"])


@pytest.mark.parametrize("policy,extra", [
    ("vllm_v0", {}), ("sarathi", {"token_budget": 256, "max_num_seqs": 8}),
    ("vllm_v0", {"enable_prefix_caching": True}),
    ("sarathi", {"num_speculative_tokens": 2, "acceptance_rate": 0.7}),
    ("vllm_v0", {"enable_prefix_caching": True, "host_prefix_cache_gib": 4 * TIER_BLOCK,
                 "remote_prefix_cache_gib": 20 * TIER_BLOCK}),
    ("sarathi", {"enable_prefix_caching": True, "host_prefix_cache_gib": 30 * TIER_BLOCK})])
def test_jumps_stay_exact_with_swapping(policy, extra):
    trace = random_trace(np.random.default_rng(5), 60, rate=20.0, max_output=150,
                         block_tokens=8)
    ex = TierExecutor(capacity=600, per_ctx_s=1e-6, draft_s=1e-3)
    params = {"preemption_mode": "swap", "block_size": 8, **extra}
    jump = simulate(trace, policy, params, [ex, ex])
    step = simulate(trace, policy, params, [OneIteration(ex)] * 2)
    assert jump.summary["num_swap_outs"] > 0  # the case exercises swapping
    tiers = ("num_host_hit_tokens", "num_remote_hit_tokens") if "host_prefix_cache_gib" in \
        extra else ()
    for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s",
                "num_swapped_out_tokens", "num_cached_tokens", *tiers):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    assert jump.summary["num_computed_tokens"] == step.summary["num_computed_tokens"]
    assert len(jump.steps) <= len(step.steps)  # (a speculative decode is one iteration)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
def test_invariants_hold_with_swapping(policy, seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 40, rate=10.0, max_prompt=300, max_output=80, block_tokens=8)
    ex = TierExecutor(capacity=int(rng.integers(400, 1500)), per_ctx_s=1e-6, draft_s=1e-3)
    variants = [{}, {"enable_prefix_caching": True, "block_size": 4},
                {"swap_space": 40 * 16 * 1000.0 / 2**30},  # 40 blocks: some fall back
                {"num_speculative_tokens": 2}]
    params = {"preemption_mode": "swap", **variants[seed % len(variants)]}
    if policy == "sarathi":
        params.update(token_budget=300, max_num_seqs=8)
    check_invariants(trace, policy, [ex] * (1 + seed % 2), params)
    res = simulate(trace, policy, params, [ex] * (1 + seed % 2))
    rec = res.records
    done = rec[rec["status"] == "finished"]
    assert (done["num_swapped_out_tokens"] == done["num_swapped_in_tokens"]).all()
    assert res.summary["kv_swap_out_bytes"] == rec["num_swapped_out_tokens"].sum() * 1000.0

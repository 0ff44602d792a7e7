"""Token accounting of padded static batches (vanilla, dynamic, Magnus) after an OOM.

The computed tokens of all steps (what the engine counts: the padded prompt in a step's first
iteration, one token per request in each later one, nothing for the iteration that ran out of
memory) must equal useful + padding + recomputed tokens, whether a batch ran out of KV after some
iterations, on its padded prefill itself, or its requests finally failed (docs/architecture.md,
"Time and tokens"). A miscount here is a silent wrong number in every OOM-prone run.
"""

from __future__ import annotations

import pandas as pd
import pytest

from policies.simulate import RunResult, simulate
from policies.static_batch import static_tokens_per_request
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.request import OUT_OF_MEMORY
from tests.factories import LinearExecutor, make_trace
from traces.synthetic import SyntheticConfig, synthetic_trace

STATIC = {"vanilla": {"batch_size": 2}, "dynamic": {"batch_size": 2, "max_batch_delay_ms": 0.0}}
# capacity 300: two prompts of 100 fill 200 KV tokens, and each decode iteration adds 2, so the
# batch runs out of memory at iteration 52 after 51 complete (200 + 2 * 50 = 300 tokens computed)
AFTER_51 = [(0.0, 100, 200), (0.0, 100, 10)]
# capacity 300: the prompts are padded to 200 each, 400 tokens: the padded prefill itself fails
ON_PREFILL = [(0.0, 200, 5), (0.0, 50, 5)]


def token_identity(res: RunResult) -> tuple[int, int]:
    """(computed tokens of all steps, useful + padding + recomputed tokens)."""
    rec, s = res.records, res.summary
    done = rec[rec["status"] == "finished"]
    useful = int((done["prompt_tokens"] + done["output_tokens"] - 1).sum())
    return int(s["num_computed_tokens"]), useful + int(s["num_padding_tokens"]) + int(
        s["num_recomputed_tokens"])


def run_static(policy: str, rows: list, on_oom: str) -> RunResult:
    params = {**STATIC[policy], "on_oom": on_oom}
    return simulate(make_trace(rows), policy, params, [LinearExecutor(capacity=300)])


def oom_steps(res: RunResult) -> pd.DataFrame:
    return res.steps[res.steps["oom"]]


def test_tokens_of_a_static_batch_per_request():
    assert static_tokens_per_request(100, 51) == 150  # 100 padded prompt + 50 decodes
    assert static_tokens_per_request(100, 1) == 100  # the padded prefill only
    assert static_tokens_per_request(100, 0) == 0  # the padded prefill ran out of memory


@pytest.mark.parametrize("policy", sorted(STATIC))
def test_oom_after_some_iterations_recomputes_what_the_engine_computed(policy):
    res = run_static(policy, AFTER_51, "split")
    oom = oom_steps(res)
    assert len(oom) == 1 and oom["num_iterations"].item() == 51
    assert oom["num_computed_tokens"].item() == 300
    rec = res.records.set_index("request_id")
    assert (rec["status"] == "finished").all()
    assert rec["num_recomputed_tokens"].tolist() == [150, 150]  # was 151: one token too many
    computed, accounted = token_identity(res)
    assert computed == accounted == 300 + 299 + 109
    assert any("after 51 iterations" in d for d in res.events["info"])


@pytest.mark.parametrize("policy", sorted(STATIC))
def test_oom_on_the_padded_prefill_recomputes_nothing(policy):
    res = run_static(policy, ON_PREFILL, "split")
    oom = oom_steps(res)
    assert len(oom) == 1 and oom["num_iterations"].item() == 0
    assert oom["num_computed_tokens"].item() == 0
    rec = res.records.set_index("request_id")
    assert (rec["status"] == "finished").all()
    assert rec["num_recomputed_tokens"].tolist() == [0, 0]  # was the padded prompt, 200 each
    computed, accounted = token_identity(res)
    assert computed == accounted == 204 + 54


@pytest.mark.parametrize("policy", sorted(STATIC))
@pytest.mark.parametrize("rows,iterations,per_request", [(AFTER_51, 51, 150),
                                                         (ON_PREFILL, 0, 0)])
def test_failed_requests_charge_their_last_attempt_as_padding(policy, rows, iterations,
                                                              per_request):
    res = run_static(policy, rows, "fail")
    rec = res.records.set_index("request_id")
    assert (rec["status"] == "failed").all()
    assert (rec["reason"] == OUT_OF_MEMORY).all()
    assert rec["reason_detail"].str.contains(f"after {iterations} iterations").all()
    assert rec["num_padding_tokens"].tolist() == [per_request] * 2
    assert (rec["num_recomputed_tokens"] == 0).all()
    computed, accounted = token_identity(res)
    assert computed == accounted == 2 * per_request


@pytest.mark.parametrize("policy", ["magnus", "abp", "glp"])
def test_magnus_splits_and_fails_with_the_same_count(policy):
    # predicted from the prompt, the long outputs overrun the batch's KV; the last request
    # cannot fit even alone (100 + 350 > 400) and fails after some iterations
    rows = [(0.0, 50, 300), (0.0, 50, 300), (0.0, 50, 10), (0.0, 100, 350)]
    res = simulate(make_trace(rows), policy, {}, [LinearExecutor(capacity=400)])
    rec = res.records.set_index("request_id")
    assert res.summary["num_oom_events"] >= 2
    assert rec.loc[3, "status"] == "failed" and rec.loc[3, "reason"] == OUT_OF_MEMORY
    assert rec.loc[3, "num_padding_tokens"] == 100 + 300  # alone: 301 iterations fill the KV
    computed, accounted = token_identity(res)
    assert computed == accounted


@pytest.mark.parametrize("policy", ["vanilla", "dynamic"])
@pytest.mark.parametrize("on_oom", ["split", "fail"])
def test_issue_13_llama2_13b_on_a100_40gb(policy, on_oom):
    """The issue's reproduction: 600 requests at 3 req/s, batch 8; with `split` it reported
    535,949 computed tokens but 567,357 useful + padding + recomputed."""
    trace = synthetic_trace(SyntheticConfig.from_preset("sharegpt", rate_per_s=3.0,
                                                        num_requests=600), 0)
    executors = build_executors(ClusterSpec(model="llama-2-13b", gpu="A100-40GB"))
    res = simulate(trace, policy, {"batch_size": 8, "on_oom": on_oom}, executors)
    oom = oom_steps(res)
    assert (oom["num_iterations"] > 0).any() and (oom["num_iterations"] == 0).any()
    computed, accounted = token_identity(res)
    assert computed == accounted


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi", "lacb"])
def test_paged_request_that_outgrows_the_cache_charges_its_tokens_as_padding(policy):
    # 200 KV tokens = 12 blocks of 16 (192 tokens): 134 + 60 tokens never fit, so the request
    # fails while decoding; the tokens it computed until then were wasted work
    res = simulate(make_trace([(0.0, 134, 60), (0.0, 20, 5)]), policy, {},
                   [LinearExecutor(capacity=200)])
    rec = res.records.set_index("request_id")
    assert rec.loc[0, "status"] == "failed" and rec.loc[0, "reason"] == OUT_OF_MEMORY
    assert "outgrew the whole KV cache" in rec.loc[0, "reason_detail"]
    assert rec.loc[0, "num_padding_tokens"] > 134  # was 0: its prefill and decodes vanished
    assert rec.loc[1, "status"] == "finished"
    computed, accounted = token_identity(res)
    assert computed == accounted

"""Published directions, reproduced in simulation on small workloads (the scenarios of
experiments/figures/policy_scenarios.py; `python -m experiments.figures policies` draws them for
docs/policies.md on larger ones)."""

from __future__ import annotations

import pytest

from experiments.capacity.main import SearchConfig
from experiments.figures.policy_scenarios import CHUNKED, DYNAMIC, PAGED, QUANT_SEQ, quantized_run

N = 200  # requests per simulated run
COARSE = SearchConfig(min_rate=0.125, rel_tol=0.1)


def test_vllm_serves_a_higher_rate_than_orca_max_at_the_same_normalized_latency():
    # vLLM paper (SOSP'23), ShareGPT: 2.7x-8x the request rate of Orca (Max)
    vllm = PAGED.capacity("vllm_v0", N, COARSE).capacity_rps
    orca = PAGED.capacity("orca-max", N, COARSE).capacity_rps
    assert orca > 0
    assert vllm >= 2.5 * orca
    # why: past its capacity Orca (Max) has reserved all KV memory but fills under half of it
    over = {label: PAGED.run(label, 2 * orca, N) for label in PAGED.policies}
    assert over["orca-max"]["peak_reserved_kv_fraction"] > 0.95
    assert over["orca-max"]["peak_kv_fraction"] < 0.5
    assert (over["vllm_v0"]["mean_normalized_latency_s"]
            < over["orca-max"]["mean_normalized_latency_s"] / 2)


def test_sarathi_cuts_tail_tbt_and_serves_more_under_a_tbt_slo():
    # Sarathi-Serve (OSDI'24): chunked prefills remove generation stalls behind long prompts
    vllm, sarathi = (CHUNKED.run(label, 3.0, N) for label in ("vllm_v0", "sarathi"))
    assert sarathi["p99_itl_s"] < vllm["p99_itl_s"] / 3
    assert sarathi["p99_itl_s"] <= CHUNKED.slo.tbt_p99_s < vllm["p99_itl_s"]
    cap_vllm = CHUNKED.capacity("vllm_v0", N, COARSE).capacity_rps
    cap_sarathi = CHUNKED.capacity("sarathi", N, COARSE).capacity_rps
    assert cap_sarathi > 1.5 * cap_vllm


def test_dynamic_batching_beats_full_batches_at_low_load_and_converges_at_high_load():
    full, dynamic = "static (full batches)", "dynamic (100 ms)"
    low = {label: DYNAMIC.run(label, 0.5, N)["mean_e2e_s"] for label in (full, dynamic)}
    assert low[dynamic] < 0.2 * low[full]  # waiting for 7 more arrivals at 0.5 req/s
    high = {label: DYNAMIC.run(label, 32.0, N)["mean_e2e_s"] for label in (full, dynamic)}
    assert high[dynamic] == pytest.approx(high[full], rel=0.05)  # batches fill at once


def test_quantized_vanilla_fits_larger_batches_on_the_same_gpu():
    fp16, int8 = quantized_run("fp16", 40, 80), quantized_run("int8", 40, 80)
    fits = {name: run["kv_capacity_tokens"] // sum(QUANT_SEQ)
            for name, run in (("fp16", fp16), ("int8", int8))}
    assert fits["fp16"] < 40 <= fits["int8"]
    assert fp16["num_oom_events"] > 0 and int8["num_oom_events"] == 0
    assert int8["mean_batch_size"] == 40 > fp16["mean_batch_size"]
    assert int8["output_throughput"] > fp16["output_throughput"]
    assert fp16["completed"] == int8["completed"] == 80  # split batches recover

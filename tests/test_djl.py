"""`djl`: DJL Serving rolling-batch options mapped onto the simulator's continuous batching."""

from __future__ import annotations

import numpy as np
import pytest

from policies.djl import DjlConfig, engine_params
from policies.simulate import simulate
from sim.core.request import Request
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, random_trace
from tests.test_policy_vllm import make_policy


@pytest.mark.parametrize("options,name,params", [
    ({}, "vllm_v0", {"max_num_seqs": 256, "block_size": 16, "max_num_batched_tokens": 30_000}),
    ({"rolling_batch": "lmi-dist", "max_rolling_batch_size": 64,
      "max_rolling_batch_prefill_tokens": 11_000},
     "vllm_v0", {"max_num_seqs": 64, "block_size": 16, "max_num_batched_tokens": 11_000}),
    ({"rolling_batch": "auto", "max_model_len": 1024},  # vLLM: max(max_model_len, 2048)
     "vllm_v0", {"max_num_seqs": 256, "block_size": 16, "max_num_batched_tokens": 2048}),
    ({"max_model_len": 4096}, "vllm_v0",
     {"max_num_seqs": 256, "block_size": 16, "max_num_batched_tokens": 4096}),
    ({"enable_chunked_prefill": True}, "sarathi",
     {"max_num_seqs": 256, "block_size": 16, "token_budget": 512}),
    ({"rolling_batch": "trtllm"}, "sarathi",
     {"max_num_seqs": 256, "block_size": 64, "token_budget": 16_384}),
    ({"rolling_batch": "trtllm", "max_num_tokens": 8192, "tokens_per_block": 32,
      "max_rolling_batch_size": 4}, "sarathi",
     {"max_num_seqs": 4, "block_size": 32, "token_budget": 8192}),
    ({"rolling_batch": "scheduler"}, "orca", {"max_batch_size": 32, "max_tokens": 2048}),
    ({"enable_prefix_caching": True, "max_rolling_batch_prefill_tokens": 4096}, "vllm_v0",
     {"max_num_seqs": 256, "block_size": 16, "max_num_batched_tokens": 4096,
      "enable_prefix_caching": True}),
])
def test_options_map_onto_engines_with_lmi_defaults(options, name, params):
    got_name, got = engine_params(DjlConfig(**options), 30_000)
    got.pop("router")
    assert (got_name, got) == (name, params)


@pytest.mark.parametrize("options,engine,params", [
    ({"max_rolling_batch_size": 8, "max_rolling_batch_prefill_tokens": 300}, "vllm_v0",
     {"max_num_seqs": 8, "max_num_batched_tokens": 300}),
    ({"rolling_batch": "trtllm", "max_rolling_batch_size": 8, "max_num_tokens": 64,
      "tokens_per_block": 16}, "sarathi", {"max_num_seqs": 8, "token_budget": 64}),
])
def test_runs_exactly_as_the_engine_it_maps_to(options, engine, params):
    trace = random_trace(np.random.default_rng(2), 50, rate=30.0)
    ex = [LinearExecutor(capacity=900, per_ctx_s=1e-6)]
    djl = simulate(trace, "djl", options, ex)
    same = simulate(trace, engine, params, ex)
    for col in ("status", "first_token_s", "finish_s", "num_preemptions"):
        assert djl.records[col].tolist() == same.records[col].tolist()
    assert djl.summary["num_preemptions"] > 0  # the small cache is exercised


def test_rolling_batch_size_caps_running_requests():
    p = make_policy("djl", 10_000, max_rolling_batch_size=2)
    for i in range(4):
        p.add_request(Request(i, 0.0, 10, 5), 0.0)
    assert p.next_step(0, 0.0).request_ids == (0, 1)
    assert p.engine_name == "vllm_v0" and len(p.state[0].waiting) == 2


@pytest.mark.parametrize("options,field", [
    ({"rolling_batch": "disable"}, "rolling_batch"),
    ({"rolling_batch": "deepspeed"}, "rolling_batch"),
    ({"max_rolling_batch_size": 0}, "max_rolling_batch_size"),
    ({"max_rolling_batch_prefill_tokens": -1}, "max_rolling_batch_prefill_tokens"),
    ({"max_model_len": 0}, "max_model_len"),
    ({"tokens_per_block": 0}, "tokens_per_block"),
    ({"max_num_tokens": 4096}, "max_num_tokens"),  # TRT-LLM's option on vllm
    ({"rolling_batch": "trtllm", "max_rolling_batch_prefill_tokens": 4096},
     "max_rolling_batch_prefill_tokens"),
    ({"rolling_batch": "scheduler", "max_rolling_batch_prefill_tokens": 4096},
     "max_rolling_batch_prefill_tokens"),
    ({"rolling_batch": "trtllm", "enable_chunked_prefill": True}, "enable_chunked_prefill"),
    ({"rolling_batch": "scheduler", "enable_prefix_caching": True}, "enable_prefix_caching"),
    ({"enable_prefix_caching": 1}, "enable_prefix_caching"),
    ({"enable_chunked_prefill": "yes"}, "enable_chunked_prefill"),
    ({"max_model_len": 4096, "max_rolling_batch_prefill_tokens": 2048},
     "max_rolling_batch_prefill_tokens"),  # vLLM: a whole prompt must fit one prefill
    ({"enable_chunked_prefill": True, "max_rolling_batch_prefill_tokens": 128},
     "max_rolling_batch_prefill_tokens"),  # 128 < 256 decodes per iteration
    ({"rolling_batch": "trtllm", "max_num_tokens": 100}, "max_num_tokens"),
    ({"router": "random"}, "router"),
])
def test_errors_name_the_djl_field(options, field):
    with pytest.raises(ConfigError) as err:
        make_policy("djl", 10_000, **options)
    assert err.value.field == field


def test_block_larger_than_the_cache_is_an_error_naming_tokens_per_block():
    make_policy("djl", 100, rolling_batch="trtllm")  # 64-token blocks fit, 128 do not
    with pytest.raises(ConfigError) as err:
        make_policy("djl", 100, rolling_batch="trtllm", tokens_per_block=128)
    assert err.value.field == "tokens_per_block"

"""Materialised attention scores on a paged engine (issue 31, sim/cost/score_buffer.py): the buffer
comes out of the KV pool at the largest prefill, prefill attention runs unfused (closed form),
decode rows are untouched, and the option is checked by name."""

from __future__ import annotations

import pytest

from sim.cluster.cost_model_choice import build_cost_model
from sim.cost.cost_model import DeploymentSpec
from sim.hardware.gpus import get_gpu
from sim.models.catalog import resolve_model
from sim.util.errors import ConfigError

QWEN_14B = "experiments/configs/models/qwen-14b.json"  # 40 layers, 40 heads x 128, MHA
BUFFER = {"score_buffer": {"max_prefill_tokens": 2048}}


def deployment() -> DeploymentSpec:
    return DeploymentSpec(resolve_model(QWEN_14B), get_gpu("A10G"), 1, "int8")


def test_buffer_comes_out_of_the_kv_pool():
    d = deployment()
    cm = build_cost_model(d, BUFFER)
    buffer = 40 * 2048 ** 2 * 6.0  # heads x T^2 x (fp16 + fp32 copy): 1.0 GB
    assert cm.deployment.activation_reserve_bytes == d.activation_reserve_bytes + int(buffer)
    kv_per_token = 2 * 40 * 40 * 128 * 2  # K and V, 40 layers, 40 heads x 128, fp16
    assert cm.deployment.kv_capacity_tokens == int((d.kv_bytes_per_gpu - int(buffer))
                                                   // kv_per_token)
    assert d.kv_capacity_tokens - cm.deployment.kv_capacity_tokens in (1228, 1229, 1230)
    fp16 = build_cost_model(d, {"score_buffer": {"max_prefill_tokens": 2048,
                                                 "bytes_per_pair": 2}})
    assert fp16.deployment.activation_reserve_bytes == d.activation_reserve_bytes + \
        40 * 2048 ** 2 * 2


@pytest.mark.parametrize("chunk, context", [(2048, 0), (6, 1500), (512, 1024)])
def test_prefill_attention_closed_form(chunk, context):
    cm = build_cost_model(deployment(), BUFFER)
    p, gpu = cm.params, get_gpu("A10G")
    pairs = chunk * (context + chunk)  # the whole matrix
    flops = 4 * 40 * 128 * pairs
    moved = (context + chunk) * 2 * 40 * 128 * 2 + 2 * 40 * pairs * 6.0
    want = max(flops / (gpu.peak_tensor_flops * p.gemm_compute_eff),
               moved / (gpu.hbm_bandwidth * p.gemm_weight_eff)) \
        + 2 * p.gemm_fixed_s + p.small_fixed_s
    assert cm.attn_prefill_layer_s(chunk, context) == pytest.approx(want, rel=1e-12)
    fused = build_cost_model(deployment(), {})
    assert cm.attn_prefill_layer_s(chunk, context) > fused.attn_prefill_layer_s(chunk, context)


def test_whole_prompt_is_memory_bound_on_the_scores():
    cm = build_cost_model(deployment(), BUFFER)
    p, gpu = cm.params, get_gpu("A10G")
    score_s = 2 * 40 * 2048 * 2048 * 6.0 / (gpu.hbm_bandwidth * p.gemm_weight_eff)
    assert cm.attn_prefill_layer_s(2048, 0) > score_s  # 4.0 ms a layer on the scores alone


def test_step_prices_prefill_unfused_and_decode_as_before():
    plain, buf = build_cost_model(deployment(), {}), build_cost_model(deployment(), BUFFER)
    decode = (8, 8 * 1000, 8 * 1000, 8, 8, 8, 3)  # 8 decode rows at context 1000, 3 iterations
    assert list(plain.iteration_times_from_sums(*decode)) == \
        list(buf.iteration_times_from_sums(*decode))
    n = 1024
    t_plain = plain.iteration_times_from_sums(n, 0, 0, n * n, 1, 1)[0]
    t_buf = buf.iteration_times_from_sums(n, 0, 0, n * n, 1, 1)[0]
    extra = 40 * (buf.attn_prefill_layer_s(n, 0) - plain.attn_prefill_layer_s(n, 0))
    assert t_buf - t_plain == pytest.approx(extra, rel=1e-9)


@pytest.mark.parametrize("options, field", [
    ({"score_buffer": {}}, "score_buffer.max_prefill_tokens"),
    ({"score_buffer": {"max_prefill_tokens": 0}}, "score_buffer.max_prefill_tokens"),
    ({"score_buffer": {"max_prefill_tokens": 2048.0}}, "score_buffer.max_prefill_tokens"),
    ({"score_buffer": {"max_prefill_tokens": 64, "bytes_per_pair": 0}},
     "score_buffer.bytes_per_pair"),
    ({"score_buffer": {"max_prefill_tokens": 64, "rows": 2}}, "score_buffer.rows"),
    ({"score_buffer": 2048}, "score_buffer"),
    ({"kind": "roofline", **BUFFER}, "score_buffer"),
    ({"kind": "profile", "profiles": "x", **BUFFER}, "score_buffer"),
])
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError, match=rf"cluster\.cost_model\.{field}"):
        build_cost_model(deployment(), options)


def test_a_buffer_that_leaves_no_kv_room_is_refused():
    with pytest.raises(ConfigError, match="activation reserve"):
        build_cost_model(deployment(), {"score_buffer": {"max_prefill_tokens": 8192}})

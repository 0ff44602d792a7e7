"""The sampler's cost by build (issue 31, sim/cost/sampler_cost.py): flat (the default, unchanged),
fused top-k and HF's torch sampler, closed forms of launches plus logit bytes at HBM bandwidth."""

from __future__ import annotations

import pytest

from sim.cluster.cost_model_choice import build_cost_model
from sim.cost.cost_model import DeploymentSpec
from sim.cost.sampler_cost import (EAGER_OP_S, FUSED_KERNEL_S, HF_OPS, SAMPLER_KERNELS,
                              sampler_seconds)
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model, resolve_model
from sim.util.errors import ConfigError

QWEN_1_8B = "experiments/configs/models/qwen-1_8b.json"  # vocabulary 151,936


def deployment(model: str = QWEN_1_8B, gpu: str = "A10G", dtype: str = "int8"):
    return DeploymentSpec(resolve_model(model), get_gpu(gpu), 1, dtype)


def sampler_s(options: dict, rows: int, model: str = QWEN_1_8B, gpu: str = "A10G") -> float:
    """The sampler's seconds in a step: the per-step fixed GPU cost less the lm_head's."""
    cm = build_cost_model(deployment(model, gpu), options)
    return cm.gpu_fixed_s(0, rows) - cm._gemm_s(cm._lm_gemm, rows)


def test_hf_and_fused_kernel_counts_are_the_ops_listed():
    assert sum(op[1] for op in HF_OPS) == 23 and sum(op[2] for op in HF_OPS) == 52.5
    hf, fused = SAMPLER_KERNELS["hf"], SAMPLER_KERNELS["fused"]
    assert (hf.kernels, hf.logit_passes, hf.kernel_s) == (23, 52.5, EAGER_OP_S)
    assert (fused.kernels, fused.logit_passes, fused.kernel_s) == (3, 3.0, FUSED_KERNEL_S)


@pytest.mark.parametrize("rows", [1, 6, 64])
def test_fused_sampler_closed_form(rows):
    # A10G: 600 GB/s, add_eff 1.0 (kept from the A100 fit); 3 launches of 5 us, 3 passes of
    # 151,936 fp32 logits per row
    per_row = 3 * 151936 * 4 / 600e9
    assert sampler_s({"sampler": "fused"}, rows) == pytest.approx(3 * 5e-6 + rows * per_row,
                                                                  rel=1e-12)


@pytest.mark.parametrize("rows", [1, 6, 64])
def test_hf_sampler_closed_form(rows):
    per_row = 52.5 * 151936 * 4 / 600e9  # 53.2 us a row on A10G
    assert sampler_s({"sampler": "hf"}, rows) == pytest.approx(23 * 10e-6 + rows * per_row,
                                                               rel=1e-12)


def test_hf_minus_fused_at_batch_one_on_a10g():
    # 20 more launches at 10 us less 3 at 5 us, 49.5 more passes of 608 KB at 600 GB/s
    diff = sampler_s({"sampler": "hf"}, 1) - sampler_s({"sampler": "fused"}, 1)
    assert diff == pytest.approx(23 * 10e-6 - 15e-6 + 49.5 * 151936 * 4 / 600e9, rel=1e-12)
    assert 0.26e-3 < diff < 0.27e-3


def test_cost_grows_with_vocabulary_and_rows_but_flat_does_not():
    params = build_cost_model(deployment(), {"sampler": "hf"}).params
    one = sampler_seconds(params, 32000, 600e9, 8) - params.sampler_fixed_s
    assert sampler_seconds(params, 64000, 600e9, 8) - params.sampler_fixed_s == \
        pytest.approx(2 * one, rel=1e-12)
    flat = build_cost_model(deployment(), {}).params
    assert sampler_seconds(flat, 32000, 600e9, 8) == sampler_seconds(flat, 152064, 600e9, 8)


def test_flat_is_the_default_and_moves_nothing():
    d = DeploymentSpec(get_model("llama-2-7b"), get_gpu("A100-80GB"))
    plain, flat = build_cost_model(d, {}), build_cost_model(d, {"sampler": "flat"})
    assert plain.params == flat.params and plain.params.sampler_logit_passes == 0.0
    p = plain.params
    lm = plain._gemm_s(plain._lm_gemm, 32)
    assert plain.gpu_fixed_s(0, 32) == lm + p.sampler_fixed_s + p.sampler_per_seq_s * 32
    args = (64 * 300, 64 * 1000, 64 * 1000 * 300, 64 * 300 ** 2, 64, 64, 5)
    assert list(plain.iteration_times_from_sums(*args)) == \
        list(flat.iteration_times_from_sums(*args))


def test_sampler_refused_by_the_roofline_and_named_when_unknown():
    with pytest.raises(ConfigError, match=r"cluster\.cost_model\.sampler"):
        build_cost_model(deployment(), {"kind": "roofline", "sampler": "hf"})
    with pytest.raises(ConfigError, match=r"cluster\.cost_model\.sampler.*one of flat, fused, hf"):
        build_cost_model(deployment(), {"sampler": "torch"})


def test_a_field_override_applies_on_top_of_the_preset():
    cm = build_cost_model(deployment(), {"sampler": "hf", "sampler_fixed_s": 1e-3})
    assert cm.params.sampler_fixed_s == 1e-3 and cm.params.sampler_logit_passes == 52.5

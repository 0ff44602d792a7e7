"""Parallel attention (Falcon, issue 31): attention and MLP read the same input and their outputs
are summed, so a tensor-parallel layer all-reduces once (vLLM's Falcon:
`reduce_row_parallel_results = not (new_decoder_architecture or parallel_attn)`), not twice.
`ModelSpec.parallel_attn` is read from Falcon's config.json and every layer-composing cost
model charges `allreduces_per_layer` all-reduces per layer: Falcon-40B at TP 8 spends half the
communication time per step of a sequential-block model of the same shapes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.cost.cost_model import DeploymentSpec, RooflineCostModel
from sim.cost.gpu_params import stage_params_for
from sim.cost.stage_compose import ComposedCostModel
from sim.cost.stage_model import StageCostModel
from sim.hardware.gpus import get_gpu
from sim.models.catalog import get_model, model_from_config_dict
from sim.util.errors import ConfigError

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FALCON = get_model("falcon-40b")
SEQUENTIAL = dataclasses.replace(FALCON, name="falcon-40b-sequential", parallel_attn=False)
H_BYTES = 8192 * 2  # fp16 hidden states of one token


def read(path: str, **changes) -> dict:
    return {**json.loads((FIXTURES / path / "config.json").read_text()), **changes}


def test_falcon_configs_read_parallel_attention_and_others_do_not():
    assert FALCON.parallel_attn and get_model("falcon-7b").parallel_attn
    assert FALCON.allreduces_per_layer == 1
    assert get_model("llama-2-7b").allreduces_per_layer == 2
    for path in ("models/falcon-40b", "models/falcon-7b", "refinedweb/falcon-40b"):
        assert model_from_config_dict(read(path), "m").parallel_attn
    # FalconConfig's default is parallel_attn: true; the new decoder architecture always is
    assert model_from_config_dict(read("models/falcon-7b", parallel_attn=None), "m").parallel_attn
    assert model_from_config_dict(read("models/falcon-40b", parallel_attn=False),
                                  "m").parallel_attn
    sequential = model_from_config_dict(read("models/falcon-7b", parallel_attn=False), "m")
    assert not sequential.parallel_attn and sequential.allreduces_per_layer == 2


def test_parallel_attn_is_a_bool_and_not_with_moe_layers():
    with pytest.raises(ConfigError, match="parallel_attn"):
        dataclasses.replace(FALCON, parallel_attn=1)
    with pytest.raises(ConfigError, match="parallel_attn"):
        dataclasses.replace(get_model("mixtral-8x7b"), parallel_attn=True)
    with pytest.raises(ConfigError, match="parallel_attn"):
        model_from_config_dict(read("models/falcon-7b", parallel_attn="yes"), "m")


def deployment(model) -> DeploymentSpec:
    return DeploymentSpec(model, get_gpu("A10G"), tensor_parallel=8)


@pytest.mark.parametrize("batch", [8, 64, 256])
def test_roofline_charges_half_the_all_reduce_time(batch):
    """By hand, A10G (PCIe, 20 us per collective, 32 GB/s at 0.8): a ring all-reduce of
    h x 2 bytes per token moves 2 x 7/8 of it; 60 layers x 1 (parallel) or x 2 (sequential)."""
    par, seq = (RooflineCostModel(deployment(m)) for m in (FALCON, SEQUENTIAL))
    per_ar = 20e-6 + batch * H_BYTES * 2 * 7 / 8 / (32e9 * 0.8)
    shape = ([1] * batch, [136] * batch, batch)
    assert par.breakdown(*shape)["allreduce"].seconds == pytest.approx(60 * per_ar, rel=1e-12)
    assert seq.breakdown(*shape)["allreduce"].seconds == pytest.approx(120 * per_ar, rel=1e-12)
    t_par, t_seq = (cm.iteration_times(*shape)[0] for cm in (par, seq))
    assert t_seq - t_par == pytest.approx(60 * per_ar, rel=1e-9)


@pytest.mark.parametrize("batch", [8, 64, 256])
def test_stage_model_and_composed_stages_charge_one_all_reduce_per_layer(batch):
    params = stage_params_for(get_gpu("A10G"))
    par, seq = (StageCostModel(deployment(m), params) for m in (FALCON, SEQUENTIAL))
    per_ar = par.allreduce_s(H_BYTES * batch)
    assert per_ar == seq.allreduce_s(H_BYTES * batch) > 0
    sums = (batch, 136 * batch, 136 * batch, batch, batch, batch)
    t_par, t_seq = (cm.iteration_times_from_sums(*sums, num_iterations=3) for cm in (par, seq))
    assert t_seq - t_par == pytest.approx([60 * per_ar] * 3, rel=1e-9)  # half of 120 x per_ar
    c_par, c_seq = (ComposedCostModel(st, m, 8).iteration_times_from_sums(*sums, 3)
                    for st, m in ((par, FALCON), (seq, SEQUENTIAL)))
    assert c_seq - c_par == pytest.approx([60 * per_ar] * 3, rel=1e-9)


def test_no_change_without_tensor_parallelism():
    one = [DeploymentSpec(m, get_gpu("A10G"), tensor_parallel=1)
           for m in (get_model("falcon-7b"),
                     dataclasses.replace(get_model("falcon-7b"), parallel_attn=False))]
    times = [RooflineCostModel(d).iteration_times([1] * 4, [100] * 4, 4)[0] for d in one]
    assert times[0] == times[1]

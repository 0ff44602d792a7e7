"""`cluster.cost_model.attention` picks the attention kernel set a run is priced with
(sim/cost/attention_kernels.py): flashinfer (the default) or flash_attention (the set before
2026-11-27), derived for the cluster's GPU; anything else is refused naming the field."""

from __future__ import annotations

import pytest

from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.attention_kernels import ATTENTION_FIELDS, FLASH_ATTENTION_A100
from sim.util.errors import ConfigError


def stage_params(**cost_model):
    ex = build_executors(ClusterSpec(model="llama-3-8b", gpu="A100-80GB", cost_model=cost_model))
    return ex[0].cost_model.params


def chunk_over_context_s(**cost_model) -> float:
    """Seconds of one step: a 512-token chunk after 8,192 cached tokens."""
    ex = build_executors(ClusterSpec(model="llama-3-8b", gpu="H100-80GB", cost_model=cost_model))
    n, c = 512, 8192  # (sum n, sum c, sum n*c, sum n^2, seqs, sampled)
    return float(ex[0].cost_model.iteration_times_from_sums(n, c, n * c, n * n, 1, 1)[0])


def test_flash_attention_restores_the_earlier_a100_attention_terms():
    p = stage_params(attention="flash_attention")
    assert {f: getattr(p, f) for f in ATTENTION_FIELDS} == pytest.approx(
        dict(FLASH_ATTENTION_A100))
    default = stage_params()
    assert stage_params(attention="flashinfer") == default
    others = [f for f in type(p).__dataclass_fields__ if f not in ATTENTION_FIELDS]
    assert all(getattr(p, f) == getattr(default, f) for f in others)  # only attention moves


def test_the_kernel_set_moves_a_chunk_over_a_long_context():
    assert chunk_over_context_s(attention="flash_attention") > 1.5 * chunk_over_context_s()


@pytest.mark.parametrize("cost_model, field", [
    ({"attention": "flash_attn_3"}, "cluster.cost_model.attention"),
    ({"attention": 3}, "cluster.cost_model.attention"),
    ({"kind": "roofline", "attention": "flashinfer"}, "cluster.cost_model.attention")])
def test_bad_attention_choices_are_named(cost_model, field):
    with pytest.raises(ConfigError) as err:
        stage_params(**cost_model)
    assert err.value.field == field


def test_many_small_chunks_fill_the_gpu_together_under_either_kernel_set():
    """64 verify rows of 5 tokens after 1,300 cached tokens are one kernel of 320 query
    tokens: its small-chunk efficiency is that of 320 tokens, not of 5 (the flash_attention
    set's half-efficiency point, 770 tokens, was fitted on single chunks), so the step costs
    a fraction more than a plain decode step, not tens of times more."""
    from sim.core.executor import Step

    for cost_model in ({}, {"attention": "flash_attention"}):
        ex = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB",
                                         cost_model=cost_model))[0]
        b, ids = 64, tuple(range(64))
        plain = ex.execute(Step(0, ids, (1,) * b, (1300,) * b, (True,) * b)).duration_s
        verify = ex.execute(Step(0, ids, (5,) * b, (1300,) * b, (True,) * b)).duration_s
        assert 1.0 < verify / plain < 2.0, cost_model
        one = ex.execute(Step(0, (0,), (5,), (1300,), (True,))).duration_s
        assert verify < 64 * one

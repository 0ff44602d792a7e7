"""`cluster.cost_model.attention` picks the attention kernel set a run is priced with
(sim/attention_kernels.py): flashinfer (the default) or flash_attention (the set before
2026-11-27), derived for the cluster's GPU; anything else is refused naming the field."""

from __future__ import annotations

import pytest

from sim.attention_kernels import ATTENTION_FIELDS, FLASH_ATTENTION_A100
from sim.cluster import ClusterSpec, build_executors
from sim.errors import ConfigError


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

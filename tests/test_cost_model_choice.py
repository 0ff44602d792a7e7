"""`cluster.cost_model.kind` picks the stage model (default), the roofline or measured profiles;
each kind refuses options it does not take, naming the field and value."""

from __future__ import annotations

import pytest

from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.cost_model import RooflineCostModel
from sim.cost.stage_model import StageCostModel
from sim.util.errors import ConfigError
from tests.factories import make_trace
from traces.paths import default_data_dir

PROFILE_DIR = default_data_dir() / "profiles"


def model_of(**cost_model):
    return build_executors(ClusterSpec(cost_model=cost_model))[0].cost_model


def test_the_default_is_the_stage_model_and_roofline_fields_imply_the_roofline():
    assert isinstance(model_of(), StageCostModel)
    assert isinstance(model_of(kind="roofline"), RooflineCostModel)
    assert model_of(step_overhead_s=1e-3).config.step_overhead_s == 1e-3  # kind implied
    assert model_of(cpu_step_s=1e-3).params.cpu_step_s == 1e-3  # a stage field: the default


def test_kind_stage_builds_the_stage_model_with_the_gpus_parameters():
    cost = model_of(kind="stage")
    assert isinstance(cost, StageCostModel)
    res = simulate(make_trace([(0.0, 100, 20), (0.0, 300, 10)]), "vllm_v0", {},
                   build_executors(ClusterSpec(cost_model={"kind": "stage"})))
    assert res.summary["completed"] == 2


@pytest.mark.parametrize("options, field", [
    ({"kind": "exact"}, "cluster.cost_model.kind"),
    ({"kind": "stage", "step_overhead_s": 1e-3}, "cluster.cost_model.step_overhead_s"),
    ({"kind": "profile"}, "cluster.cost_model.profiles"),
    ({"kind": "stage", "profiles": "x"}, "cluster.cost_model.profiles"),
    ({"compute_effciency": 0.5}, "cluster.cost_model.compute_effciency"),
])
def test_bad_options_name_the_field_and_value(options, field):
    with pytest.raises(ConfigError) as info:
        build_executors(ClusterSpec(cost_model=options))
    assert info.value.field == field
    assert repr(info.value.value) in str(info.value)


def test_a_missing_profile_folder_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"cluster\.cost_model\.profiles="):
        model_of(kind="profile", profiles=str(tmp_path / "nowhere"))


@pytest.mark.skipif(not PROFILE_DIR.is_dir(), reason="shared profiles not available")
def test_kind_profile_reads_the_shared_a100_tables():
    executors = build_executors(ClusterSpec(cost_model={"profiles": str(PROFILE_DIR)}))
    res = simulate(make_trace([(0.0, 512, 16), (0.0, 64, 32)]), "vllm_v0", {}, executors)
    assert res.summary["completed"] == 2 and res.summary["duration_s"] > 0

"""Bad experiment configs fail while the config is checked, before any run, with a ConfigError
naming the field and the offending value (issue 13, "No silent wrong answers")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from experiments.config.experiment import PolicyEntry, experiment_from_dict
from experiments.config.load import apply_overrides, load_config, load_yaml_file
from experiments.config.yaml_strict import MAX_NODES, load_yaml
from experiments.run import main
from policies.registry import get_policy, make_config, policy_names
from sim.cluster.spec import ClusterSpec
from sim.util.errors import ConfigError
from sim.util.field_types import type_error
from sim.util.schema import build

CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "configs"
BASE = {
    "name": "tiny",
    "workload": {"synthetic": {"num_requests": 5}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}}],
    "request_rates": [1],
    "seeds": [0],
}


def base_text() -> str:
    return yaml.safe_dump(BASE, sort_keys=False)


def write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def config_error(tmp_path: Path, text: str, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), overrides)
    return info.value


def with_changes(**changes) -> dict:
    return {**BASE, **changes}


def assert_names(err: ConfigError, field: str, value_text: str) -> None:
    assert err.field == field, str(err)
    assert str(err).startswith(f"{field}="), str(err)
    assert value_text in str(err), str(err)


# ---- YAML: duplicate keys, YAML 1.1 surprises, alias bombs ---------------------------------
def test_a_second_policies_key_is_an_error_not_a_replacement(tmp_path):
    text = base_text() + "policies: [orca]\n"
    err = config_error(tmp_path, text)
    assert_names(err, "policies", "[orca]")
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("policies:")]
    assert "duplicate key" in str(err) and f"lines {lines[0]} and {lines[1]}" in str(err)


def test_a_duplicate_key_at_any_depth_is_named_by_its_path(tmp_path):
    line = next(x for x in base_text().splitlines() if x.strip() == "batch_size: 4")
    text = base_text().replace(line, f"{line}\n{line.replace('4', '16')}")
    err = config_error(tmp_path, text)
    assert_names(err, "policies[0].params.batch_size", "16")


def test_a_duplicate_key_inside_a_set_value_is_an_error():
    with pytest.raises(ConfigError) as info:
        apply_overrides(BASE, ["cluster={gpu: H100-80GB, gpu: A100-40GB}"])
    assert_names(info.value, "cluster.gpu", "A100-40GB")


@pytest.mark.parametrize("text,field,why", [
    ("batch_size: 010", "policies[0].params.batch_size", "octal"),
    ("batch_size: 1:30", "policies[0].params.batch_size", "base-60"),
    ("batch_size: 0b11", "policies[0].params.batch_size", "binary"),
    ("batch_size: yes", "policies[0].params.batch_size", "booleans"),
    ("batch_size: on", "policies[0].params.batch_size", "booleans"),
])
def test_yaml_1_1_surprises_in_a_value_are_refused(tmp_path, text, field, why):
    err = config_error(tmp_path, base_text().replace("batch_size: 4", text))
    assert_names(err, field, repr(text.split(": ")[1]))
    assert why in str(err)


def test_yaml_1_1_surprises_in_a_string_field_and_a_key_are_refused(tmp_path):
    err = config_error(tmp_path, base_text().replace("gpu: A100-80GB", "gpu: off"))
    assert_names(err, "cluster.gpu", "'off'")
    err = config_error(tmp_path, base_text() + "on: 3\n")
    assert_names(err, "on", "'on'")


def test_quoted_text_and_yaml_1_2_floats_are_read_as_written():
    data = load_yaml("a: '010'\nb: \"yes\"\nc: [1e3, 1.5e3, 2E-1]\nd: 10\n", "t.yaml")
    assert data == {"a": "010", "b": "yes", "c": [1000.0, 1500.0, 0.2], "d": 10}


def bomb(field: str, width: int = 6, depth: int = 7) -> str:
    """YAML whose `field` expands to width ** depth scalars through aliases."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, depth):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    lines.append(f"{field}: [{', '.join([f'*l{depth - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_name_is_refused_with_a_short_message(tmp_path):
    err = config_error(tmp_path, bomb("name"))
    assert err.field == "name" and "anchors and aliases" in str(err)
    assert f"at most {MAX_NODES:,}" in str(err)
    assert len(str(err)) < 500


def test_a_self_referencing_alias_is_refused():
    with pytest.raises(ConfigError) as info:
        load_yaml("a: &a [1, *a]\n", "t.yaml")
    assert info.value.field == "a[1]" and "refers to itself" in str(info.value)


def test_config_error_messages_show_a_bounded_value():
    nested: object = ["lol"] * 9
    for _ in range(8):
        nested = [nested] * 9  # 9 ** 9 strings if repr() expanded it
    for value in ("x" * 1_000_000, nested, {str(i): i for i in range(10_000)}):
        err = ConfigError("name", value, "must be a name")
        assert str(err).startswith("name=") and str(err).endswith(": must be a name")
        assert len(str(err)) < 400


def test_small_anchors_aliases_and_merge_keys_still_work():
    data = load_yaml("a: &g {x: 1, y: 2}\nb: {<<: *g, y: 3}\nc: [*g, *g]\n", "t.yaml")
    assert data == {"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3},
                    "c": [{"x": 1, "y": 2}, {"x": 1, "y": 2}]}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_reads_as_before(path):
    assert load_yaml_file(path) == yaml.safe_load(path.read_text(encoding="utf-8"))


# ---- names that are directories -----------------------------------------------------------
@pytest.mark.parametrize("name", [".", "..", "...", ".hidden", "../up", "a/b", "-rf", "",
                                  "x" * 101, 7, True])
def test_a_name_that_is_not_a_plain_directory_name_is_refused(name):
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(name=name), "default")
    assert_names(info.value, "name", repr(name))


@pytest.mark.parametrize("label", ["..", ".", ".x", "a/b", "../../etc"])
def test_a_policy_label_that_escapes_the_results_directory_is_refused(label):
    policies = [{"name": "vanilla", "label": label}]
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(policies=policies), "default")
    assert_names(info.value, "policies[0].label", repr(label))


def test_a_config_file_named_dot_dot_yaml_is_refused(tmp_path):
    raw = {k: v for k, v in BASE.items() if k != "name"}  # the name defaults to the file stem
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, yaml.safe_dump(raw), "..yaml"))
    assert_names(info.value, "name", "'.'")


# ---- duplicate runs -----------------------------------------------------------------------
def test_duplicate_seeds_are_refused_naming_both():
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(seeds=[0, 1, 0]), "x")
    assert_names(info.value, "seeds[2]", "0")
    assert "seeds[0]=0" in str(info.value)


@pytest.mark.parametrize("rates,first,second", [
    ([1, 2, 1.0], "request_rates[0]=1", "1.0"),
    ([0.1, 0.10000000001], "request_rates[0]=0.1", "0.10000000001"),
    ([1234567, 1234568], "request_rates[0]=1234567", "1234568"),  # both '1.23457e+06'
])
def test_rates_that_share_a_run_directory_are_refused_naming_both(rates, first, second):
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(request_rates=rates), "x")
    assert_names(info.value, "request_rates[1]" if len(rates) == 2 else "request_rates[2]",
                 second)
    assert first in str(info.value)


# ---- --set overrides ----------------------------------------------------------------------
@pytest.mark.parametrize("override,field", [
    ("cluster=", "--set cluster"), ("cluster={}", "--set cluster"),
    ("cluster=''", "--set cluster"), ("policies.0.params=", "--set policies.0.params"),
    ("workload.synthetic=", "--set workload.synthetic"),
])
def test_an_override_that_empties_a_mapping_is_refused(override, field):
    with pytest.raises(ConfigError) as info:
        apply_overrides(BASE, [override])
    assert info.value.field == field and "would drop the whole mapping" in str(info.value)


@pytest.mark.parametrize("override,field,value", [
    ("cluster.gpu={name: H100-80GB}", "--set cluster.gpu", "'A100-80GB'"),
    ("request_rates.0={rate: 2}", "--set request_rates.0", "1"),
    ("policies[0].params.batch_size={a: 1}", "--set policies.0.params.batch_size", "4"),
])
def test_an_override_that_replaces_a_scalar_with_a_mapping_is_refused(override, field, value):
    with pytest.raises(ConfigError) as info:
        apply_overrides(BASE, [override])
    assert info.value.field == field and f"replace the value {value}" in str(info.value)


def test_overrides_of_fields_that_take_a_name_or_a_mapping_still_work():
    raw = with_changes(policies=["vanilla", {"name": "glp", "params": {"predictor": "oracle"}}])
    new = apply_overrides(raw, ["policies.0={name: orca}", "policies.1.params.predictor="
                                "{kind: input_length}", "cluster.max_model_len=",
                                "policies.1.params.predictor=oracle"])
    assert new["policies"][0] == {"name": "orca"}
    assert new["policies"][1]["params"]["predictor"] == "oracle"
    assert new["cluster"]["max_model_len"] is None


def test_an_override_value_with_a_yaml_1_1_surprise_is_refused():
    with pytest.raises(ConfigError) as info:
        apply_overrides(BASE, ["policies.0.params.batch_size=010"])
    assert_names(info.value, "policies.0.params.batch_size", "'010'")


# ---- strict types: every policy's parameters, the cluster ----------------------------------
def bad_values(annotation: str) -> list[object]:
    kinds = {k.strip() for k in annotation.split("|")}
    if "int" in kinds:
        return [True, 8.0, 8.5, "8"]
    if "float" in kinds:
        return [True, "0.5", float("nan")]
    if "bool" in kinds:
        return ["yes", 1]
    if "str" in kinds:
        return [1, False]
    return []


POLICY_FIELDS = [(name, f.name, value) for name in policy_names()
                 for f in dataclasses.fields(get_policy(name).Config)
                 for value in bad_values(str(f.type))]


def test_every_policy_has_type_checked_fields():
    assert {name for name, _, _ in POLICY_FIELDS} == set(policy_names())


@pytest.mark.parametrize("policy,field,value", POLICY_FIELDS,
                         ids=[f"{p}.{f}={v!r}" for p, f, v in POLICY_FIELDS])
def test_every_policy_parameter_refuses_a_value_of_the_wrong_type(policy, field, value):
    with pytest.raises(ConfigError) as info:
        make_config(get_policy(policy), {field: value})
    assert_names(info.value, field, repr(value))
    assert "must be" in str(info.value)
    with pytest.raises(ConfigError) as info:
        PolicyEntry(policy, policy, {field: value}).resolve("policies[0]")
    assert_names(info.value, f"policies[0].params.{field}", repr(value))


@pytest.mark.parametrize("params,field,value", [
    ({"block_size": 8.0}, "block_size", "8.0"), ({"block_size": 8.5}, "block_size", "8.5"),
    ({"max_num_seqs": True}, "max_num_seqs", "True"),
    ({"enable_prefix_caching": "yes"}, "enable_prefix_caching", "'yes'"),
])
def test_policy_parameter_types_are_checked_while_the_config_is_checked(params, field, value):
    policies = [{"name": "vllm_v0", "params": params}]
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(policies=policies), "x")
    assert_names(info.value, f"policies[0].params.{field}", value)


@pytest.mark.parametrize("changes,field,value", [
    ({"num_instances": True}, "cluster.num_instances", "True"),
    ({"tensor_parallel": 2.0}, "cluster.tensor_parallel", "2.0"),
    ({"gpu_memory_utilization": True}, "cluster.gpu_memory_utilization", "True"),
    ({"max_model_len": 2048.0}, "cluster.max_model_len", "2048.0"),
    ({"model": 7}, "cluster.model", "7"),
    ({"instances": [{"gpu": "H100-80GB", "tensor_parallel": 1.5}]},
     "cluster.instances[0].tensor_parallel", "1.5"),
    ({"cost_model": {"compute_efficiency": True}}, "cluster.cost_model.compute_efficiency",
     "True"),
    ({"scheduling_overhead": {"per_request_s": "1e-4"}},
     "cluster.scheduling_overhead.per_request_s", "'1e-4'"),
])
def test_cluster_fields_refuse_a_value_of_the_wrong_type(changes, field, value):
    with pytest.raises(ConfigError) as info:
        ClusterSpec(**changes)
    assert_names(info.value, field, value)
    entry = [{"name": "vanilla", "cluster": changes}]
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(policies=entry), "x")
    assert_names(info.value, f"policies[0].{field}", value)


@pytest.mark.parametrize("annotation,value,ok", [
    ("int", 3, True), ("int", True, False), ("int", 3.0, False), ("float", 3, True),
    ("float", float("nan"), False), ("float", float("inf"), True), ("int | None", None, True),
    ("str | None", 3, False), ("tuple[int, ...]", [1, 2], True), ("list[int]", [1, True], False),
    ("tuple[int, str]", [1, "a"], True), ("tuple[int, str]", [1], False),
    ("Mapping[str, Any]", {}, True), ("Mapping[str, Any]", [], False),
    ("Literal['a', 'b']", "a", True), ("Literal['a', 'b']", "c", False),
    ("SomeDataclass | None", 3, True),  # not understood: left to the dataclass
])
def test_annotation_checks(annotation, value, ok):
    assert (type_error(annotation, value) is None) is ok


# ---- what every run needs is known up front ------------------------------------------------
def test_speculative_tokens_without_a_draft_model_fail_at_config_check():
    policies = [{"name": "vllm_v0", "params": {"num_speculative_tokens": 4}}]
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(policies=policies), "x")
    assert_names(info.value, "policies[0].params.num_speculative_tokens", "4")
    assert "draft_model" in str(info.value)
    policies[0]["cluster"] = {"draft_model": "llama-68m"}
    assert experiment_from_dict(with_changes(policies=policies), "x").policies[0].cluster


def test_a_second_entry_that_speculates_without_a_draft_is_named():
    policies = [{"name": "vllm_v0", "cluster": {"draft_model": "llama-68m"},
                 "params": {"num_speculative_tokens": 2}},
                {"name": "sarathi", "params": {"num_speculative_tokens": 2}}]
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(with_changes(policies=policies), "x")
    assert_names(info.value, "policies[1].params.num_speculative_tokens", "2")


@dataclass(frozen=True)
class _Kind:
    kind: str = "a"  # a test field

    def __post_init__(self) -> None:
        if self.kind != "a":
            raise ConfigError("inner.kind", self.kind, "unknown kind")


def test_a_nested_error_keeps_its_reason_when_the_value_contains_a_colon():
    with pytest.raises(ConfigError) as info:
        build(_Kind, "outer", {"kind": "x: y"}, "inner.")
    assert str(info.value) == "outer.kind='x: y': unknown kind"
    assert info.value.reason == "unknown kind"


# ---- the command line ---------------------------------------------------------------------
def test_cli_exits_2_naming_the_duplicate_key(tmp_path, capsys):
    path = write(tmp_path, base_text() + "policies: [orca]\n")
    assert main([str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: policies='[orca]': duplicate key 'policies'")
    assert not (tmp_path / "out").exists()

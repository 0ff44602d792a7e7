"""Every config mistake is reported before anything runs (issue 28, second round): disagg's pool
errors, a trace's timeout_s column with a policy that cannot cancel, class names the workload
does not have, and the real backend's checks that need no torch (the rest said in a note)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments import run
from experiments.config.experiment import experiment_from_dict
from experiments.config.preflight import check_cluster
from sim.cluster.spec import ClusterSpec
from sim.util.errors import ConfigError

CLUSTER = {"model": "llama-2-7b", "gpu": "A100-80GB", "num_instances": 2}
BASE = {"workload": {"synthetic": {"num_requests": 10}}, "cluster": CLUSTER,
        "request_rates": [1]}
TRACE = pd.DataFrame({"arrival_s": [0.0, 0.5, 1.0, 1.5], "prompt_tokens": [10, 20, 30, 40],
                      "output_tokens": [4, 5, 6, 7]})


@pytest.fixture
def no_runs(monkeypatch) -> None:
    """Fail the test if any simulation starts."""
    import policies.simulate

    monkeypatch.setattr(policies.simulate, "simulate",
                        lambda *a, **k: pytest.fail("a simulation started"))


def sweep(tmp_path: Path, raw: dict, capsys) -> tuple[int, str, Path]:
    """run.main on `raw`: (exit status, stderr, the results folder it was given)."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"name": "c", **raw}))
    out = tmp_path / "out"
    status = run.main([str(config), "--out", str(out), "--no-progress"])
    return status, capsys.readouterr().err, out


# ---- disagg: every pool error in the config pass ---------------------------------------------
DISAGG_CASES = [
    ({"num_prefill": 2}, "params.num_prefill"),  # no decode instance of 2
    ({"prefill_policy": "orca"}, "params.prefill_policy"),
    ({"decode_policy": "magnus"}, "params.decode_policy"),
    ({"prefill_params": {"kv_offloading_size": 4}},  # prefix caching runs there; tiers do not
     "params.prefill_params.kv_offloading_size"),
    ({"decode_params": {"enable_prefix_caching": True}},
     "params.decode_params.enable_prefix_caching"),
    ({"prefill_params": {"num_speculative_tokens": 2}},
     "params.prefill_params.num_speculative_tokens"),
    ({"decode_params": {"scheduling_policy": "priority"}},
     "params.decode_params.scheduling_policy"),
    ({"decode_params": {"preemption_mode": "swap", "swap_space": 4}},
     "params.decode_params.preemption_mode"),
    ({"prefill_params": {"bogus": 1}}, "params.prefill_params.bogus"),
    ({"decode_params": {"bogus": 1}}, "params.decode_params.bogus"),
    ({"decode_params": {"router": "nosuch"}}, "params.decode_params.router"),
    ({"decode_params": {"watermark": 2.0}}, "params.decode_params.watermark"),
    ({"prefill_params": {"block_size": 10**9}}, "params.prefill_params.block_size"),
    ({"send_recv_csv": "/nonexistent/send_recv.csv"}, "params.send_recv_csv"),
    ({"model": "no-such-model"}, "params.model"),
]


@pytest.mark.parametrize("params,field", DISAGG_CASES)
def test_each_disagg_pool_error_is_a_config_error(params, field):
    raw = {**BASE, "policies": [{"name": "disagg", "params": params}]}
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(raw, "t")
    assert err.value.field == f"policies[0].{field}", err.value


def test_disagg_on_hf_static_instances_is_refused_in_the_config_pass():
    raw = {**BASE, "cluster": {**CLUSTER, "engine": {"kind": "hf_static"}},
           "policies": ["disagg"]}
    with pytest.raises(ConfigError, match=r"policies\[0\]\.cluster\.backend=.*hf_static"):
        experiment_from_dict(raw, "t")


def test_a_disagg_pool_error_stops_the_sweep_before_it_starts(tmp_path, capsys, no_runs):
    raw = {**BASE, "policies": ["orca", {"name": "disagg",
                                         "params": {"decode_policy": "orca"}}]}
    status, err, out = sweep(tmp_path, raw, capsys)
    assert status == 2 and "policies[1].params.decode_policy='orca'" in err
    assert not out.exists()


def test_a_valid_disagg_config_still_loads():
    cfg = experiment_from_dict({**BASE, "policies": [{"name": "disagg", "params": {
        "prefill_policy": "sarathi", "decode_params": {"router": "least_kv"}}}]}, "t")
    assert cfg.policies[0].name == "disagg"


# ---- trace timeouts and policies that cannot cancel ------------------------------------------
def trace_raw(tmp_path: Path, frame: pd.DataFrame, **extra) -> dict:
    frame.to_csv(tmp_path / "t.csv", index=False)
    return {"workload": {"trace": {"path": str(tmp_path / "t.csv")}},
            "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"}, **extra}


def test_a_timeout_column_with_a_policy_that_cannot_cancel_is_refused_first(tmp_path, capsys,
                                                                           no_runs):
    frame = TRACE.assign(timeout_s=[5.0, None, 2.0, None])
    raw = trace_raw(tmp_path, frame, policies=["orca", "vanilla"])
    status, err, out = sweep(tmp_path, raw, capsys)
    assert status == 2 and "policies[1].name='vanilla': cannot cancel" in err
    assert "timeout_s column (2 of 4 rows with a finite timeout)" in err
    assert not out.exists()  # refused before the results folder, before any run


def test_a_timeout_column_with_cancelling_policies_runs(tmp_path, capsys):
    frame = TRACE.assign(timeout_s=[5.0, None, 2.0, None])
    status, err, out = sweep(tmp_path, trace_raw(tmp_path, frame, policies=["orca"]), capsys)
    assert status == 0, err


# ---- class names against the workload ---------------------------------------------------------
CLASSED = TRACE.assign(**{"class": ["chat", "batch", "chat", None]})


@pytest.mark.parametrize("extra,field", [
    ({"classes": {"chatt": {"priority": 0}}}, "classes.chatt"),
    ({"classes": {"chat": {"priority": 0}, "bacth": {"slo": {"ttft_s": 1}}}}, "classes.bacth"),
    ({"admission": {"classes": {"bach": {"max_waiting": 4}}}}, "admission.classes.bach"),
    ({"admission": {"classes": {"default": {"max_waiting": 4}}}}, "admission.classes.default"),
])
def test_a_misspelled_class_is_refused_naming_it_and_the_known_ones(tmp_path, capsys, no_runs,
                                                                   extra, field):
    raw = trace_raw(tmp_path, CLASSED, policies=["vllm"], **extra)
    status, err, out = sweep(tmp_path, raw, capsys)
    name = field.rpartition(".")[2]
    assert status == 2 and f"{field}='{name}': no request of the workload" in err
    # `default` names the requests without a class in `classes:`, never an admission scope
    known = "batch, chat" if field.startswith("admission") else "batch, chat, default"
    assert f"its classes: {known}\n" in err
    assert not out.exists()


def test_a_policy_entrys_own_classes_and_admission_are_checked(tmp_path, capsys, no_runs):
    raw = trace_raw(tmp_path, CLASSED, policies=[
        "vllm", {"name": "vllm", "label": "own", "classes": {"chta": {"timeout_s": 3}}}])
    status, err, _ = sweep(tmp_path, raw, capsys)
    assert status == 2 and "policies[1].classes.chta='chta'" in err
    raw = trace_raw(tmp_path, CLASSED, policies=[
        {"name": "vllm", "admission": {"classes": {"x": {"max_waiting": 1}}}}])
    status, err, _ = sweep(tmp_path, raw, capsys)
    assert status == 2 and "policies[0].admission.classes.x='x'" in err


def test_default_needs_requests_without_a_class(tmp_path, capsys, no_runs):
    every = TRACE.assign(**{"class": ["chat", "batch", "chat", "chat"]})
    raw = trace_raw(tmp_path, every, policies=["vllm"], classes={"default": {"priority": 1}})
    status, err, _ = sweep(tmp_path, raw, capsys)
    assert status == 2 and "classes.default='default'" in err and "its classes: batch, chat" \
        in err


def test_classes_of_generated_and_multi_client_workloads(tmp_path, capsys, no_runs):
    synthetic = {**BASE, "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
                 "policies": ["vllm"], "classes": {"interactive": {"priority": 0}}}
    status, err, _ = sweep(tmp_path, synthetic, capsys)
    assert status == 2 and "classes.interactive='interactive'" in err and "its classes: " \
        "default" in err
    clients = {"workload": {"num_requests": 10, "clients": [
        {"name": "a", "class": "interactive"}, {"name": "b", "class": "batch"}]},
        "cluster": synthetic["cluster"], "request_rates": [1], "policies": ["vllm"],
        "classes": {"interactve": {"priority": 0}}}
    status, err, _ = sweep(tmp_path, clients, capsys)
    assert status == 2 and "classes.interactve" in err and "its classes: batch, interactive" \
        in err


def test_known_classes_still_run(tmp_path, capsys):
    raw = trace_raw(tmp_path, CLASSED, policies=["vllm"],
                    classes={"chat": {"priority": 0}, "default": {"slo": {"ttft_s": 5}}},
                    admission={"classes": {"batch": {"max_waiting": 8}}})
    status, err, _ = sweep(tmp_path, raw, capsys)
    assert status == 0, err


# ---- the real backend: what can be checked without torch is, the rest is said ---------------
def real(**options) -> ClusterSpec:
    return ClusterSpec(model="llama-2-7b", backend="real", real=options)


def test_a_cpu_engine_without_a_kv_budget_is_refused(monkeypatch):
    monkeypatch.setattr("real.sizing.host_memory_bytes", lambda: 2**40)  # the model fits
    with pytest.raises(ConfigError) as err:
        check_cluster(real(device="cpu"))
    assert err.value.field == "cluster.real.kv_tokens" and "KV token budget" in str(err.value)


def test_a_missing_checkpoint_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError) as err:
        check_cluster(real(device="cuda", weights=str(tmp_path / "nothing")))
    assert err.value.field == "cluster.real.weights" and "no .safetensors" in str(err.value)
    (tmp_path / "model.bin").write_bytes(b"pickle")
    with pytest.raises(ConfigError, match="pickled"):
        check_cluster(real(device="cuda", weights=str(tmp_path)))


def test_a_checkpoint_index_naming_a_missing_shard_is_refused(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(ConfigError) as err:
        check_cluster(real(device="cuda", weights=str(tmp_path)))
    assert err.value.field == "cluster.real.weights.weight_map"
    assert err.value.value == "model-00002-of-00002.safetensors"


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    from tests.test_models_hardware import LLAMA2_7B_CONFIG

    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA2_7B_CONFIG,
                                                      "num_hidden_layers": 40}))
    with pytest.raises(ConfigError, match=r"cluster\.real\.weights=.*num_layers=40, the model "
                                          r"llama-2-7b has 32"):
        check_cluster(real(device="cuda", weights=str(tmp_path)))
    (tmp_path / "config.json").write_text(json.dumps(LLAMA2_7B_CONFIG))
    assert len(check_cluster(real(device="cuda", weights=str(tmp_path)))) == 1


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "auto"])
def test_what_needs_the_device_is_said_in_a_note(device, capsys):
    notes = check_cluster(real(device=device), "policies[0].cluster")
    err = capsys.readouterr().err
    assert len(notes) == 1 and f"real.device={device}" in notes[0]
    assert f"note: policies[0].cluster: real.device={device}: whether llama-2-7b" in err
    assert "checked when the engine is built" in err


def test_a_cpu_engine_that_fits_has_no_notes(monkeypatch):
    monkeypatch.setattr("real.sizing.host_memory_bytes", lambda: 2**40)
    assert check_cluster(real(device="cpu", kv_tokens=1024)) == []

"""Config sections that had no bad-input test of their own (issue 28, docs/bad_input.md): one
realistic bad value each is refused before anything runs, naming the field and the value; the
command lines exit 2 and write nothing. The `validate:` section and a `real:` section under
`backend: sim` were not checked (a TypeError traceback, or silently ignored) before this file."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from experiments import run
from experiments.capacity import main as capacity
from experiments.config.experiment import experiment_from_dict
from experiments.config.load import load_config
from experiments.config.preflight import check_cluster
from experiments.validate import main as validate
from experiments.validate.main import load_validation_config
from sim.util.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "configs"
BASE = {"name": "gaps", "workload": {"synthetic": {"num_requests": 5}},
        "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
        "policies": [{"name": "vllm_v0"}], "request_rates": [1], "seeds": [0]}
CLIENT = {"name": "chat", "share": 1.0}


def changed(**changes: object) -> dict:
    """BASE with top-level keys replaced (a deep copy)."""
    return copy.deepcopy({**BASE, **changes})


def assert_names(err: ConfigError, field: str, value_text: str) -> None:
    assert err.field == field, str(err)
    assert str(err).startswith(f"{field}="), str(err)
    assert value_text in str(err), str(err)


def sweep(tmp_path: Path, raw: object, capsys, *flags: str) -> tuple[int, str, Path]:
    """experiments.run on `raw` written as YAML: (status, stderr, the --out it was given)."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = tmp_path / "out"
    status = run.main([str(path), "--out", str(out), "--no-progress", *flags])
    return status, capsys.readouterr().err, out


# ---- top-level keys and workload sections without a test ---------------------------------
@pytest.mark.parametrize("raw, field, value", [
    (changed(max_requests=0), "max_requests", "0"),
    (changed(max_requests=2.5), "max_requests", "2.5"),
    (changed(duration_s="10s"), "duration_s", "'10s'"),
    (changed(seeds=[-1]), "seeds[0]", "-1"),
    (changed(seeds=[1.5]), "seeds[0]", "1.5"),
    (changed(seeds=[]), "seeds", "[]"),
    (changed(workload={"synthetic": {"num_requests": 5, "prompt": {"kind": "normal"}}}),
     "workload.synthetic.prompt.kind", "'normal'"),
    (changed(workload={"synthetic": {"num_requests": 5, "output": {"meen": 9}}}),
     "workload.synthetic.output.meen", "9"),
    (changed(workload={"synthetic": {"num_requests": 5}, "max_concurrency": 0}),
     "workload.max_concurrency", "0"),
    (changed(workload={"synthetic": {"num_requests": 5}, "num_requests": 9}),
     "workload.num_requests", "9"),
    (changed(workload={"clients": [CLIENT]}), "workload.num_requests", "None"),
    (changed(workload={"clients": [CLIENT], "duration_s": -60}), "workload.duration_s", "-60"),
    (changed(workload={"clients": CLIENT, "num_requests": 9}), "workload.clients", "'chat'"),
    (changed(workload={"clients": [{**CLIENT, "share": 0}], "num_requests": 9}),
     "workload.clients[0].share", "0"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_top_level_and_workload_values_are_named(raw, field, value):
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(raw, "x")
    assert_names(info.value, field, value)


# ---- cluster ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster, field, value", [
    (5, "cluster", "5"),
    ({"gpus": "H100-80GB"}, "cluster.gpus", "'H100-80GB'"),
    ({"backend": "gpu"}, "cluster.backend", "'gpu'"),
])
def test_cluster_shape_and_backend_are_named(cluster, field, value):
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(changed(cluster=cluster), "x")
    assert_names(info.value, field, value)


@pytest.mark.parametrize("cluster, field, value", [
    ({"kv_dtype": "fp4"}, "cluster.kv_dtype", "'fp4'"),
    ({"weight_dtype": "fp6"}, "cluster.weight_dtype", "'fp6'"),
    ({"tensor_parallel": 3}, "cluster.tensor_parallel", "3"),
    ({"real": {"dtpye": "fp32"}}, "cluster.real.dtpye", "'fp32'"),  # under backend: sim
    ({"real": {"device": "gpu0"}}, "cluster.real.device", "'gpu0'"),
])
def test_cluster_values_the_config_pass_checks_exit_2(tmp_path, capsys, cluster, field, value):
    raw = changed(cluster={**BASE["cluster"], **cluster})
    status, err, out = sweep(tmp_path, raw, capsys)
    assert status == 2 and err.startswith(f"error: {field}={value}"), err
    assert "Traceback" not in err and not out.exists()


def test_a_real_section_under_backend_sim_still_passes_when_valid():
    cfg = load_config(CONFIGS / "overhead_calibrate_tiny_cpu.yaml", ["cluster.backend=sim"])
    assert cfg.cluster.real and check_cluster(cfg.cluster) == []


# ---- a capacity search's config (experiments.capacity.main) ----------------------------------------
def test_capacity_refuses_a_trace_replayed_as_is(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,20,6\n")
    raw = changed(workload={"trace": {"path": str(trace)}}, slo={"ttft_p90_s": 1.0})
    del raw["request_rates"]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert capacity.main([str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: workload.trace.retime='none': capacity search re-times"), err
    assert not (tmp_path / "out").exists()


# ---- the config file itself, for every tool that reads one ----------------------------------
def bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00name: x\n")
    return [(tmp_path / "missing.yaml", "config file not found"),
            (folder, "config file not found"), (binary, "not UTF-8")]


@pytest.mark.parametrize("tool", ["run", "capacity", "validate"])
def test_a_config_that_is_not_a_readable_file_exits_2_naming_it(tmp_path, capsys, tool):
    main = {"run": run.main, "capacity": capacity.main, "validate": validate.main}[tool]
    for path, why in bad_files(tmp_path):
        assert main([str(path), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and why in err and str(path) in err, err
        assert "Traceback" not in err and not (tmp_path / "out").exists()


# ---- the validate: section (experiments.validate.main) -------------------------------------------
def validation_config(tmp_path: Path, section: object) -> Path:
    raw = yaml.safe_load((CONFIGS / "validate_tiny_cpu.yaml").read_text(encoding="utf-8"))
    raw["validate"] = section
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("section, field, value", [
    ({"clip_prompt_tokens": "256"}, "validate.clip_prompt_tokens", "'256'"),
    ({"clip_output_tokens": 2.5}, "validate.clip_output_tokens", "2.5"),
    ({"clip_output_tokens": 0}, "validate.clip_output_tokens", "0"),
    ({"profile": 5}, "validate.profile", "5"),
    ({"profile": {"quick": "yes"}}, "validate.profile.quick", "'yes'"),
    ({"profile": {"reps": 0}}, "validate.profile.reps", "0"),
    ({"profile": {"fast": True}}, "validate.profile", "'fast'"),
    ({"kinds": "roofline"}, "validate.kinds", "'roofline'"),
    ({"kinds": []}, "validate.kinds", "[]"),
    ({"kinds": ["stage"]}, "validate.kinds", "'stage'"),
    ({"calibration": 5}, "validate.calibration", "5"),
    ({"all_policies": "yes"}, "validate.all_policies", "'yes'"),
    ({"clip_prompt": 256}, "validate.clip_prompt", "256"),
    ([256], "validate", "[256]"),
])
def test_each_validate_field_is_checked_by_name(tmp_path, section, field, value):
    with pytest.raises(ConfigError) as info:
        load_validation_config(validation_config(tmp_path, section))
    assert_names(info.value, field, value)


def test_the_shipped_validate_sections_still_load():
    for path in sorted(CONFIGS.glob("validate*.yaml")):
        cfg, opts = load_validation_config(path)
        assert opts.kinds and isinstance(opts.kinds, tuple), path


@pytest.mark.parametrize("where", ["--calibration", "validate.calibration"])
def test_a_missing_calibration_exits_2_before_the_engine_runs(tmp_path, capsys, monkeypatch,
                                                              where):
    import experiments.config.backend

    monkeypatch.setattr(experiments.config.backend, "build_executors",
                        lambda *a, **k: pytest.fail("the engine was built"))
    missing = str(tmp_path / "calibration.json")
    section = {"calibration": missing} if where == "validate.calibration" else {}
    flags = ["--calibration", missing] if where == "--calibration" else []
    out = tmp_path / "out"
    assert validate.main([str(validation_config(tmp_path, section)), "--out", str(out),
                          *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {where}='{missing}': not a calibration file"), err
    assert not out.exists()

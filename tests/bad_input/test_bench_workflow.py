"""Bad input to the calibrate-then-predict workflow (issue 26): every new flag and key refuses a
bad value naming it, and a file of the wrong kind is named as what it is, with what was expected
(sim/util/file_kinds.py).

Before: a `bench_calibrate` output passed as `cluster.cost_model: {calibration: FILE}` failed
with "calibration file FILE has no 'model' section", and a benchmark result given anywhere else
failed on whichever key the reader missed first.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from experiments.bench.synth import main as synth_main
from experiments.run import main as run_main
from sim.cluster.frontend_run import cluster_frontend_s
from sim.cluster.spec import ClusterSpec, build_executors
from sim.hardware.gpu_file import resolve_gpu
from sim.models.catalog import resolve_model
from sim.util.errors import ConfigError, TraceError
from traces.bench_results import read_bench_result
from traces.registry import load_trace

SMALL_BENCH = {"request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
               "input_lens": [100, 200], "output_lens": [5, 6], "ttfts": [0.05, 0.06],
               "itls": [[0.02] * 4, [0.02] * 5], "errors": ["", ""],
               "start_times": [10.0, 10.5]}  # a 2-request detailed vLLM result


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def calibration(model: str = "llama-2-7b", gpu: str = "A100-80GB", **cost: Any) -> dict:
    """A servesim calibrate file's layout, with `cost` as its fitted options."""
    return {"format": "servesim.calibration", "version": 1,
            "model": dataclasses.asdict(resolve_model(model)),
            "device": dataclasses.asdict(resolve_gpu(gpu)), "tensor_parallel": 1,
            "roofline": {}, "cluster": {"model": model, "gpu": gpu, "tensor_parallel": 1},
            "cost_model": {"kind": "stage", "cpu_step_s": 4e-3, **cost},
            "policy": "vllm", "policy_params": {}}


@pytest.mark.parametrize("value", [-0.01, "20ms", True, float("inf"), 1e5, None])
def test_frontend_s_names_the_field(value) -> None:
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(cost_model={"kind": "stage", "frontend_s": value}))
    assert err.value.field == "cluster.cost_model.frontend_s"


def test_frontend_s_only_on_the_cost_models() -> None:
    with pytest.raises(ConfigError, match="frontend_s"):
        cluster_frontend_s(ClusterSpec(backend="real", cost_model={"frontend_s": 0.01}))


def test_a_bench_result_as_a_calibration_says_what_it_is(tmp_path) -> None:
    bench = write(tmp_path, "bench.json", SMALL_BENCH)
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(cost_model={"calibration": str(bench)}))
    text = str(err.value)
    assert str(bench) in text and "detailed serving benchmark result" in text
    assert "expected a calibration file: `servesim calibrate" in text


@pytest.mark.parametrize("data, what", [
    ({"engine": "x", "decode": [], "prefill": {}, "gpu": "H100"}, "real-engine benchmark"),
    ({"format": "servesim.bench_calibration", "version": 1, "cost_model": {}}, "older"),
    ({"backend": "servesim-sim", "mean_ttft_ms": 3.0}, "servesim's own bench.json"),
])
def test_other_files_as_a_calibration_say_what_they_are(tmp_path, data, what) -> None:
    path = write(tmp_path, "f.json", data)
    with pytest.raises(ConfigError, match=what):
        build_executors(ClusterSpec(cost_model={"calibration": str(path)}))


@pytest.mark.parametrize("data, what", [
    (calibration(), "a calibration file"),
    ({"backend": "vllm", "request_throughput": 2.0, "mean_ttft_ms": 50.0},
     "without per-request lists"),
    ({"backend": "servesim-sim", "mean_ttft_ms": 3.0}, "servesim's own bench.json"),
])
def test_other_files_as_a_workload_say_what_they_are(tmp_path, data, what) -> None:
    path = write(tmp_path, "f.json", data)
    with pytest.raises(TraceError) as err:
        read_bench_result(path)
    assert what in str(err.value) and "expected a detailed serving benchmark" in str(err.value)
    with pytest.raises(TraceError, match=what):
        load_trace(path, "vllm_bench")


def test_a_calibration_for_another_deployment_names_both(tmp_path) -> None:
    cal = write(tmp_path, "cal.json", calibration())
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(gpu="H100-80GB", cost_model={"calibration": str(cal)}))
    assert "fitted for llama-2-7b on A100-80GB" in str(err.value)
    assert "H100-80GB" in str(err.value) and err.value.field == "cluster.cost_model.calibration"


@pytest.mark.parametrize("options, field", [
    ({"cpu_step_s": 1e-3}, "cluster.cost_model.cpu_step_s"),  # the file holds the options
    ({"kind": "learned"}, "cluster.cost_model.kind"),  # a real.calibrate kind: no learned model
    ({"frontend_s": -1}, "cluster.cost_model.frontend_s"),
])
def test_keys_beside_a_bench_calibration(tmp_path, options, field) -> None:
    cal = write(tmp_path, "cal.json", calibration())
    with pytest.raises(ConfigError) as err:
        spec = ClusterSpec(cost_model={"calibration": str(cal), **options})
        build_executors(spec)
        cluster_frontend_s(spec)
    assert err.value.field == field


def test_a_bad_fitted_section_names_the_file(tmp_path) -> None:
    data = calibration()
    data["cost_model"] = ["kind", "stage"]
    cal = write(tmp_path, "cal.json", data)
    with pytest.raises(ConfigError, match=str(cal)):
        build_executors(ClusterSpec(cost_model={"calibration": str(cal)}))


def test_the_calibration_frontend_reaches_the_run(tmp_path) -> None:
    cal = write(tmp_path, "cal.json", calibration(frontend_s=0.02))
    assert cluster_frontend_s(ClusterSpec(cost_model={"calibration": str(cal)})) == 0.02
    own = ClusterSpec(cost_model={"calibration": str(cal), "frontend_s": 0.0})
    assert cluster_frontend_s(own) == 0.0  # the cluster's own key first


@pytest.mark.parametrize("argv, message", [
    ([], "a CONFIG file is required (or --list, or --workload BENCH.json)"),
    (["--workload", "{tmp}/none.json"], "no such benchmark result file"),
    (["--workload", "{tmp}/cal.json"], "is a calibration file"),
    (["--workload", "{tmp}/bench.json", "--calibration", "{tmp}/none.json"],
     "not a calibration file: no such file"),
    (["--workload", "{tmp}/bench.json", "--calibration", "{tmp}/bench.json"],
     "is a detailed serving benchmark result"),
    (["--workload", "{tmp}/bench.json", "--request-rate", "0"], "--request-rate"),
    (["--workload", "{tmp}/bench.json", "--request-rate", "2", "--burstiness", "-1"],
     "--burstiness"),
    (["CONFIG.yaml", "--workload", "{tmp}/bench.json", "--capacity"], "not with --capacity"),
])
def test_run_flags_name_the_bad_value(tmp_path, capsys, argv, message) -> None:
    write(tmp_path, "bench.json", SMALL_BENCH)
    write(tmp_path, "cal.json", calibration())
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        rc = run_main([*argv, "--out", str(tmp_path / "out"), "--no-progress"])
    except SystemExit as exc:  # argparse's error
        rc = exc.code
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "summary.csv").exists()


@pytest.mark.parametrize("argv, message", [
    (["--rate", "0"], "--rate"), (["--num-prompts", "1"], "--num-prompts")])
def test_bench_synth_names_the_bad_value(tmp_path, capsys, argv, message) -> None:
    assert synth_main([*argv, "--out", str(tmp_path / "b.json")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "b.json").exists()


def test_calibrate_refuses_a_calibration_file(tmp_path, capsys) -> None:
    from experiments.bench.calibrate import main as calibrate_main

    cal = write(tmp_path, "cal.json", calibration())
    assert calibrate_main([str(cal), "--out", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "is a calibration file" in err and not (tmp_path / "out.json").exists()


def test_calibrate_names_an_out_it_cannot_write(tmp_path, capsys) -> None:
    from experiments.bench.calibrate import main as calibrate_main

    bench = write(tmp_path, "bench.json", SMALL_BENCH)
    (tmp_path / "folder").mkdir()
    assert calibrate_main([str(bench), "--out", str(tmp_path / "folder"),
                           "--max-evals", "3"]) == 2
    assert f"--out={tmp_path / 'folder'}: cannot write" in capsys.readouterr().err


def test_retime_vllm_keys_name_the_field() -> None:
    from experiments.config.workload import trace_from_dict
    from traces.bench_arrivals import vllm_retime

    with pytest.raises(ConfigError, match="only with retime: gamma or vllm") as err:
        trace_from_dict({"path": "b.json", "burstiness": 2.0})
    assert err.value.field == "workload.trace.burstiness"
    with pytest.raises(ConfigError) as err:
        trace_from_dict({"path": "b.json", "retime": "vllm", "burstiness": 0})
    assert err.value.field == "workload.trace.burstiness"
    with pytest.raises(TraceError, match="rate_per_s"):
        vllm_retime(load_trace_df(), 0.0, 0)


def load_trace_df() -> Any:
    import pandas as pd

    return pd.DataFrame({"arrival_s": [0.0, 0.0], "prompt_tokens": [5, 6],
                         "output_tokens": [2, 3]})

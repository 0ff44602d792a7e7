"""Calibrate-then-predict on one serving benchmark (issue 26): `servesim calibrate BENCH.json`
writes a calibration file that `cluster.cost_model: {calibration: FILE}` takes as it is, and
`servesim run --calibration FILE --workload BENCH.json` replays the benchmark's own requests.

The benchmark is synthetic (experiments/bench/synth.py): the simulator itself with GEMMs and
decode attention slower than the calibrated model knows, host work of its own, and a frontend
latency that grows with the prompt and jitters per request, none of which the fit can represent
exactly. It shows the workflow and what its terms can absorb, not accuracy on a real server.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from experiments.bench.synth import synth_result
from experiments.cli import main as servesim
from policies.registry import policy_factory
from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.frontend import add_frontend
from sim.engine.simulate import run_simulation
from sim.fit.bench_fit import fit_bench
from sim.fit.bench_metrics import error_table, measured_table, simulated_table
from traces.bench_results import read_bench_result
from traces.registry import infer_format, load_trace

RATE = 4.0  # req/s of the benchmark
LIMIT = 0.10  # the must-show: |error| of the mean and p50 of TTFT and TPOT at most 10%
TAIL_LIMIT = 0.15  # ... of their p99 (a handful of requests: -7.4% TTFT here, docs/fidelity.md)


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """bench.json (400 requests at 4 req/s), its calibration, and both runs' output."""
    root = tmp_path_factory.mktemp("workflow")
    bench = root / "bench.json"
    bench.write_text(json.dumps(synth_result(RATE, 400, seed=0)))
    cal = root / "cal.json"
    assert servesim(["calibrate", str(bench), "--out", str(cal)]) == 0
    own = root / "own"
    assert servesim(["run", "--calibration", str(cal), "--workload", str(bench),
                     "--out", str(own), "--no-progress"]) == 0
    pred = root / "pred"
    assert servesim(["run", "--calibration", str(cal), "--workload", str(bench),
                     "--request-rate", "8", "--out", str(pred), "--no-progress"]) == 0
    return {"bench": bench, "cal": cal, "own": own, "pred": pred}


def run_errors(bench: Path, out: Path) -> dict[str, dict[str, float]]:
    """The run's distributions against the benchmark's (simulated / measured - 1)."""
    result = read_bench_result(bench)
    run = next((out / "runs").iterdir())
    simulated = simulated_table(pd.read_parquet(run / "records.parquet"),
                                json.loads((run / "summary.json").read_text()))
    return error_table(measured_table(result.trace, result.itls["gap_s"].to_numpy()),
                       simulated)


def test_calibrate_then_run_meets_the_bench_at_its_own_rate(workflow, capsys) -> None:
    errors = run_errors(workflow["bench"], workflow["own"])
    for metric in ("ttft", "tpot"):
        for stat, err in errors[metric].items():
            assert abs(err) <= (TAIL_LIMIT if stat == "p99" else LIMIT), (metric, stat, err)
    data = json.loads(workflow["cal"].read_text())
    metrics = data["metrics"][0]
    assert metrics["before"]["ttft"]["mean"] < -0.3  # uncalibrated: TTFT far too short
    assert abs(metrics["after"]["ttft"]["mean"]) < LIMIT
    assert 0.005 < data["cost_model"]["frontend_s"] < 0.05  # the server's is 15 ms + per token


def test_the_calibration_is_a_calibration_file(workflow) -> None:
    data = json.loads(workflow["cal"].read_text())
    assert {"model", "device", "roofline", "cost_model"} <= set(data)
    assert data["cluster"] == {"model": "llama-2-7b", "gpu": "A100-80GB", "tensor_parallel": 1}
    fitted = build_executors(ClusterSpec(cost_model={"calibration": str(workflow["cal"])}))
    direct = build_executors(ClusterSpec(cost_model={k: v for k, v in data["cost_model"].items()
                                                     if k != "frontend_s"}))
    assert fitted[0].cost_model.params == direct[0].cost_model.params


def test_a_prediction_at_another_rate_is_printed(workflow) -> None:
    table = (workflow["pred"] / "table.txt").read_text()
    assert "8" in table.splitlines()[2]  # the run at 8 req/s
    config = json.loads((workflow["pred"] / "config.json").read_text())
    trace = config["workload"]["trace"]
    assert trace["retime"] == "vllm" and trace["burstiness"] == 1.0
    assert config["request_rates"] == [8.0]


def test_the_run_prints_its_comparison(tmp_path, workflow, capsys) -> None:
    assert servesim(["run", "--calibration", str(workflow["cal"]), "--workload",
                     str(workflow["bench"]), "--out", str(workflow["own"]),
                     "--no-progress"]) == 0  # reused: the comparison is printed again
    out = capsys.readouterr().out
    assert "its measured send times (start_times)" in out
    assert "simulated vs measured" in out and "TTFT" in out and "ITL" in out


def test_the_bench_file_is_a_trace_format(workflow) -> None:
    assert infer_format(workflow["bench"]) == "vllm_bench"
    df = load_trace(workflow["bench"])
    assert len(df) == 400 and df["arrival_s"].is_monotonic_increasing
    assert "start_times" in df.attrs["bench"]


def test_seeded_arrivals_are_said(tmp_path) -> None:
    bench = tmp_path / "old.json"
    bench.write_text(json.dumps(synth_result(RATE, 20, seed=1, start_times=False)))
    assert "redrawn as the benchmark tool draws them" in load_trace(bench).attrs["bench"]


def test_frontend_adds_to_ttft_and_latency_only() -> None:
    trace = pd.DataFrame({"arrival_s": [0.0, 0.5], "prompt_tokens": [100, 300],
                          "output_tokens": [20, 30]})
    cluster = ClusterSpec()
    base = run_simulation(trace, policy_factory("vllm", None), build_executors(cluster))
    front = run_simulation(trace, policy_factory("vllm", None), build_executors(cluster),
                           frontend_s=0.02)
    assert (front.records["ttft_s"] - base.records["ttft_s"]).tolist() == pytest.approx([0.02] * 2)
    assert (front.records["e2e_s"] - base.records["e2e_s"]).tolist() == pytest.approx([0.02] * 2)
    assert front.records["tpot_s"].tolist() == pytest.approx(base.records["tpot_s"].tolist())
    assert front.summary["mean_ttft_s"] == pytest.approx(base.summary["mean_ttft_s"] + 0.02)
    assert add_frontend(base.records, 0.0) is base.records


def test_the_frontend_alone_is_fitted_in_one_simulation() -> None:
    result = read_bench_result_from(synth_result(RATE, 40, seed=2))
    fit = fit_bench([result.trace], ClusterSpec(), policy_factory("vllm", None),
                    fit=["frontend_s"], max_evaluations=1)
    assert fit.num_evaluations == 3 and 0 < fit.overrides["frontend_s"] < 1
    assert math.isfinite(fit.after.ttft_bias)


def read_bench_result_from(data: dict[str, Any]) -> Any:
    from traces.bench_results import parse_bench_result

    return parse_bench_result(data, "synthetic")


def test_retime_vllm_sends_as_vllm_bench_serve() -> None:
    from traces.bench_arrivals import send_schedule, vllm_retime

    base = pd.DataFrame({"arrival_s": [0.0] * 50, "prompt_tokens": [10] * 50,
                         "output_tokens": [5] * 50})
    sent = vllm_retime(base, 8.0, 3, burstiness=0.5)["arrival_s"].to_numpy()
    assert sent[-1] == pytest.approx(50 / 8.0)  # the last send at n / rate, as vLLM's
    assert sent.tolist() == pytest.approx(send_schedule("vllm", 50, 8.0, 0.5, 3).tolist())

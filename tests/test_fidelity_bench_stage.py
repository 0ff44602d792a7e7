"""Calibrating the STAGE model's host terms from a serving benchmark (sim/fit/bench_fit.py with
`cluster.cost_model: {kind: stage}`, experiments/bench/calibrate.py --cost-model stage).

Result files are generated with KNOWN cpu_step_s / cpu_per_seq_s: the requests are simulated
with the stage model under those overrides and written in vLLM's detailed layout; the fit must
recover them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from experiments.bench.calibrate import main as calibrate_main
from policies.registry import policy_factory
from sim.cluster.spec import ClusterSpec, build_executors
from sim.cost.gpu_params import A100_80GB_PARAMS
from sim.fit.bench_fit import FIT_PARAMS, fit_bench
from sim.fit.bench_params import STAGE_FIT_PARAMS, fit_space
from sim.fit.bench_replay import replay
from sim.util.errors import ConfigError
from traces.bench_results import read_bench_result, send_schedule

VLLM = policy_factory("vllm_v0", None)  # the simulated server's policy
KNOWN = {"cpu_step_s": 0.004, "cpu_per_seq_s": 0.00003}  # seconds: host work a step exposes
SERIAL = {"cpu_overlapped": False}  # ... after its GPU work (what the fit models)
STAGE = ClusterSpec(cost_model={"kind": "stage"})  # llama-2-7b on one A100-80GB


def result(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
           rate: float | str) -> dict[str, Any]:
    """A vLLM detailed result of the requests served by the stage model with KNOWN."""
    trace = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output})
    rec = replay(trace, STAGE, VLLM, {**SERIAL, **KNOWN})
    return {"backend": "vllm_v0", "request_rate": rate, "burstiness": 1.0, "max_concurrency": None,
            "completed": len(prompt), "failed": 0,
            "input_lens": [int(p) for p in prompt], "output_lens": [int(o) for o in output],
            "ttfts": rec["ttft_s"].tolist(),
            "itls": [[float(t)] * (int(n) - 1) for t, n in zip(rec["tpot_s"].fillna(0.0),
                                                                output)],
            "generated_texts": [""] * len(prompt), "errors": [""] * len(prompt)}


def files(tmp_path: Path) -> list[str]:
    """A light run (0.5 req/s) and a heavy one (64 at once): varied batch sizes."""
    rng = np.random.default_rng(1)
    light = result(send_schedule("vllm_v0", 30, 0.5, 1.0, 0), rng.integers(20, 1500, 30),
                   rng.integers(2, 200, 30), 0.5)
    heavy = result(np.zeros(64), rng.integers(20, 1500, 64), rng.integers(100, 200, 64), "inf")
    out = []
    for name, data in (("light.json", light), ("heavy.json", heavy)):
        (tmp_path / name).write_text(json.dumps(data))
        out.append(str(tmp_path / name))
    return out


def test_fit_space_per_kind() -> None:
    roof = fit_space(ClusterSpec(cost_model={"kind": "roofline"}))
    assert roof.family == "roofline" and roof.table is FIT_PARAMS
    assert fit_space(ClusterSpec()).family == "stage"  # the default cost model
    stage = fit_space(STAGE)
    assert stage.family == "stage" and set(stage.table) == set(STAGE_FIT_PARAMS)
    default = build_executors(STAGE)[0].cost_model.params  # the GPU's set, today's host preset
    assert stage.start["cpu_step_s"] == default.cpu_step_s != A100_80GB_PARAMS.cpu_step_s
    assert stage.default_fit == ("cpu_step_s", "cpu_per_seq_s", "frontend_s")
    over = fit_space(ClusterSpec(cost_model={"kind": "stage", "cpu_step_s": 1e-3}))
    assert over.start["cpu_step_s"] == 1e-3


def test_stage_fit_recovers_known_host_terms(tmp_path: Path) -> None:
    traces = [read_bench_result(f).trace for f in files(tmp_path)]
    fit = fit_bench(traces, STAGE, VLLM, max_evaluations=24)
    assert set(fit.overrides) == set(KNOWN) | set(SERIAL) | {"frontend_s"}
    assert not fit.overrides["cpu_overlapped"] and fit.overrides["frontend_s"] < 2e-3
    for key, value in KNOWN.items():
        assert fit.overrides[key] == pytest.approx(value, rel=0.03), key
    assert fit.before.tpot_bias < -0.05  # the guessed host terms are too small for this engine
    assert abs(fit.after.tpot_bias) < 0.02 and fit.after.tpot_median_abs < 0.02


def test_stage_fit_rejects_roofline_fields(tmp_path: Path) -> None:
    trace = read_bench_result(files(tmp_path)[0]).trace
    with pytest.raises(ConfigError, match="fit"):
        fit_bench(trace, STAGE, VLLM, fit=["step_overhead_s"])
    with pytest.raises(ConfigError, match="fit"):
        fit_bench(trace, ClusterSpec(cost_model={"kind": "roofline"}), VLLM, fit=["cpu_step_s"])


def test_cli_writes_a_stage_cost_model(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "cal.json"
    assert calibrate_main([*files(tmp_path), "--cost-model", "stage", "--policy", "vllm_v0", "--max-evals", "16",
                           "--out", str(out)]) == 0
    assert "cost_model:" in capsys.readouterr().out
    data = json.loads(out.read_text())
    cost_model = data["cost_model"]
    assert cost_model["kind"] == "stage"
    assert set(cost_model) == {"kind", *KNOWN, *SERIAL, "frontend_s"}
    assert cost_model["frontend_s"] < 2e-3  # the files have no frontend latency
    for key, value in KNOWN.items():
        assert cost_model[key] == pytest.approx(value, rel=0.05), key
    assert data["after"]["tpot_median_abs"] < data["before"]["tpot_median_abs"]
    ex = build_executors(ClusterSpec(cost_model=cost_model))  # usable as cluster.cost_model
    assert ex[0].cost_model.params.cpu_step_s == cost_model["cpu_step_s"]


def test_cli_stage_params_only_with_stage(tmp_path: Path, capsys: Any) -> None:
    light = files(tmp_path)[0]
    assert calibrate_main([light, "--cost-model", "roofline", "--stage-params", "p.json"]) == 2
    assert "--stage-params" in capsys.readouterr().err
    assert calibrate_main([light, "--cost-model", "stage", "--stage-params",
                           str(tmp_path / "none.json")]) == 2
    assert "cluster.cost_model.params" in capsys.readouterr().err

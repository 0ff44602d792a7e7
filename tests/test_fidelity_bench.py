"""Calibration from a serving benchmark's detailed result (traces/bench_results.py,
sim/fit/bench_replay.py, sim/fit/bench_fit.py, experiments/bench/calibrate.py).

Result files are generated here with KNOWN cost-model overheads: the requests are simulated
with them and written in vLLM's (`vllm bench serve --save-result --save-detailed`) or SGLang's
(`bench_serving --output-details`, JSON lines) layout, each request's decode time split into
equal inter-token gaps; the fit must recover the overheads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from experiments.bench.calibrate import main as calibrate_main
from policies.registry import policy_factory
from sim.cluster.spec import ClusterSpec, build_executors
from sim.fit.bench_fit import FIT_PARAMS, fit_bench
from sim.fit.bench_replay import error_stats, replay
from sim.util.errors import ConfigError, TraceError
from traces.bench_results import (concurrency_replay, parse_bench_result, read_bench_result,
                                  send_schedule)

VLLM = policy_factory("vllm_v0", None)  # the simulated server's policy
KNOWN = {"step_overhead_s": 0.005, "per_seq_overhead_s": 0.00015}  # seconds
CLUSTER = ClusterSpec(cost_model={"kind": "roofline"})  # llama-2-7b on one A100-80GB


def lengths(n: int, seed: int, out: tuple[int, int] = (2, 200)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(20, 1500, n), rng.integers(out[0], out[1], n)


def measured(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
             overrides: dict[str, float]) -> pd.DataFrame:
    """Simulated records of the requests under `overrides` (the "server")."""
    trace = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt,
                          "output_tokens": output})
    return replay(trace, CLUSTER, VLLM, overrides)


def vllm_result(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                overrides: dict[str, float], *, rate: float | str,
                start_times: bool = True) -> dict[str, Any]:
    """A vLLM detailed result dict of the requests served with `overrides`."""
    rec = measured(arrival, prompt, output, overrides)
    ttfts = rec["ttft_s"].tolist()
    itls = [[float(t)] * (int(n) - 1) for t, n in zip(rec["tpot_s"].fillna(0.0), output)]
    data: dict[str, Any] = {
        "date": "20261123-120000", "endpoint_type": "vllm_v0", "backend": "vllm_v0", "label": None,
        "model_id": "meta-llama/Llama-2-7b-hf", "num_prompts": len(prompt),
        "request_rate": rate, "burstiness": 1.0, "max_concurrency": None,
        "duration": float(rec["finish_s"].max()), "completed": len(prompt), "failed": 0,
        "input_lens": [int(p) for p in prompt], "output_lens": [int(o) for o in output],
        "ttfts": ttfts, "itls": itls, "generated_texts": [""] * len(prompt),
        "errors": [""] * len(prompt),
        "mean_ttft_ms": float(np.mean(ttfts)) * 1e3,
    }
    if start_times:
        data["start_times"] = [1000.0 + float(a) for a in arrival]  # perf_counter-like
    return data


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def two_runs(overrides: dict[str, float]) -> list[dict[str, Any]]:
    """A light run (0.5 req/s: batches of 1-2) and a heavy one (64 sent at once)."""
    p1, o1 = lengths(30, 1)
    light = vllm_result(send_schedule("vllm_v0", 30, 0.5, 1.0, 0), p1, o1, overrides, rate=0.5,
                        start_times=False)
    p2, o2 = lengths(64, 2, (100, 200))
    heavy = vllm_result(np.zeros(64), p2, o2, overrides, rate="inf", start_times=False)
    return [light, heavy]


def test_fit_recovers_known_overheads(tmp_path: Path) -> None:
    results = [read_bench_result(write(tmp_path, f"r{i}.json", d))
               for i, d in enumerate(two_runs(KNOWN))]
    assert [r.arrivals for r in results] == ["seeded", "all_at_zero"]
    fit = fit_bench([r.trace for r in results], CLUSTER, VLLM, max_evaluations=24)
    for key, value in KNOWN.items():
        assert fit.overrides[key] == pytest.approx(value, rel=0.03), key
    assert fit.before.tpot_bias < -0.2  # the default overheads are far too small
    assert abs(fit.after.tpot_bias) < 0.02 and fit.after.tpot_median_abs < 0.02
    assert fit.after.ttft_median_abs < fit.before.ttft_median_abs
    assert fit.num_evaluations <= 24 + 2


def test_measured_start_times_are_the_arrivals(tmp_path: Path) -> None:
    prompt, output = lengths(20, 3)
    arrival = np.sort(np.random.default_rng(3).uniform(0, 10, 20))
    result = read_bench_result(write(tmp_path, "r.json", vllm_result(
        arrival, prompt, output, KNOWN, rate=2.0)))
    assert result.arrivals == "measured" and result.format == "vllm"
    assert result.trace["arrival_s"].to_numpy() == pytest.approx(arrival - arrival[0])
    # with the known overheads the replay reproduces the measurements
    stats = error_stats(result.trace, replay(result.trace, CLUSTER, VLLM, KNOWN))
    assert stats.tpot_median_abs < 1e-9 and stats.ttft_median_abs < 1e-9


def test_seeded_schedule_follows_vllm_semantics() -> None:
    times = send_schedule("vllm_v0", 50, 4.0, 1.0, 0)
    assert times[-1] == pytest.approx(50 / 4.0)  # vLLM rescales the last send to n / rate
    assert times[0] > 0 and np.all(np.diff(times) >= 0)
    assert np.allclose(send_schedule("vllm_v0", 50, 4.0, 1.0, 0), times)  # seeded
    even = send_schedule("vllm_v0", 4, 2.0, math.inf, 0)
    assert even == pytest.approx([0.5, 1.0, 1.5, 2.0])
    sg = send_schedule("sglang", 5, 2.0, 1.0, 1)
    assert sg[0] == 0.0 and sg.size == 5


def test_ramp_up_and_concurrency_rebuild_arrivals(tmp_path: Path) -> None:
    prompt, output = lengths(40, 7)
    data = vllm_result(np.zeros(40), prompt, output, KNOWN, rate="inf", start_times=False)
    data.update(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=20)
    gaps = np.diff(read_bench_result(write(tmp_path, "ramp.json", data)).trace["arrival_s"])
    assert gaps[:10].mean() > 3 * gaps[-10:].mean()  # the rate rises 20-fold
    data = vllm_result(np.zeros(40), prompt, output, KNOWN, rate="inf", start_times=False)
    data["max_concurrency"] = 4
    result = read_bench_result(write(tmp_path, "conc.json", data))
    arrival = result.trace.sort_values("bench_index")["arrival_s"].to_numpy()
    assert (arrival[:4] == 0).all() and (arrival[4:] > 0).all()


def test_concurrency_replay_is_a_fifo_semaphore() -> None:
    sent = concurrency_replay(np.zeros(4), np.array([3.0, 1.0, 2.0, 1.0]), 2)
    # slots free at 1 (request 1) then 3 (request 0 and request 2 end at 3 together)
    assert sent.tolist() == [0.0, 0.0, 1.0, 3.0]


def test_failed_requests_are_left_out(tmp_path: Path) -> None:
    prompt, output = lengths(10, 4)
    data = vllm_result(np.arange(10.0), prompt, output, KNOWN, rate=1.0)
    data["errors"][3] = "Traceback: ClientConnectorError"
    data["output_lens"][3], data["ttfts"][3], data["itls"][3] = 0, 0.0, []
    result = read_bench_result(write(tmp_path, "r.json", data))
    assert result.num_failed == 1 and len(result.trace) == 9
    assert 3 not in set(result.trace["bench_index"])


def test_sglang_jsonl_parses(tmp_path: Path) -> None:
    prompt, output = lengths(12, 5)
    data = vllm_result(np.zeros(12), prompt, output, KNOWN, rate=4.0, start_times=False)
    for key in ("date", "endpoint_type", "label", "model_id", "num_prompts", "burstiness",
                "start_times"):
        data.pop(key, None)
    data.update({"backend": "sglang", "dataset_name": "random", "random_input_len": 1024,
                 "total_output_tokens_retokenized": int(output.sum())})
    first = dict(data, input_lens=data["input_lens"][:2], output_lens=data["output_lens"][:2],
                 ttfts=data["ttfts"][:2], itls=data["itls"][:2], errors=["", ""])
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(data) + "\n")
    result = read_bench_result(path)  # the last run of the file
    assert result.format == "sglang" and len(result.trace) == 12
    assert result.arrivals == "seeded" and result.trace["arrival_s"].iloc[0] == 0.0
    expected = send_schedule("sglang", 12, 4.0, 1.0, 1)  # SGLang's default --seed 1
    assert result.trace["arrival_s"].to_numpy() == pytest.approx(expected)
    assert len(read_bench_result(path, run=0).trace) == 2


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.pop("ttfts"), "ttfts"),
    (lambda d: d.pop("itls"), "itls"),
    (lambda d: d.update(itls=d["itls"][:-1]), "itls"),
    (lambda d: d["output_lens"].__setitem__(2, "many"), "output_lens"),
    (lambda d: d["ttfts"].__setitem__(1, -0.5), "ttfts"),
    (lambda d: d["itls"].__setitem__(0, [0.01, None]), "itls"),
    (lambda d: d.update(request_rate=-1), "request_rate"),
    (lambda d: d.update(max_concurrency=0), "max_concurrency"),
    (lambda d: d.update(burstiness=0), "burstiness"),
    (lambda d: d.update(ramp_up_strategy="sine", ramp_up_start_rps=1, ramp_up_end_rps=4),
     "ramp_up_strategy"),
    (lambda d: d.update(start_times="soon"), None),
])
def test_malformed_file_names_the_key(tmp_path: Path, edit: Any, key: str | None) -> None:
    prompt, output = lengths(5, 6)
    data = vllm_result(np.arange(5.0), prompt, output, KNOWN, rate=1.0)
    edit(data)
    path = write(tmp_path, "bad.json", data)
    if key is None:  # a non-list start_times is ignored: arrivals are rebuilt
        assert read_bench_result(path).arrivals == "seeded"
        return
    with pytest.raises(TraceError) as info:
        read_bench_result(path)
    assert info.value.field == key and repr(key) in str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such"):
        read_bench_result(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json\n")
    with pytest.raises(TraceError, match="not JSON"):
        read_bench_result(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(TraceError, match="JSON object"):
        read_bench_result(bad)


def test_fit_rejects_bad_arguments() -> None:
    trace = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [3],
                          "measured_ttft_s": [0.05], "measured_tpot_s": [0.02]})
    with pytest.raises(ConfigError, match="fit"):
        fit_bench(trace, CLUSTER, VLLM, fit=["activation_bytes_factor"])
    with pytest.raises(ConfigError, match="max_evaluations"):
        fit_bench(trace, CLUSTER, VLLM, max_evaluations=2)
    with pytest.raises(ConfigError, match="make_policy"):  # sim/ resolves no policy names
        fit_bench(trace, CLUSTER, "vllm_v0")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="measured_ttft_s"):
        fit_bench(trace.drop(columns="measured_ttft_s"), CLUSTER, VLLM)
    assert set(FIT_PARAMS) == {"step_overhead_s", "per_seq_overhead_s", "compute_efficiency",
                               "memory_efficiency"}


def test_cli_writes_a_usable_calibration(tmp_path: Path, capsys: Any) -> None:
    light, heavy = two_runs(KNOWN)
    files = [str(write(tmp_path, "light.json", light)), str(write(tmp_path, "heavy.json", heavy))]
    out = tmp_path / "cal.json"
    assert calibrate_main([*files, "--model", "llama-2-7b", "--gpu", "A100-80GB", "--policy", "vllm_v0",
                           "--cost-model", "roofline", "--max-evals", "12", "--out",
                           str(out)]) == 0
    text = capsys.readouterr().out
    assert "before" in text and "after" in text and "cost_model:" in text
    data = json.loads(out.read_text())
    assert data["format"] == "servesim.calibration" and len(data["runs"]) == 2
    assert set(data["cost_model"]) - {"kind"} == {"step_overhead_s", "per_seq_overhead_s",
                                                  "frontend_s"}
    assert data["cost_model"]["frontend_s"] < 2e-3  # the files have no frontend latency
    assert data["after"]["tpot_median_abs"] < data["before"]["tpot_median_abs"]
    build_executors(ClusterSpec(cost_model=data["cost_model"]))  # usable as cluster.cost_model
    build_executors(ClusterSpec(cost_model={"calibration": str(out)}))  # ... and as a file
    assert calibrate_main([str(tmp_path / "none.json")]) == 2

"""vLLM benchmark conventions (experiments/bench/vllm_bench.py): names, units, percentiles, std,
goodput against hand-computed values, and bench.json's exact key set."""

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.bench.peaks import peak_buckets
from experiments.bench.vllm_bench import (BenchOptions, bench_keys, bench_result, latency_stats,
                                    parse_options)
from experiments.run import main as run_main
from experiments.run import parse_args
from sim.metrics.summary import weighted_std
from sim.util.errors import ConfigError

# vLLM's `vllm bench serve --save-result` keys (vllm/benchmarks/serve.py @ def9ce85ba10) for
# --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99, copied from its code
VLLM_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests",
    *[f"{stat}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
      for stat in ("mean", "median", "std", "p50", "p90", "p99")],
]

# three completed requests and one rejected; latencies in seconds
RECORDS = pd.DataFrame({
    "status": ["finished", "finished", "finished", "rejected"],
    "arrival_s": [0.0, 0.5, 1.0, 1.5],
    "first_token_s": [0.1, 0.8, 1.2, math.nan],
    "finish_s": [1.1, 1.3, 1.2, math.nan],
    "prompt_tokens": [10, 20, 30, 40],
    "output_tokens": [11, 6, 1, 0],
    "ttft_s": [0.1, 0.3, 0.2, math.nan],
    "tpot_s": [0.1, 0.1, math.nan, math.nan],
    "e2e_s": [1.1, 0.8, 0.2, math.nan],
})
SUMMARY = {"duration_s": 1.3, "mean_itl_s": 0.1, "std_itl_s": 0.02, "median_itl_s": 0.09,
           "p90_itl_s": 0.12, "p99_itl_s": 0.2}
RUN = {"label": "orca", "rate": 2.0, "num_requests": 4,
       "cluster": {"model": "llama-2-7b", "backend": "sim"}}


def result(**options) -> dict:
    return bench_result(RECORDS, SUMMARY, RUN, BenchOptions(**options),
                        date=datetime(2025, 1, 2, 3, 4, 5))


def test_key_set_is_exactly_vllms():
    assert list(result()) == VLLM_KEYS
    assert bench_keys(BenchOptions()) == VLLM_KEYS


def test_selected_metrics_and_percentiles_name_keys_as_vllm():
    keys = bench_keys(BenchOptions(percentile_metrics=("e2el", "ttft"),
                                   metric_percentiles=(25.0, 99.9)))
    assert keys[-10:] == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p25_ttft_ms",
                          "p99.9_ttft_ms", "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms",
                          "p25_e2el_ms", "p99.9_e2el_ms"]
    assert list(bench_result(RECORDS, SUMMARY, RUN, BenchOptions(
        percentile_metrics=("e2el", "ttft"), metric_percentiles=(25.0, 99.9)))) == keys


def test_setup_and_throughputs_hand_computed():
    r = result()
    assert r["date"] == "20250102-030405"
    assert (r["backend"], r["label"], r["model_id"], r["tokenizer_id"]) == (
        "servesim-sim", "orca", "llama-2-7b", "llama-2-7b")
    assert (r["num_prompts"], r["request_rate"], r["burstiness"], r["max_concurrency"]) == (
        4, 2.0, 1.0, None)
    assert (r["duration"], r["completed"], r["failed"]) == (1.3, 3, 1)
    assert (r["total_input_tokens"], r["total_output_tokens"]) == (60, 18)
    assert r["request_throughput"] == pytest.approx(3 / 1.3)
    assert r["output_throughput"] == pytest.approx(18 / 1.3)
    assert r["total_token_throughput"] == pytest.approx(78 / 1.3)
    assert r["request_goodput"] is None  # no --goodput, as vLLM


def test_latencies_in_ms_with_std_and_interpolated_percentiles():
    r = result()
    # TTFT 100, 300, 200 ms: std = sqrt((100^2 + 100^2 + 0) / 3); p90 at rank 1.8 of sorted
    assert r["mean_ttft_ms"] == pytest.approx(200)
    assert r["median_ttft_ms"] == pytest.approx(200)
    assert r["std_ttft_ms"] == pytest.approx(math.sqrt(20000 / 3))
    assert r["p90_ttft_ms"] == pytest.approx(280)
    assert r["p99_ttft_ms"] == pytest.approx(298)
    # TPOT only of requests with > 1 output: 100, 100 ms
    assert (r["mean_tpot_ms"], r["std_tpot_ms"], r["p99_tpot_ms"]) == pytest.approx((100, 0, 100))
    # E2EL 1100, 800, 200 ms
    assert r["mean_e2el_ms"] == pytest.approx(700)
    assert r["median_e2el_ms"] == pytest.approx(800)
    assert r["std_e2el_ms"] == pytest.approx(math.sqrt(140000))
    assert r["p90_e2el_ms"] == pytest.approx(1040)
    # ITL from the summary's seconds
    assert (r["mean_itl_ms"], r["std_itl_ms"], r["median_itl_ms"], r["p50_itl_ms"],
            r["p90_itl_ms"], r["p99_itl_ms"]) == pytest.approx((100, 20, 90, 90, 120, 200))


def test_no_completed_request_gives_zero_as_vllm():
    stats = latency_stats("ttft", np.array([]), [99])
    assert stats == {"mean_ttft_ms": 0.0, "median_ttft_ms": 0.0, "std_ttft_ms": 0.0,
                     "p99_ttft_ms": 0.0}


@pytest.mark.parametrize("goodput, good", [
    ((("ttft", 250.0),), 2),                 # 100 and 200 ms meet it, 300 does not
    ((("ttft", 300.0),), 3),                 # the SLO is inclusive (value <= SLO)
    ((("ttft", 250.0), ("tpot", 50.0)), 1),  # one output: TPOT counts as 0
    ((("e2el", 900.0),), 2),
])
def test_goodput_hand_computed(goodput, good):
    assert result(goodput=goodput)["request_goodput"] == pytest.approx(good / 1.3)


def test_peak_tokens_and_concurrency_per_second_bucket():
    done = pd.DataFrame({"arrival_s": [0.0, 0.5], "first_token_s": [0.25, 1.25],
                         "finish_s": [0.75, 2.25], "output_tokens": [3, 2]})
    # tokens at 0.25, 0.5, 0.75 | 1.25 | 2.25; A active in second 0, B in seconds 0-2
    assert peak_buckets(done) == (3.0, 2)


def test_weighted_std_equals_the_expanded_samples():
    values, weights = np.array([1.0, 2.0, 3.0]), np.array([1, 1, 2])
    assert weighted_std(values, weights) == pytest.approx(np.std([1, 2, 3, 3]))
    assert math.isnan(weighted_std(np.array([]), np.array([], dtype=int)))


def test_options_parse_as_vllm_and_errors_name_the_flag():
    opts = parse_options("ttft,e2el", "50,99.9", ["ttft:200", "e2el:2000"])
    assert opts == BenchOptions(("ttft", "e2el"), (50.0, 99.9), (("ttft", 200.0),
                                                                  ("e2el", 2000.0)))
    for bad, flag in ((("ttft,foo", None, None), "--percentile-metrics"),
                      ((None, "50,101", None), "--metric-percentiles"),
                      ((None, "50,x", None), "--metric-percentiles"),
                      ((None, None, ["itl:20"]), "--goodput"),
                      ((None, None, ["ttft=20"]), "--goodput"),
                      ((None, None, ["ttft:-1"]), "--goodput ttft"),
                      ((None, "42", None), "--metric-percentiles")):  # no ITL p42 kept
        with pytest.raises(ConfigError, match=flag):
            parse_options(*bad)
    assert parse_options("ttft", "42", None).metric_percentiles == (42.0,)


def test_run_parses_the_vllm_flags():
    args = parse_args(["c.yaml", "--goodput", "ttft:200", "tpot:50", "--percentile-metrics",
                       "ttft,tpot", "--metric-percentiles", "50,99"])
    assert args.bench == BenchOptions(("ttft", "tpot"), (50.0, 99.0),
                                      (("ttft", 200.0), ("tpot", 50.0)))
    with pytest.raises(SystemExit):
        parse_args(["c.yaml", "--goodput", "foo:1"])


TINY = {
    "name": "tiny",
    "workload": {"synthetic": {"num_requests": 12, "arrival": "poisson", "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB", "num_instances": 1},
    "policies": [{"name": "orca", "params": {"max_batch_size": 8}}],
    "request_rates": [2],
    "seeds": [0],
}


def test_a_sweep_writes_bench_json_and_std_in_the_summary(tmp_path: Path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY), encoding="utf-8")
    out = tmp_path / "out"
    assert run_main([str(config), "--out", str(out), "--no-progress"]) == 0
    run_dir = out / "runs" / "orca__rate2__seed0"
    bench = json.loads((run_dir / "bench.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert list(bench) == VLLM_KEYS
    assert bench["completed"] == summary["completed"] == 12
    assert bench["request_throughput"] == pytest.approx(summary["request_throughput"])
    assert bench["mean_ttft_ms"] == pytest.approx(summary["mean_ttft_s"] * 1000)
    assert bench["p99_e2el_ms"] == pytest.approx(summary["p99_e2e_s"] * 1000)
    assert bench["std_itl_ms"] == pytest.approx(summary["std_itl_s"] * 1000)
    for name in ("e2e", "ttft", "tpot", "itl", "queueing", "normalized_latency"):
        assert f"std_{name}_s" in summary
    assert "latencies in s" in capsys.readouterr().out
    # rerun with vLLM's flags: the finished run is reused, its bench.json rewritten
    assert run_main([str(config), "--out", str(out), "--no-progress", "--goodput", "ttft:1e9",
                     "--metric-percentiles", "99", "--percentile-metrics", "ttft"]) == 0
    bench = json.loads((run_dir / "bench.json").read_text())
    assert list(bench)[-4:] == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms"]
    assert bench["request_goodput"] == pytest.approx(bench["request_throughput"])
    assert "goodput" in capsys.readouterr().out


def test_default_options_rewrite_only_a_bench_json_written_otherwise(tmp_path: Path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY), encoding="utf-8")
    out = tmp_path / "out"
    args = [str(config), "--out", str(out), "--no-progress"]
    assert run_main([*args, "--goodput", "ttft:100"]) == 0
    path = out / "runs" / "orca__rate2__seed0" / "bench.json"
    assert json.loads(path.read_text())["request_goodput"] is not None
    assert run_main(args) == 0  # back to the defaults: rewritten
    assert list(json.loads(path.read_text())) == VLLM_KEYS
    assert json.loads(path.read_text())["request_goodput"] is None

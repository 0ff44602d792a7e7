"""The model's context limit is enforced as vLLM does, and every rejected, failed or cut request
is visible: a reason per record, an event, summary counts, a warning under the table, --strict."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.report.results import rejection_warnings, run_line
from experiments.run import main
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.request import LENGTH_CAPPED, PROMPT_TOO_LONG
from sim.engine.limits import resolve_max_model_len
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace

LLAMA2 = ClusterSpec(model="llama-2-7b", gpu="A100-80GB")  # context 4,096 tokens


@pytest.fixture(scope="module")
def llama2():
    return build_executors(LLAMA2)


def run(trace_rows, policy="vllm_v0", params=None, executors=None, **kwargs):
    return simulate(make_trace(trace_rows), policy, params or {}, executors, **kwargs)


def test_prompt_longer_than_the_context_is_rejected_with_its_reason(llama2):
    res = run([(0.0, 5000, 10), (0.1, 100, 10)], executors=llama2)
    rec = res.records.set_index("request_id")
    assert rec.loc[0, "status"] == "rejected"
    assert rec.loc[0, "finish_reason"] == "rejected"
    assert rec.loc[0, "reason"] == PROMPT_TOO_LONG
    assert "prompt_tokens=5000" in rec.loc[0, "reason_detail"]
    assert "max_model_len=4096" in rec.loc[0, "reason_detail"]
    assert rec.loc[1, "finish_reason"] == "stop" and rec.loc[1, "reason"] == ""
    assert res.summary["rejected"] == 1 and res.summary[f"reason_{PROMPT_TOO_LONG}"] == 1
    events = res.events
    assert list(events["kind"]) == ["rejected"] and list(events["request_id"]) == [0]
    assert "prompt_tokens=5000" in events["info"].iloc[0]


@pytest.mark.parametrize("policy", ["vllm_v0", "orca", "sarathi", "vanilla", "dynamic", "ccb"])
def test_output_is_cut_where_prompt_plus_output_reach_the_context(llama2, policy):
    params = {"max_tokens": 4096} if policy == "orca" else {}
    res = run([(0.0, 3000, 2000), (0.0, 4096, 50), (0.0, 10, 20)], policy, params, llama2)
    rec = res.records.set_index("request_id")
    assert list(rec["status"]) == ["finished"] * 3
    assert rec.loc[0, "output_tokens"] == 4096 - 3000  # stops at max_model_len
    assert rec.loc[0, "requested_output_tokens"] == 2000
    assert rec.loc[0, "finish_reason"] == "length" and rec.loc[0, "reason"] == LENGTH_CAPPED
    assert "output cut to 1096" in rec.loc[0, "reason_detail"]
    assert rec.loc[1, "output_tokens"] == 1  # a prompt of exactly the context samples once
    assert rec.loc[2, "finish_reason"] == "stop" and rec.loc[2, "output_tokens"] == 20
    assert res.summary["num_length_capped"] == 2
    assert (res.events["kind"] == "cut").sum() == 2


def test_a_smaller_max_model_len_is_enforced_and_a_larger_one_refused(llama2):
    res = run([(0.0, 1000, 2000), (0.0, 3000, 5)], executors=llama2, max_model_len=2048)
    assert list(res.records["finish_reason"]) == ["length", "rejected"]
    assert res.records["output_tokens"].iloc[0] == 1048
    with pytest.raises(ConfigError, match=r"cluster\.max_model_len=8192.*4096"):
        run([(0.0, 10, 10)], executors=llama2, max_model_len=8192)
    with pytest.raises(ConfigError, match=r"cluster\.max_model_len=0"):
        ClusterSpec(max_model_len=0)
    with pytest.raises(ConfigError, match=r"cluster\.max_model_len=True"):
        resolve_max_model_len(llama2, True)


def test_an_executor_that_names_no_model_caps_nothing():
    res = run([(0.0, 50_000, 10)], "vllm_v0", {"max_num_batched_tokens": 60_000},
              [LinearExecutor(capacity=100_000)])
    assert res.records["finish_reason"].iloc[0] == "stop"


def test_policy_rejections_carry_their_own_reason(llama2):
    res = run([(0.0, 3000, 10), (0.0, 100, 10)], "vllm_v0", {"max_num_batched_tokens": 2048},
              llama2)
    rec = res.records.set_index("request_id")
    assert rec.loc[0, "reason"] == "exceeds_max_num_batched_tokens"
    assert "max_num_batched_tokens=2048" in rec.loc[0, "reason_detail"]
    tiny = [LinearExecutor(capacity=64)]
    res = run([(0.0, 100, 10)], "vllm_v0", {}, tiny)
    assert res.records["reason"].iloc[0] == "exceeds_kv_capacity"


def test_run_line_and_warnings_name_counts_and_reasons(llama2):
    res = run([(0.0, 5000, 10), (0.0, 3000, 2000), (0.0, 10, 10)], executors=llama2)
    row = {"run": "vllm__rate1__seed0", **res.summary}
    line = run_line(row, 0.1)
    assert "1 rejected, 1 cut" in line and "prompt_too_long: 1" in line
    assert "max_model_len: 1" in line
    (warning,) = rejection_warnings([row])
    assert warning.startswith("warning: vllm__rate1__seed0: 1 rejected, 1 cut")
    assert rejection_warnings([{"run": "x", **run([(0.0, 10, 10)], executors=llama2).summary}]) \
        == []


CONFIG = {
    "name": "limits",
    "workload": {"synthetic": {"num_requests": 30, "lengths": "sharegpt",
                               "prompt": {"kind": "uniform", "min_tokens": 2000,
                                          "max_tokens": 6000},
                               "output": {"kind": "uniform", "min_tokens": 10, "max_tokens": 40}}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": ["vllm_v0"],
    "request_rates": [4],
}


def _cli(tmp_path: Path, *extra: str) -> int:
    path = tmp_path / "limits.yaml"
    path.write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    return main([str(path), "--out", str(tmp_path / "out"), "--no-progress", *extra])


def test_cli_warns_writes_reasons_and_strict_fails(tmp_path, capsys):
    assert _cli(tmp_path) == 0
    err = capsys.readouterr().err
    assert "warning: vllm_v0__rate4__seed0:" in err and "prompt_too_long" in err
    run_dir = tmp_path / "out" / "runs" / "vllm_v0__rate4__seed0"
    records = pd.read_parquet(run_dir / "records.parquet")
    rejected = records[records["status"] == "rejected"]
    assert len(rejected) > 0 and (rejected["reason"] == PROMPT_TOO_LONG).all()
    events = pd.read_parquet(run_dir / "events.parquet")
    assert (events["kind"] == "rejected").sum() == len(rejected)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rejected"] == len(rejected)
    assert "warning:" in (tmp_path / "out" / "table.txt").read_text()
    assert _cli(tmp_path, "--strict") == 1
    assert "error: --strict=0: vllm_v0__rate4__seed0 rejected or failed" in capsys.readouterr().err
    assert _cli(tmp_path, "--strict", "0.99") == 0
    with pytest.raises(SystemExit):
        _cli(tmp_path, "--strict", "1.5")

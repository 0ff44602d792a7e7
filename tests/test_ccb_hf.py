"""`ccb` on the HF static-batch engine (the Magnus paper's CCB): its reservation counted in the
padded layout (policies/ccb_padded.py) never runs out of memory, and it is slower than CCB on
the paged engine."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from policies.ccb_padded import padded_reservation
from policies.registry import build_policy
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step
from sim.core.request import Request, RequestStatus
from sim.records.recorder import Recorder
from tests.test_engine import OneIterationExecutor
from tests.test_magnus_hf_static import chatglm_v100


def stress_trace(seed: int = 0, n: int = 120) -> pd.DataFrame:
    """Bursty arrivals, prompts of 10-1,900 tokens, prompt + output within ChatGLM's 2,048."""
    rng = np.random.default_rng(seed)
    prompts = rng.choice([20, 300, 1000, 1900], n, p=[0.4, 0.3, 0.2, 0.1])
    outputs = np.minimum(rng.integers(1, 400, n), 2048 - prompts)
    return pd.DataFrame({"arrival_s": np.sort(rng.uniform(0.0, 20.0, n)),
                         "prompt_tokens": prompts, "output_tokens": outputs})


def peak_bytes(ex, step: Step) -> float:
    """The most memory any iteration of `step` holds on the engine, by brute force."""
    from sim.cluster.hf_continuous import first_iteration_peak_bytes, mixed_shape

    shape = mixed_shape(step)
    if shape is None:  # a static batch (nothing running): its prefill or its last decode
        return ex.memory.batch_peak_bytes(step.num_seqs, max(step.num_new_tokens),
                                          step.num_iterations)
    last = shape.num_rows * (shape.longest + step.num_iterations - 1)
    return max(first_iteration_peak_bytes(ex.memory, shape),
               last * ex.memory.kv_bytes_per_token)


class RecordingExecutor:
    """The HF engine, keeping every Step it runs and offering its engine to the policy."""

    def __init__(self, inner):
        self.inner, self.name, self.steps = inner, inner.name, []

    @property
    def kv_capacity_tokens(self) -> int:
        return self.inner.kv_capacity_tokens

    def instance_info(self, instance_id: int):
        return self.inner.instance_info(instance_id)

    def execute(self, step, until_s=math.inf):
        self.steps.append(step)
        return self.inner.execute(step, until_s)


@pytest.mark.parametrize("max_gen_tokens", [2048, 400])
def test_never_runs_out_of_memory_and_uses_it(max_gen_tokens):
    ex = RecordingExecutor(chatglm_v100())
    res = simulate(stress_trace(), "ccb", {"max_gen_tokens": max_gen_tokens}, [ex])
    assert res.summary["completed"] == 120 and res.summary["num_oom_events"] == 0
    peaks = [peak_bytes(ex.inner, s) for s in ex.steps]
    assert max(peaks) <= ex.inner.free_bytes
    assert max(peaks) > 0.3 * ex.inner.free_bytes  # the reservation binds, memory is used
    assert any(s.num_seqs > 1 and 1 in s.num_new_tokens and max(s.num_new_tokens) > 1
               for s in ex.steps)  # join steps happened


def test_counting_the_paged_way_runs_out_of_memory_on_the_padded_engine():
    """The control: ORCA's sum of prompt + max_tokens admits rows the padded tensor and the
    prefill cannot hold (a 1,900-token prompt pads every short row)."""
    trace = pd.DataFrame({"arrival_s": [0.0] + [0.1] * 60, "prompt_tokens": [1900] + [20] * 60,
                          "output_tokens": [100] + [50] * 60})
    params = {"max_batch_size": 64}
    ok = simulate(trace, "ccb", {**params, "max_gen_tokens": 100}, [chatglm_v100()])
    assert ok.summary["num_oom_events"] == 0 and ok.summary["completed"] == 61
    with pytest.raises(RuntimeError, match="ran out of KV memory"):
        simulate(trace, "orca", {**params, "max_tokens": 100}, [chatglm_v100()])


def test_reservation_is_rows_times_longest_sequence():
    ex = chatglm_v100()
    policy = build_policy("ccb", {"max_gen_tokens": 100}, [ex.instance_info(0)], Recorder(), 0)
    for i, prompt in enumerate((50, 900, 10)):
        assert policy.add_request(Request(i, 0.0, prompt, 20), 0.0)
    step = policy.next_step(0, 0.0)
    assert step.request_ids == (0, 1, 2)
    assert policy.num_reserved_kv_tokens(0) == 3 * (900 + 100)
    pad = padded_reservation(ex.instance_info(0), 2048)
    assert pad.sequence(900) == 2048  # never past the model's context
    assert pad.reserved_tokens([50, 900]) == 2 * 2048


def test_a_request_that_cannot_fit_alone_is_rejected():
    ex = chatglm_v100("fp16")
    pad = padded_reservation(ex.instance_info(0), 2048)
    assert pad.alone_tokens(2047) <= ex.kv_capacity_tokens  # every ChatGLM prompt fits
    small = ClusterSpec(model="chatglm-6b", gpu="V100-32GB",
                        engine={"kind": "hf_static", "reserve_bytes": 18 * 2**30})
    (tight,) = build_executors(small)
    policy = build_policy("ccb", {}, [tight.instance_info(0)], Recorder(), 0)
    assert tight.kv_capacity_tokens > 2000 + 2048  # the paged reservation would pass
    r = Request(0, 0.0, 2000, 10)  # the prefill's logits and scores do not fit
    assert not policy.add_request(r, 0.0) and r.status is RequestStatus.REJECTED
    assert policy.add_request(Request(1, 0.0, 100, 10), 0.0)


def test_jumps_equal_one_iteration_at_a_time_on_the_padded_engine():
    class OneAtATime(OneIterationExecutor):
        def instance_info(self, instance_id):
            return self.inner.instance_info(instance_id)

    trace = stress_trace(1, 60)
    ex = chatglm_v100()
    jump = simulate(trace, "ccb", {"max_gen_tokens": 400}, [ex])
    step = simulate(trace, "ccb", {"max_gen_tokens": 400}, [OneAtATime(ex)])
    for col in ("first_token_s", "finish_s", "scheduled_s"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    assert len(jump.steps) < len(step.steps)


def test_ccb_on_hf_is_slower_than_ccb_paged_on_the_same_workload():
    trace = stress_trace(2)
    results = {}
    for name, engine in (("hf", {"kind": "hf_static"}), ("paged", {})):
        executors = build_executors(ClusterSpec(model="chatglm-6b", gpu="V100-32GB",
                                                cost_model={"kind": "roofline"}, engine=engine))
        results[name] = simulate(trace, "ccb", {"max_gen_tokens": 2048}, executors).summary
    hf, paged = results["hf"], results["paged"]
    assert hf["completed"] == paged["completed"] == 120
    assert hf["mean_e2e_s"] > 2 * paged["mean_e2e_s"]
    assert hf["duration_s"] > paged["duration_s"]


def test_breakdown_splits_the_busy_time(tmp_path):
    """experiments.papers.magnus_ccb_breakdown: the parts add up to the run's busy time, joins and the
    padding of decode reads are counted, and a static policy has only static prefills."""
    from experiments.papers.magnus_ccb_breakdown import run_breakdown

    config = tmp_path / "tiny.yaml"
    config.write_text(
        "name: tiny\n"
        "workload: {synthetic: {num_requests: 80, arrival: poisson,\n"
        "  prompt: {kind: uniform, min_tokens: 10, max_tokens: 900},\n"
        "  output: {kind: uniform, min_tokens: 1, max_tokens: 300}}}\n"
        "cluster: {model: chatglm-6b, gpu: V100-32GB, engine: {kind: hf_static}}\n"
        "policies: [{label: CCB-HF, name: ccb}, {label: VS, name: vanilla,\n"
        "            params: {batch_size: 7}}]\n"
        "request_rates: [2]\n")
    parts, summary = run_breakdown(str(config), "CCB-HF", 2.0, 0)
    assert parts["busy_s"] == pytest.approx(summary["busy_fraction"] * summary["duration_s"],
                                            rel=1e-9)
    shares = [parts[f"share_{p}"] for p in ("decode", "join_prefill", "relayout",
                                            "static_prefill", "oom_lost")]
    assert sum(shares) == pytest.approx(1.0) and min(shares[:3]) > 0
    assert parts["joins"] > 0 and 0 < parts["padding_share_of_decode_kv"] < 1
    static, _ = run_breakdown(str(config), "VS", 2.0, 0)
    assert static["joins"] == 0 and static["share_join_prefill"] == 0
    assert static["padding_share_of_decode_kv"] == 0  # its Steps carry their padding


@pytest.mark.parametrize("name", ["magnus_paper.yaml", "magnus_paper_small.yaml"])
def test_paper_configs_run_ccb_on_both_engines(name):
    from pathlib import Path

    from experiments.run import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "experiments" / "configs" / name)
    entries = {e.label: e for e in cfg.policies}
    assert entries["CCB"].name == entries["CCB-HF"].name == "ccb"
    assert cfg.cluster_for(entries["CCB"]).engine == {}
    assert cfg.cluster_for(entries["CCB-HF"]).engine == {"kind": "hf_static"}
    assert entries["CCB-HF"].params == entries["CCB"].params


def test_headline_table_names_both_ccbs():
    from experiments.figures.magnus import headline_table

    rows = []
    for label, tput in (("VS", 2.0), ("Magnus", 3.0), ("CCB", 4.0), ("CCB-HF", 3.5)):
        rows.append({"label": label, "rate": 4.0, "request_throughput": tput,
                     "valid_token_throughput": tput, "total_token_generated_throughput": tput,
                     "mean_e2e_s": 1 / tput, "p99_e2e_s": 2 / tput})
    table = headline_table(pd.DataFrame(rows))
    assert "| Magnus vs CCB (paged) | -25% to -25% |" in table
    assert "| Magnus vs CCB (HF) | -14% to -14% |" in table

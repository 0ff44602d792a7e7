"""Scheduling overhead (sim/cost/overhead.py): serial and async accounting on hand-computed examples."""

import json
import math

import numpy as np
import pytest

from policies.registry import policy_names
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec
from sim.cost.overhead import SchedulingOverhead, build_overhead, overhead_kwargs
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, generic_params, make_trace, random_trace
from tests.test_engine import OneIterationExecutor

EX = LinearExecutor(base_s=0.01, per_token_s=1e-4, per_ctx_s=1e-6)
PROMPT, OUTPUTS = 300, 40


def lone_gpu_times() -> np.ndarray:
    """GPU seconds of each iteration of one request alone on EX (prefill, then decodes)."""
    times = [EX.base_s + EX.per_token_s * PROMPT]
    times += [EX.base_s + EX.per_token_s + EX.per_ctx_s * (PROMPT + j) for j in range(OUTPUTS - 1)]
    return np.array(times)


def lone_cpu_times(ov: SchedulingOverhead) -> np.ndarray:
    """Scheduler seconds of each iteration: one request; PROMPT new tokens, then one."""
    cpu = np.full(OUTPUTS, ov.fixed_s + ov.per_request_s + ov.per_token_s)
    cpu[0] = ov.fixed_s + ov.per_request_s + ov.per_token_s * PROMPT
    return cpu


@pytest.mark.parametrize("policy", ["orca", "vanilla", "vllm_v0"])
def test_serial_lone_request_pays_gpu_plus_cpu(policy):
    ov = SchedulingOverhead(fixed_s=0.004, per_request_s=0.002, per_token_s=1e-5)
    gpu, cpu = lone_gpu_times(), lone_cpu_times(ov)
    res = simulate(make_trace([(1.5, PROMPT, OUTPUTS)]), policy, {}, [EX], overhead=ov)
    rec, s = res.records.iloc[0], res.summary
    assert rec["e2e_s"] == pytest.approx(gpu.sum() + cpu.sum(), rel=1e-12)
    assert rec["ttft_s"] == pytest.approx(cpu[0] + gpu[0], rel=1e-12)
    assert rec["tpot_s"] == pytest.approx(np.mean(cpu[1:] + gpu[1:]), rel=1e-12)
    assert s["busy_fraction"] == pytest.approx(1.0)
    assert s["gpu_busy_frac"] == pytest.approx(gpu.sum() / (gpu.sum() + cpu.sum()), rel=1e-12)
    assert s["scheduling_s"] == pytest.approx(cpu.sum(), rel=1e-12)
    assert s["scheduling_gap_s"] == pytest.approx(cpu.sum(), rel=1e-9)
    assert res.steps["sched_s"].sum() == pytest.approx(cpu.sum(), rel=1e-12)


def test_async_lone_request_overlaps_previous_iteration():
    # decode GPU ~0.0104 s < CPU 0.015 s: each decode waits 0.0046 s; the prefill (0.04 s)
    # hides the second iteration's scheduling entirely
    ov = SchedulingOverhead(fixed_s=0.01, per_request_s=0.005, mode="async")
    gpu, cpu = lone_gpu_times(), lone_cpu_times(ov)
    gaps = np.concatenate(([cpu[0]], np.maximum(cpu[1:] - gpu[:-1], 0.0)))
    assert gaps[1] == 0.0 and gaps[2] > 0.0
    expected = cpu[0] + sum(max(g_prev, c) for g_prev, c in zip(gpu[:-1], cpu[1:])) + gpu[-1]
    assert gaps.sum() + gpu.sum() == pytest.approx(expected, rel=1e-12)
    res = simulate(make_trace([(0.0, PROMPT, OUTPUTS)]), "orca", {}, [EX], overhead=ov)
    s = res.summary
    assert res.records.loc[0, "e2e_s"] == pytest.approx(expected, rel=1e-12)
    assert res.records.loc[0, "ttft_s"] == pytest.approx(cpu[0] + gpu[0], rel=1e-12)
    assert s["gpu_busy_frac"] == pytest.approx(gpu.sum() / expected, rel=1e-9)
    assert s["scheduling_s"] == pytest.approx(cpu.sum(), rel=1e-12)
    assert s["scheduling_gap_s"] == pytest.approx(gaps.sum(), rel=1e-9)


def test_async_pays_full_cpu_after_idle_and_hides_cheap_scheduling():
    cheap = SchedulingOverhead(fixed_s=0.005, mode="async")  # < every GPU iteration
    trace = make_trace([(0.0, PROMPT, OUTPUTS), (100.0, PROMPT, OUTPUTS)])
    res = simulate(trace, "orca", {}, [EX], overhead=cheap)
    gpu = lone_gpu_times()
    # both requests start on an idle instance: only their first scheduling is exposed
    np.testing.assert_allclose(res.records["e2e_s"], [gpu.sum() + 0.005] * 2, rtol=1e-12)
    assert res.summary["scheduling_gap_s"] == pytest.approx(2 * 0.005, rel=1e-9)
    serial = simulate(trace, "orca", {}, [EX], overhead=SchedulingOverhead(fixed_s=0.005))
    np.testing.assert_allclose(serial.records["e2e_s"], [gpu.sum() + 0.005 * OUTPUTS] * 2,
                               rtol=1e-12)


def test_per_request_cost_scales_with_the_batch():
    ov = SchedulingOverhead(per_request_s=0.001)
    b, prompt, outputs = 4, 100, 25
    ex = LinearExecutor(base_s=0.01, per_token_s=2e-4)
    res = simulate(make_trace([(0.0, prompt, outputs)] * b), "vanilla", {"batch_size": b}, [ex],
                   overhead=ov)
    gpu = outputs * ex.base_s + ex.per_token_s * (b * prompt + (outputs - 1) * b)
    np.testing.assert_allclose(res.records["e2e_s"], gpu + outputs * b * 0.001, rtol=1e-12)


@pytest.mark.parametrize("mode", ["serial", "async"])
@pytest.mark.parametrize("policy", policy_names())
def test_jumping_over_decode_runs_stays_exact_with_overhead(policy, mode):
    trace = random_trace(np.random.default_rng(3), 60, rate=20.0)
    ex = LinearExecutor(capacity=6000, per_ctx_s=1e-6)
    ov = SchedulingOverhead(fixed_s=0.003, per_request_s=0.0004, per_token_s=2e-6, mode=mode)
    jump = simulate(trace, policy, generic_params(policy), [ex, ex], overhead=ov)
    step = simulate(trace, policy, generic_params(policy), [OneIterationExecutor(ex)] * 2,
                    overhead=ov)
    for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    for key in ("p99_itl_s", "num_computed_tokens", "gpu_busy_frac", "scheduling_s",
                "scheduling_gap_s"):
        assert jump.summary[key] == pytest.approx(step.summary[key], rel=1e-9)


def test_zero_overhead_is_identical_to_none():
    trace = random_trace(np.random.default_rng(5), 40, rate=10.0)
    ex = LinearExecutor(capacity=6000)
    base = simulate(trace, "vllm_v0", {}, [ex])
    for ov in (SchedulingOverhead(), SchedulingOverhead(mode="async")):
        res = simulate(trace, "vllm_v0", {}, [ex], overhead=ov)
        for col in ("first_token_s", "finish_s", "scheduled_s"):
            np.testing.assert_array_equal(res.records[col], base.records[col])
    assert base.summary["gpu_busy_frac"] == base.summary["busy_fraction"]
    assert base.summary["scheduling_s"] == 0.0 and base.summary["scheduling_gap_s"] == 0.0
    assert (base.steps["policy_host_s"] > 0).all()  # the policy's own host time, measured


def test_oom_step_pays_scheduling_before_every_iteration_it_ran():
    ex = LinearExecutor(capacity=500)
    trace = make_trace([(0.0, 100, 200), (0.0, 100, 10), (5.0, 10, 5)])
    ov = SchedulingOverhead(fixed_s=0.002, per_request_s=0.001)
    plain = simulate(trace, "vanilla", {"batch_size": 2}, [ex])
    res = simulate(trace, "vanilla", {"batch_size": 2}, [ex], overhead=ov)
    assert res.summary["num_oom_events"] == 1 and res.summary["failed"] == 2
    # KV after iteration i is 200 + 2 (i - 1) > 500 first at i = 152, which fails
    oom, oom_plain = res.steps[res.steps["oom"]].iloc[0], plain.steps[plain.steps["oom"]].iloc[0]
    assert oom["duration_s"] == pytest.approx(oom_plain["duration_s"] + 152 * 0.004, rel=1e-12)
    assert oom["sched_s"] == pytest.approx(152 * 0.004, rel=1e-12)


# ---- configuration ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, field", [
    ({"fixed_s": -1e-3}, "fixed_s"), ({"per_request_s": math.nan}, "per_request_s"),
    ({"per_token_s": math.inf}, "per_token_s"), ({"fixed_s": "1ms"}, "fixed_s"),
    ({"mode": "parallel"}, "mode")])
def test_bad_overhead_values_are_config_errors(kwargs, field):
    with pytest.raises(ConfigError) as err:
        SchedulingOverhead(**kwargs)
    assert err.value.field == f"cluster.scheduling_overhead.{field}"


def test_cluster_spec_validates_and_passes_the_overhead():
    spec = ClusterSpec(scheduling_overhead={"fixed_s": 0.001, "mode": "async"})
    assert overhead_kwargs(spec) == {"overhead": SchedulingOverhead(0.001, mode="async")}
    assert overhead_kwargs(ClusterSpec()) == {}
    with pytest.raises(ConfigError, match="unknown key"):
        ClusterSpec(scheduling_overhead={"fixed": 0.001})
    with pytest.raises(ConfigError, match="must be a mapping"):
        build_overhead([0.001])  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        ClusterSpec(backend="real", scheduling_overhead={"fixed_s": 0.001})
    assert err.value.field == "cluster.scheduling_overhead" and "real" in str(err.value)


def test_overhead_from_a_calibration_file(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"scheduling_overhead": {"fixed_s": 2e-4, "per_request_s": 1e-5}}))
    ov = build_overhead({"calibration": str(path), "mode": "async"})
    assert ov == SchedulingOverhead(2e-4, 1e-5, 0.0, "async")
    assert build_overhead({"calibration": str(path), "fixed_s": 0.0}).fixed_s == 0.0
    with pytest.raises(ConfigError, match="not a calibration file"):
        build_overhead({"calibration": str(tmp_path / "missing.json")})
    path.write_text(json.dumps({"roofline": {}}))
    with pytest.raises(ConfigError, match="no scheduling_overhead"):
        build_overhead({"calibration": str(path)})
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not a JSON"):
        build_overhead({"calibration": str(path)})


def test_a_sweep_config_passes_the_overhead_per_policy_entry(tmp_path):
    import pandas as pd
    import yaml

    from experiments import run

    raw = {"name": "ov", "workload": {"synthetic": {"num_requests": 30, "lengths": "alpaca"}},
           "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
           "policies": [{"name": "vllm_v0", "label": "none"},
                        {"name": "vllm_v0", "label": "serial", "cluster": {"scheduling_overhead": {
                            "fixed_s": 0.005, "per_request_s": 0.001}}}],
           "request_rates": [4], "seeds": [0]}
    path = tmp_path / "ov.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert run.main([str(path), "--out", str(out), "--no-progress"]) == 0
    s = pd.read_csv(out / "summary.csv").set_index("label")
    assert s.loc["none", "scheduling_s"] == 0.0 and s.loc["serial", "scheduling_s"] > 0
    assert s.loc["serial", "gpu_busy_frac"] < s.loc["serial", "busy_fraction"]
    assert s.loc["serial", "mean_tpot_s"] > s.loc["none", "mean_tpot_s"]
    raw["cluster"]["backend"] = "real"
    raw["policies"] = raw["policies"][1:]
    path.write_text(yaml.safe_dump(raw))
    assert run.main([str(path), "--out", str(out), "--no-progress"]) == 2

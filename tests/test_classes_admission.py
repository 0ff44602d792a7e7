"""Admission control (sim/engine/admission.py): token bucket, queue length and predicted wait, globally
and per class; every rejection carries its reason code, detail and event."""

import numpy as np
import pytest

from experiments.config.classes import admission_from_dict
from policies.simulate import simulate
from sim.engine.admission import AdmissionConfig, AdmissionLimits
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace


def burst_trace(n: int, at: float = 0.0, gap: float = 0.0):
    return make_trace([(at + i * gap, 20, 5) for i in range(n)])


def test_token_bucket_admits_its_burst_then_its_rate():
    # 10 requests at once, then one every 0.1 s for 2 s; bucket of 3 refilled at 2 req/s
    trace = make_trace([(0.0, 20, 5)] * 10 + [(0.1 * i, 20, 5) for i in range(1, 21)])
    res = simulate(trace, "vllm", {}, [LinearExecutor()],
                   admission=AdmissionConfig(rate_per_s=2.0, burst=3))
    rec = res.records
    admitted = rec[rec["status"] != "rejected"]
    assert len(admitted) == 3 + 4  # the burst, then 2 req/s x 2 s (one every 0.5 s)
    rejected = rec[rec["status"] == "rejected"]
    assert (rejected["reason"] == "admission_rate").all()
    assert rejected["reason_detail"].str.contains("rate_per_s=2, burst=3").all()
    assert res.summary["reason_admission_rate"] == len(rejected) == res.summary["rejected"]
    events = res.events[res.events["kind"] == "rejected"]
    assert len(events) == len(rejected) and events["info"].str.startswith("admission_rate: ").all()


def test_queue_limit_rejects_when_too_many_wait():
    # one request runs at a time; 6 arrive 1 ms apart: 1 runs, 2 may wait, 3 are turned away
    trace = burst_trace(6, gap=0.001)
    res = simulate(trace, "orca", {"max_batch_size": 1, "max_tokens": 64}, [LinearExecutor()],
                   admission=AdmissionConfig(max_waiting=2))
    status = res.records["status"].tolist()
    assert status == ["finished"] * 3 + ["rejected"] * 3
    detail = res.records.loc[5, "reason_detail"]
    assert res.records.loc[5, "reason"] == "queue_full" and "max_waiting=2" in detail


def test_predicted_wait_rejects_when_the_queue_outruns_completions():
    # one request at a time, 0.06 s each; arrivals every 0.02 s: the queue grows 2 per 0.06 s
    trace = burst_trace(200, gap=0.02)
    res = simulate(trace, "orca", {"max_batch_size": 1, "max_tokens": 64},
                   [LinearExecutor(base_s=0.01, per_token_s=0.0)],
                   admission=AdmissionConfig(max_predicted_wait_s=1.0, window_s=2.0))
    rec = res.records
    late = rec[rec["reason"] == "predicted_wait"]
    assert len(late) > 50 and rec.loc[:20, "status"].eq("finished").all()
    assert late["reason_detail"].str.contains("max_predicted_wait_s=1").all()
    # the admitted requests' queueing delay stays near the bound (1 s + a request's share)
    done = rec[rec["status"] == "finished"]
    assert done["queueing_s"].max() < 1.5


def test_class_limits_count_their_class_only():
    trace = burst_trace(8, gap=0.001)
    trace["class"] = ["batch", "chat"] * 4
    admission = AdmissionConfig(classes={"batch": AdmissionLimits(max_waiting=1)})
    res = simulate(trace, "orca", {"max_batch_size": 1, "max_tokens": 64}, [LinearExecutor()],
                   admission=admission)
    rec = res.records
    assert (rec.loc[rec["class"] == "chat", "status"] == "finished").all()
    batch = rec[rec["class"] == "batch"]
    assert batch["status"].tolist() == ["finished", "finished", "rejected", "rejected"]
    assert "of class 'batch'" in batch["reason_detail"].iloc[-1]
    assert res.summary["class.batch.rejected"] == 2 and res.summary["class.chat.rejected"] == 0


def test_a_run_without_limits_rejects_nothing_and_is_unchanged():
    trace = burst_trace(20, gap=0.01)
    plain = simulate(trace, "vllm", {}, [LinearExecutor()])
    loose = simulate(trace, "vllm", {}, [LinearExecutor()],
                     admission=AdmissionConfig(max_waiting=1000))
    assert plain.records.equals(loose.records)


@pytest.mark.parametrize("raw, field", [
    ({}, "admission"),
    ({"burst": 4}, "admission.burst"),
    ({"rate_per_s": 0}, "admission.rate_per_s"),
    ({"rate_per_s": 1, "burst": 0.5}, "admission.burst"),
    ({"max_waiting": -1}, "admission.max_waiting"),
    ({"max_waiting": 2.5}, "admission.max_waiting"),
    ({"max_predicted_wait_s": "soon"}, "admission.max_predicted_wait_s"),
    ({"max_waiting": 3, "window_s": 0}, "admission.window_s"),
    ({"max_waiting": 3, "queue": 3}, "admission.queue"),
    ({"classes": {"batch": {"max_waiting": -2}}}, "admission.classes.batch.max_waiting"),
])
def test_bad_admission_settings_name_the_field(raw, field):
    with pytest.raises(ConfigError) as err:
        admission_from_dict(raw)
    assert err.value.field == field


def test_admission_in_an_experiment_config():
    from experiments.config.experiment import experiment_from_dict

    raw = {"workload": {"synthetic": {"num_requests": 10}}, "cluster": {"model": "llama-2-7b",
           "gpu": "A100-80GB"}, "request_rates": [1],
           "admission": {"rate_per_s": 5, "classes": {"batch": {"max_waiting": 4}}},
           "policies": ["orca", {"name": "orca", "label": "open", "admission": None}]}
    cfg = experiment_from_dict(raw, "t")
    assert cfg.admission_for(cfg.policies[0]) == cfg.admission
    assert cfg.admission.classes["batch"].max_waiting == 4
    assert cfg.admission_for(cfg.policies[1]) is None
    real = {**raw, "cluster": {**raw["cluster"], "backend": "real"}}
    with pytest.raises(ConfigError, match="backend: sim only"):
        experiment_from_dict(real, "t")
    assert np.isfinite(cfg.admission.window_s)

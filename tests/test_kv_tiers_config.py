"""KV tier settings: bad values and combinations that do not make sense are refused, naming the
field; the cost executor prices the copies by their closed form and nothing else changes."""

import math

import pytest

from experiments.config.experiment import experiment_from_dict
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step
from sim.memory.kv_moves import tier_links
from sim.memory.kv_transfer import GB, LINKS
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, TierExecutor, make_trace

SWAP = {"preemption_mode": "swap"}
HOST = {"enable_prefix_caching": True, "host_prefix_cache_gib": 8.0}


def experiment(policy: str, params: dict, cluster: dict | None = None) -> dict:
    return {"workload": {"synthetic": {"num_requests": 5}}, "request_rates": [1],
            "cluster": cluster or {}, "policies": [{"name": policy, "params": params}]}


@pytest.mark.parametrize("policy,params,field", [
    ("vllm", SWAP, "preemption_mode"),  # V1 recomputes only
    ("vllm", {**HOST, "remote_prefix_cache_gib": 64.0}, "remote_prefix_cache_gib"),  # LMCache's
    ("lacb", SWAP, "preemption_mode"),
    ("lacb", HOST, "host_prefix_cache_gib"),
    ("vllm_v0", {"preemption_mode": "drop"}, "preemption_mode"),
    ("vllm_v0", {**SWAP, "swap_space": 0.0}, "swap_space"),
    ("sarathi", {"swap_space": -1.0}, "swap_space"),
    ("vllm_v0", {"host_prefix_cache_gib": 4.0}, "host_prefix_cache_gib"),  # no prefix caching
    ("sarathi", {"enable_prefix_caching": True, "remote_prefix_cache_gib": 64.0},
     "remote_prefix_cache_gib"),  # a remote tier without a host tier
    ("vllm_v0", {**HOST, "remote_prefix_cache_gib": math.inf}, "remote_prefix_cache_gib"),
])
def test_bad_settings_name_the_field(policy, params, field):
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(experiment(policy, params), "x")
    assert info.value.field == f"policies[0].params.{field}", info.value


@pytest.mark.parametrize("cluster,why", [
    ({"backend": "real"}, "real torch backend"),
    ({"engine": {"kind": "hf_static"}}, "HF static"),
    ({"cost_model": {"calibration": "calib.json"}}, "calibrated cost model"),
])
@pytest.mark.parametrize("params,field", [(SWAP, "preemption_mode"),
                                          (HOST, "host_prefix_cache_gib")])
def test_backends_that_do_not_price_the_copies_are_refused(cluster, why, params, field):
    if "enable_prefix_caching" in params and cluster.get("backend") == "real":
        field = "enable_prefix_caching"  # refused first, for its own reason
        why = "real torch backend"
    with pytest.raises(ConfigError, match=why) as info:
        experiment_from_dict(experiment("vllm_v0", params, cluster), "x")
    assert info.value.field == f"policies[0].params.{field}"


def test_disagg_pools_refuse_tiers():
    params = {"decode_policy": "vllm_v0", "decode_params": SWAP, "kv_bytes_per_token": 1e5}
    with pytest.raises(ConfigError) as info:
        simulate(make_trace([(0.0, 10, 2)]), "disagg", params, [LinearExecutor()] * 2)
    assert info.value.field == "decode_params.preemption_mode"


def test_executors_that_report_no_kv_size_are_refused():
    with pytest.raises(ConfigError, match="KV bytes per token") as info:
        simulate(make_trace([(0.0, 10, 2)]), "vllm_v0", SWAP, [LinearExecutor()])
    assert info.value.field == "preemption_mode"


def test_unknown_links_are_refused():
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(experiment("vllm_v0", SWAP, {"kv_host_link": "pcie7"}), "x")
    assert info.value.field == "cluster.kv_host_link"
    with pytest.raises(ConfigError) as info:
        ClusterSpec(kv_remote_link="carrier_pigeon")
    assert info.value.field == "cluster.kv_remote_link"
    spec = ClusterSpec(kv_host_link="pcie5_host", kv_remote_link="rdma_400g")
    assert build_executors(spec)[0].kv_links.host is LINKS["pcie5_host"]


def test_the_cost_executor_adds_the_copies_closed_form_and_nothing_without_them():
    spec = ClusterSpec(model="llama-2-7b", gpu="A100-80GB", tensor_parallel=2)
    ex = build_executors(spec)[0]
    plain = Step(0, (1, 2), (1, 1), (500, 700), (True, True), num_iterations=3)
    moved = Step(0, (1, 2), (1, 1), (500, 700), (True, True), num_iterations=3,
                 num_swap_in_tokens=512, num_swap_out_tokens=256, num_remote_in_tokens=128)
    per_link = ex.kv_bytes_per_token / 2  # each GPU copies its half of the KV
    assert per_link == 2 * 32 * 4096 * 2 / 2  # K and V, 32 layers, 4096 wide, fp16
    host, remote = LINKS["pcie4_host"], LINKS["ethernet_100g"]
    want = (2 * host.latency_s + (512 + 256) * per_link / (25 * GB)
            + remote.latency_s + 128 * per_link / remote.bandwidth_bytes_per_s)
    a, b = ex.execute(plain), ex.execute(moved)
    assert b.iteration_ends_s[0] - a.iteration_ends_s[0] == pytest.approx(want, rel=1e-12)
    assert b.duration_s - a.duration_s == pytest.approx(want, rel=1e-12)  # first iteration
    assert tier_links(ex.cost_model.deployment).seconds(plain) == 0.0


def test_runs_without_tiers_record_and_summarize_nothing_new():
    ex = TierExecutor(capacity=200)
    res = simulate(make_trace([(0.0, 40, 100), (0.0, 40, 100)]), "vllm_v0", {}, [ex])
    assert res.summary["num_preemptions"] > 0
    assert not {"num_swapped_out_tokens", "num_host_hit_tokens"} & set(res.records.columns)
    assert not [k for k in res.summary if k.startswith(("kv_", "num_swap", "prefix_hit_rate_"))]

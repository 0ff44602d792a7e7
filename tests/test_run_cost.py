"""A run's cost and energy (sim/cluster/run_cost.py): hand-computed on a linear executor, the defaults
table, the cluster options refused by name, and the keys a sweep's summary gains."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from experiments.run import main as run_main
from policies.simulate import simulate
from sim.cluster.run_cost import COST_KEYS, cost_summary, gpu_rates, run_cost_summary
from sim.cluster.spec import ClusterSpec
from sim.hardware.gpu_costs import GPU_COSTS, default_cost
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace

BASE_S, PER_TOKEN_S = 0.01, 1e-4  # the linear executor: seconds per iteration, per token


def _single_request_duration(prompt: int, output: int) -> float:
    """Prefill (base + P tokens) then output - 1 decode iterations of one token each."""
    return BASE_S + PER_TOKEN_S * prompt + (output - 1) * (BASE_S + PER_TOKEN_S)


def test_single_request_cost_and_energy_equal_the_hand_computed_values():
    prompt, output = 100, 11
    ex = LinearExecutor(base_s=BASE_S, per_token_s=PER_TOKEN_S)
    res = simulate(make_trace([(0.0, prompt, output)]), "orca", {}, [ex])
    duration = _single_request_duration(prompt, output)  # 0.02 + 10 * 0.0101 = 0.121 s
    assert res.summary["duration_s"] == pytest.approx(duration)
    cluster = ClusterSpec(gpu="H100-80GB", tensor_parallel=2, gpu_price_per_hour=3.6,
                          power={"idle_w": 100, "busy_w": 700})
    got = run_cost_summary(cluster, res.records, res.instances, duration)
    dollars = 2 * duration / 3600 * 3.6  # 2 GPUs x hours x $/GPU-hour
    joules = 2 * 700 * duration  # busy the whole run: busy power throughout
    assert set(got) == set(COST_KEYS)
    assert got["gpu_hours"] == pytest.approx(2 * duration / 3600)
    assert got["cost_usd"] == pytest.approx(dollars)
    assert got["usd_per_m_output_tokens"] == pytest.approx(dollars / output * 1e6)
    assert got["usd_per_m_total_tokens"] == pytest.approx(dollars / (prompt + output) * 1e6)
    assert got["energy_j"] == pytest.approx(joules)
    assert got["j_per_output_token"] == pytest.approx(joules / output)
    assert got["j_per_request"] == pytest.approx(joules)
    assert got["avg_power_w"] == pytest.approx(2 * 700)


def test_idle_time_between_requests_draws_idle_power():
    prompt, output, gap = 100, 11, 1.0
    one = _single_request_duration(prompt, output)
    ex = LinearExecutor(base_s=BASE_S, per_token_s=PER_TOKEN_S)
    res = simulate(make_trace([(0.0, prompt, output), (one + gap, prompt, output)]), "orca", {},
                   [ex])
    duration = 2 * one + gap
    assert res.summary["duration_s"] == pytest.approx(duration)
    cluster = ClusterSpec(gpu="A100-80GB", num_instances=1)  # the defaults: 400 W busy, 60 idle
    got = run_cost_summary(cluster, res.records, res.instances, duration)
    busy_w, idle_w = 400.0, 60.0
    joules = idle_w * duration + (busy_w - idle_w) * 2 * one  # linear in the busy share
    assert got["energy_j"] == pytest.approx(joules)
    assert got["avg_power_w"] == pytest.approx(joules / duration)
    assert got["j_per_request"] == pytest.approx(joules / 2)
    assert got["cost_usd"] == pytest.approx(duration / 3600 * 40.9657 / 8)


def test_two_instances_each_count_their_gpus_and_busy_time():
    ex = LinearExecutor(base_s=BASE_S, per_token_s=PER_TOKEN_S)
    res = simulate(make_trace([(0.0, 100, 11)]), "orca", {}, [ex, ex])
    duration = res.summary["duration_s"]
    busy = res.instances["gpu_busy_s"].sum()  # one instance ran it, the other idled
    assert busy == pytest.approx(duration)
    got = run_cost_summary(ClusterSpec(gpu="L40S", num_instances=2, tensor_parallel=4),
                           res.records, res.instances, duration)
    cost = GPU_COSTS["L40S"]
    assert got["gpu_hours"] == pytest.approx(8 * duration / 3600)
    assert got["energy_j"] == pytest.approx(8 * cost.idle_w * duration +
                                            4 * (cost.busy_w - cost.idle_w) * busy)


def test_instance_groups_each_pay_their_own_gpu_and_tensor_parallelism():
    ex = LinearExecutor(base_s=BASE_S, per_token_s=PER_TOKEN_S)
    res = simulate(make_trace([(0.0, 100, 11), (0.0, 50, 21)]), "orca", {}, [ex, ex])
    duration = res.summary["duration_s"]
    busy = res.instances.sort_values("instance_id")["gpu_busy_s"].tolist()
    cluster = ClusterSpec(instances=({"gpu": "H100-80GB", "count": 1},
                                     {"gpu": "A100-80GB", "tensor_parallel": 2}))
    got = run_cost_summary(cluster, res.records, res.instances, duration)
    h100, a100 = GPU_COSTS["H100-80GB"], GPU_COSTS["A100-80GB"]
    assert got["gpu_hours"] == pytest.approx(3 * duration / 3600)
    assert got["cost_usd"] == pytest.approx(duration / 3600 * (h100.price_per_hour +
                                                               2 * a100.price_per_hour))
    assert got["energy_j"] == pytest.approx(
        h100.idle_w * duration + (h100.busy_w - h100.idle_w) * busy[0] +
        2 * (a100.idle_w * duration + (a100.busy_w - a100.idle_w) * busy[1]))


def test_defaults_table_prices_per_gpu_and_idle_below_busy():
    assert default_cost("h100-80gb").price_per_hour == pytest.approx(98.32 / 8)
    assert default_cost("A10G").busy_w == 300
    assert default_cost("my-own-gpu") is None
    for name, cost in GPU_COSTS.items():
        assert 0 < cost.idle_w < cost.busy_w, name
        assert cost.idle_w == pytest.approx(0.15 * cost.busy_w, abs=0.05), name


def test_a_gpu_without_defaults_gives_nan_unless_priced():
    nan = cost_summary([("my-own-gpu", 1)], [1.0], 2.0, 10, 20, 1)
    assert math.isnan(nan["cost_usd"]) and math.isnan(nan["energy_j"])
    priced = cost_summary([("my-own-gpu", 1)], [1.0], 2.0, 10, 20, 1, price=1.8,
                          power={"idle_w": 10, "busy_w": 110})
    assert priced["cost_usd"] == pytest.approx(2.0 / 3600 * 1.8)
    assert priced["energy_j"] == pytest.approx(10 * 2.0 + 100 * 1.0)


@pytest.mark.parametrize("kwargs, field", [
    ({"gpu_price_per_hour": 0.0}, "cluster.gpu_price_per_hour"),
    ({"gpu_price_per_hour": -1.0}, "cluster.gpu_price_per_hour"),
    ({"gpu_price_per_hour": "2"}, "cluster.gpu_price_per_hour"),
    ({"gpu_price_per_hour": math.inf}, "cluster.gpu_price_per_hour"),
    ({"power": {"idle_w": -1}}, "cluster.power.idle_w"),
    ({"power": {"busy_w": 0}}, "cluster.power.busy_w"),
    ({"power": {"busy_w": True}}, "cluster.power.busy_w"),
    ({"power": {"idle_w": 500, "busy_w": 400}}, "cluster.power.idle_w"),
    ({"power": {"tdp_w": 400}}, "cluster.power.tdp_w"),
    ({"power": 400}, "cluster.power"),
])
def test_bad_cost_options_are_refused_by_name(kwargs, field):
    with pytest.raises(ConfigError) as err:
        ClusterSpec(**kwargs)
    assert err.value.field == field


def test_an_override_crossing_the_default_is_refused_by_name():
    with pytest.raises(ConfigError) as err:
        gpu_rates("A100-80GB", None, {"idle_w": 450})  # above the default busy 400 W
    assert err.value.field == "cluster.power.idle_w"


def test_a_sweep_summary_gains_the_cost_keys(tmp_path):
    config = {"name": "cost", "workload": {"synthetic": {"num_requests": 20,
                                                         "lengths": "sharegpt"}},
              "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB", "tensor_parallel": 2,
                          "gpu_price_per_hour": 2.0},
              "policies": [{"name": "orca", "params": {"max_batch_size": 8}}],
              "request_rates": [2], "seeds": [0]}
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(config))
    assert run_main([str(path), "--out", str(tmp_path / "out"), "--no-progress",
                     "--jobs", "1"]) == 0
    row = json.loads((tmp_path / "out" / "summary.json").read_text())[0]
    assert row["gpu_hours"] == pytest.approx(2 * row["duration_s"] / 3600)
    assert row["cost_usd"] == pytest.approx(row["gpu_hours"] * 2.0)
    assert 2 * 60 <= row["avg_power_w"] <= 2 * 400  # between all idle and all busy


def test_the_h200_has_no_list_price_on_the_tables_basis_so_its_cost_is_nan_unless_priced():
    """AWS sold the H200 only as Capacity Blocks: a reservation rate beside on-demand prices
    would make it look cheaper than the H100, so it has power defaults but no price."""
    assert default_cost("H200").price_per_hour is None and default_cost("H200").busy_w == 700
    got = cost_summary([("H200", 1)], [1.0], 3600.0, 10, 20, 1)
    assert math.isnan(got["cost_usd"]) and got["energy_j"] > 0
    priced = cost_summary([("H200", 1)], [1.0], 3600.0, 10, 20, 1, price=4.0)
    assert priced["cost_usd"] == pytest.approx(4.0)

"""Priority scheduling on the paged policies (policies/priority.py): vLLM V1's waiting order and
preemption victim, aging with its starvation bound, exact jumps."""

import math

import numpy as np
import pandas as pd
import pytest

from policies.registry import get_policy, make_config
from policies.simulate import simulate
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace, random_trace
from tests.test_engine import OneIterationExecutor

PAGED = ("vllm", "vllm_v0", "sarathi")
SMALL = {"vllm": {"max_num_batched_tokens": 256, "max_num_seqs": 8},
         "vllm_v0": {"max_num_batched_tokens": 512, "max_num_seqs": 8},
         "sarathi": {"token_budget": 256, "max_num_seqs": 8}}  # a queue builds up


def mixed_trace(seed: int, n: int = 120, rate: float = 30.0) -> pd.DataFrame:
    """A random overloaded trace, every third request of priority 0 (interactive), else 1."""
    df = random_trace(np.random.default_rng(seed), n, rate=rate, max_prompt=150, max_output=40)
    df["priority"] = np.where(np.arange(n) % 3 == 0, 0, 1)
    return df


@pytest.mark.parametrize("policy", PAGED)
def test_priority_improves_high_priority_ttft(policy):
    trace = mixed_trace(0)
    ex = [LinearExecutor(capacity=3000, per_ctx_s=1e-6)]
    fcfs = simulate(trace, policy, SMALL[policy], ex).records
    prio = simulate(trace, policy, {**SMALL[policy], "scheduling_policy": "priority"},
                    ex).records
    high = trace["priority"].to_numpy() == 0
    assert (prio["status"] == "finished").all()
    assert prio["ttft_s"][high].mean() < 0.7 * fcfs["ttft_s"][high].mean()
    assert prio["ttft_s"][~high].mean() > fcfs["ttft_s"][~high].mean()  # paid by the others
    assert list(prio["priority"]) == list(trace["priority"])  # records carry the priority


def keys(records: pd.DataFrame, aging_s: float) -> np.ndarray:
    return records["arrival_s"].to_numpy() + records["priority"].to_numpy() * aging_s


@pytest.mark.parametrize("policy", PAGED)
@pytest.mark.parametrize("seed", [1, 2])
def test_aging_bound_no_request_is_overtaken_by_a_much_later_one(policy, seed):
    """With priority_aging_s A, request r (priority p) is admitted before every request x
    (priority q) that arrived more than (p - q) * A after it, preemptions or not."""
    aging = 0.2
    trace = mixed_trace(seed, n=150, rate=40.0)
    trace["priority"] = np.random.default_rng(seed).integers(0, 4, len(trace))
    res = simulate(trace, policy, {**SMALL[policy], "scheduling_policy": "priority",
                                   "priority_aging_s": aging},
                   [LinearExecutor(capacity=700, per_ctx_s=1e-6)])
    rec = res.records
    assert (rec["status"] == "finished").all()
    assert res.summary["num_preemptions"] > 0  # the victims' rule is exercised too
    key, arrival, sched = keys(rec, aging), rec["arrival_s"].to_numpy(), \
        rec["scheduled_s"].to_numpy()
    for r in range(len(rec)):
        worse = (key > key[r]) & (sched > arrival[r])  # admitted, worse key, after r arrived
        assert (sched[worse] >= sched[r]).all(), f"request {r} overtaken"


def starving_trace() -> pd.DataFrame:
    """One low-priority request at 0.05 s inside a 6 s stream of high-priority ones that keep
    a one-request engine busy."""
    rows = [(0.01 * i, 40, 8) for i in range(600)]
    df = make_trace(rows + [(0.05, 40, 8)]).sort_values("arrival_s", kind="stable")
    df = df.reset_index(drop=True)
    df["priority"] = 0
    df.loc[df["arrival_s"].eq(0.05) & (df.index == 6), "priority"] = 3
    return df


@pytest.mark.parametrize("policy", PAGED)
def test_without_aging_low_priority_starves_with_aging_it_waits_its_bound(policy):
    trace = starving_trace()
    low = int(np.flatnonzero(trace["priority"].to_numpy() == 3)[0])
    params = {**SMALL[policy], "max_num_seqs": 1, "scheduling_policy": "priority"}
    ex = [LinearExecutor(capacity=4000)]
    starved = simulate(trace, policy, params, ex).records
    aging = 0.5
    aged = simulate(trace, policy, {**params, "priority_aging_s": aging}, ex).records
    high = trace["priority"].to_numpy() == 0
    # without aging it runs after every high-priority request that arrived before it ran
    assert starved.loc[low, "queueing_s"] > 5.0
    # with aging, no high request arriving (3 - 0) * A or more after it is admitted before it
    arrival = trace["arrival_s"].to_numpy()
    after = high & (arrival > arrival[low] + 3 * aging)
    assert aged.loc[low, "scheduled_s"] <= aged.loc[after, "scheduled_s"].min()
    assert aged.loc[low, "queueing_s"] < 3 * aging + aged.loc[high, "queueing_s"].max() + 0.01


def test_the_victim_is_the_worst_priority_not_the_last_admitted():
    # two long requests fill the cache; the later one (admitted last) has the better priority
    trace = make_trace([(0.0, 100, 200), (0.001, 100, 200)])
    trace["priority"] = [5, 0]
    params = {"max_num_batched_tokens": 512, "max_num_seqs": 8, "block_size": 16}
    ex = [LinearExecutor(capacity=480)]
    fcfs = simulate(trace, "vllm", params, ex)
    prio = simulate(trace, "vllm", {**params, "scheduling_policy": "priority"}, ex)
    first_victim = lambda res: int(res.events.loc[res.events["kind"] == "preempt",
                                                  "request_id"].iloc[0])
    assert first_victim(fcfs) == 1  # V1 FCFS: the last admitted
    assert first_victim(prio) == 0  # priority: the worst (priority, arrival)
    assert prio.records.loc[1, "finish_s"] < fcfs.records.loc[1, "finish_s"]


@pytest.mark.parametrize("policy", PAGED)
@pytest.mark.parametrize("seed, capacity", [(5, 2000), (6, 500), (7, 450)])
def test_priority_jumps_are_exact(policy, seed, capacity):
    """Also after a preemption, where the freed blocks may fit a better waiting request."""
    trace = mixed_trace(seed, n=80, rate=25.0)
    trace["priority"] = np.random.default_rng(seed).integers(0, 3, len(trace))
    ex = LinearExecutor(capacity=capacity, per_ctx_s=1e-6)
    for extra in ({"scheduling_policy": "priority"},
                  {"scheduling_policy": "priority", "priority_aging_s": 0.05,
                   "enable_prefix_caching": False}):
        params = {**SMALL[policy], **extra}
        jump = simulate(trace, policy, params, [ex, ex])
        step = simulate(trace, policy, params, [OneIterationExecutor(ex)] * 2)
        for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s"):
            np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9,
                                       atol=1e-9)
        assert jump.summary["num_preemptions"] == step.summary["num_preemptions"]
        assert len(jump.steps) < len(step.steps)


def test_a_vllm_v0_step_after_a_preemption_does_not_jump_past_a_better_waiting_request():
    """Under FCFS the victim heads the queue and does not fit the blocks it freed; under
    priority a better request may, at the next iteration, so that step runs one iteration."""
    rows = [(0.092649, 199, 57, 0), (0.331389, 169, 8, 1), (0.560623, 120, 43, 2),
            (0.572385, 91, 37, 3), (0.679027, 227, 38, 2), (0.821915, 121, 1, 1),
            (0.994529, 147, 31, 1), (1.087275, 11, 39, 0), (1.147961, 63, 2, 0),
            (1.316329, 154, 23, 3), (1.419973, 140, 17, 3), (1.468263, 224, 57, 1),
            (1.5799, 114, 12, 3)]
    trace = make_trace([r[:3] for r in rows]).assign(priority=[r[3] for r in rows])
    ex = LinearExecutor(capacity=434, per_ctx_s=1e-6)
    params = {"enable_prefix_caching": False, "scheduling_policy": "priority"}
    jump = simulate(trace, "vllm_v0", params, [ex]).records
    step = simulate(trace, "vllm_v0", params, [OneIterationExecutor(ex)]).records
    assert jump.loc[8, "scheduled_s"] == pytest.approx(1.163671, abs=1e-6)  # right after 4's
    np.testing.assert_allclose(jump["finish_s"], step["finish_s"], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("params, field", [
    ({"scheduling_policy": "lifo"}, "scheduling_policy"),
    ({"priority_aging_s": 1.0}, "priority_aging_s"),
    ({"scheduling_policy": "priority", "priority_aging_s": 0}, "priority_aging_s"),
    ({"scheduling_policy": "priority", "priority_aging_s": math.inf}, "priority_aging_s"),
])
@pytest.mark.parametrize("policy", PAGED)
def test_bad_scheduling_settings_are_config_errors(policy, params, field):
    with pytest.raises(ConfigError) as err:
        make_config(get_policy(policy), params)
    assert err.value.field == field


def test_policies_ordering_their_own_way_refuse_priority():
    with pytest.raises(ConfigError, match="lacb orders waiting requests"):
        make_config(get_policy("lacb"), {"scheduling_policy": "priority"})
    from policies.disagg_pools import pool_params
    with pytest.raises(ConfigError, match="disagg"):
        pool_params("vllm", {"scheduling_policy": "priority"}, "prefill_params")

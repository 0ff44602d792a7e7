"""Multi-LoRA: adapter bytes and load time, step cost with k distinct adapters, slots never above
max_loras, no request without its adapter resident, waits, and configuration errors."""

import dataclasses

import numpy as np
import pytest

from policies.lora import LoraScheduler, LoraSlots
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step
from sim.util.errors import ConfigError
from tests.factories import make_trace, random_trace
from tests.test_properties import check_invariants

RANK16 = 16 * (8192 + 2 * 8192 + 8192 + 3 * (4096 + 11008)) * 32 * 2  # llama-2-7b, all modules


def lora_executor(max_loras: int = 4, **lora):
    return build_executors(ClusterSpec(lora={"max_loras": max_loras, **lora},
                                       cost_model={"kind": "roofline"}))[0]


class Watch:
    """Delegates to an executor and keeps every Step it runs."""

    def __init__(self, inner) -> None:
        self.inner, self.steps = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def execute(self, step, until_s=float("inf")):
        self.steps.append(step)
        return self.inner.execute(step, until_s)


# ---- cost -------------------------------------------------------------------------------------
def test_adapter_bytes_load_time_and_slot_memory():
    ex = lora_executor()
    lora = ex.lora
    assert lora.adapter_bytes == RANK16  # r (d_in + d_out) per adapted layer, fp16, 32 blocks
    link = lora.link  # PCIe 4.0 host link: 25 GB/s, 10 us
    assert lora.load_seconds(1) == pytest.approx(link.latency_s + RANK16 / 25e9)
    assert lora.load_seconds(3) == pytest.approx(3 * lora.load_seconds(1))
    attn = lora_executor(target_modules="attention", max_lora_rank=8).lora
    assert attn.adapter_bytes == 8 * 4 * 8192 * 32 * 2
    dep = ex.cost_model.deployment
    want = int((dep.kv_bytes_per_gpu - 4 * RANK16) // dep.kv_bytes_per_token_per_gpu)
    assert ex.kv_capacity_tokens == want and ex.instance_info(0).max_loras == 4


@pytest.mark.parametrize("k", [1, 2, 5])
def test_decode_step_with_k_distinct_adapters(k):
    ex = lora_executor()
    rows = 10
    base = Step(0, tuple(range(rows)), (1,) * rows, (500,) * rows, (True,) * rows,
                num_iterations=3)
    ids = tuple(i % k for i in range(rows))
    with_lora = dataclasses.replace(base, lora_ids=ids)
    read = RANK16 / (ex.cost_model.deployment.gpu.hbm_bandwidth * 0.85)  # memory-bound segment
    flops = 2 * 16 * 78080 * 32 * (rows // k + 1)  # its largest segment's FLOPs
    assert flops / (312e12 * 0.6) < read  # (A100: decode segments are memory-bound)
    r0, r1 = ex.execute(base), ex.execute(with_lora)
    assert np.diff(r1.iteration_ends_s - r0.iteration_ends_s, prepend=0.0) == pytest.approx(
        [k * read] * 3)
    loads = dataclasses.replace(with_lora, num_lora_loads=2)
    assert ex.execute(loads).duration_s - r1.duration_s == pytest.approx(ex.lora.load_seconds(2))
    none = dataclasses.replace(base, lora_ids=(-1,) * rows)  # base-model rows cost nothing
    assert ex.execute(none).duration_s == pytest.approx(r0.duration_s)


def test_prefill_segment_is_compute_bound():
    lora = lora_executor().lora
    flops = 2 * 16 * 78080 * 32 * 4096
    assert lora.segment_seconds(4096) == pytest.approx(
        max(flops / (312e12 * 0.6), RANK16 / (2.039e12 * 0.85)), rel=1e-3)


# ---- scheduling ----------------------------------------------------------------------------------
def test_slots_lru_and_pinning():
    slots = LoraSlots(2)
    assert slots.acquire(1, set()) == (True, False) and slots.acquire(2, set()) == (True, False)
    assert slots.acquire(1, set()) == (False, False)  # resident: now most recently used
    assert not slots.can_place(3, {1, 2})  # both pinned by running requests
    assert slots.acquire(3, {1}) == (True, True) and list(slots.resident) == [1, 3]  # 2 evicted
    assert slots.pending_loads == 3


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi"])
@pytest.mark.parametrize("max_loras", [1, 3])
def test_never_runs_without_adapter_and_slots_bounded(policy, max_loras, monkeypatch):
    seen = []  # (resident adapters, the step's adapters) of every step built
    annotate = LoraScheduler.annotate

    def watched(slots, batch):
        seen.append((list(slots.resident), [r.lora_id for r in batch]))
        return annotate(slots, batch)

    monkeypatch.setattr(LoraScheduler, "annotate", staticmethod(watched))
    trace = random_trace(np.random.default_rng(4), 80, rate=30.0)
    watch = Watch(lora_executor(max_loras))
    res = simulate(trace, policy, {"lora_adapters": 6, "lora_zipf": 0.5}, [watch], seed=1)
    assert len(seen) == len(watch.steps)
    for (resident, ids), step in zip(seen, watch.steps):
        assert len(resident) <= max_loras and set(ids) <= set(resident)
        assert tuple(ids) == step.lora_ids
    rec, s = res.records, res.summary
    assert (rec["status"] == "finished").all() and set(rec["lora_id"]) <= set(range(6))
    assert sum(st.num_lora_loads for st in watch.steps) == s["lora_loads"]
    assert s["lora_loads"] >= rec["lora_id"].nunique() and s["lora_waits"] > 0
    assert rec["num_lora_waits"].sum() == s["lora_waits"]


def test_a_request_waits_for_a_slot_and_records_why():
    trace = make_trace([(0.0, 50, 40), (0.001, 50, 40), (0.002, 50, 5)])
    trace["lora_id"] = [0, 1, 0]
    res = simulate(trace, "vllm_v0", {"lora_adapters": 2}, [lora_executor(1)])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_lora_waits"] > 0  # adapter 1 waits for adapter 0's requests
    assert rec.loc[2, "scheduled_s"] < rec.loc[1, "scheduled_s"]  # adapter 0 passes it
    assert rec.loc[1, "scheduled_s"] >= rec.loc[0, "finish_s"]
    assert res.summary["lora_loads"] == 2 and res.summary["lora_evictions"] == 1


def test_invariants_hold_with_lora():
    trace = make_trace([(0.01 * i, 30 + 17 * i, 20 + 9 * i) for i in range(15)])
    check_invariants(trace, "sarathi", [lora_executor(2)], {"lora_adapters": 5,
                                                            "block_size": 8})


def test_zipf_popularity():
    trace = make_trace([(0.001 * i, 10, 2) for i in range(3000)])
    rec = simulate(trace, "vllm_v0", {"lora_adapters": 4, "lora_zipf": 1.0},
                   [lora_executor(4)]).records
    share = rec["lora_id"].value_counts(normalize=True).sort_index().to_numpy()
    want = np.array([1, 1 / 2, 1 / 3, 1 / 4]) / (25 / 12)
    assert share == pytest.approx(want, abs=0.03)


# ---- errors ----------------------------------------------------------------------------------------
def test_lora_needs_adapter_slots():
    with pytest.raises(ConfigError) as err:
        simulate(make_trace([(0.0, 10, 10)]), "vllm_v0", {"lora_adapters": 2},
                 build_executors(ClusterSpec(cost_model={"kind": "roofline"})))
    assert err.value.field == "lora_adapters" and "cluster.lora" in str(err.value)


@pytest.mark.parametrize("policy,params,field", [
    ("vllm", {"lora_adapters": 2}, "lora_adapters"),
    ("vllm_v0", {"lora_adapters": 2, "preemption_mode": "swap"}, "preemption_mode"),
    ("vllm_v0", {"lora_adapters": -1}, "lora_adapters"),
    ("vllm_v0", {"lora_adapters": 2, "lora_zipf": -1.0}, "lora_zipf")])
def test_bad_policy_params(policy, params, field):
    with pytest.raises(ConfigError) as err:
        simulate(make_trace([(0.0, 10, 10)]), policy, params, [lora_executor()])
    assert err.value.field == field


@pytest.mark.parametrize("lora,field", [
    ({"max_loras": 0}, "cluster.lora.max_loras"), ({"max_lora_rank": 1024},
                                                   "cluster.lora.max_lora_rank"),
    ({"target_modules": "mlp"}, "cluster.lora.target_modules"), ({"rank": 8}, "cluster.lora.rank")])
def test_bad_cluster_lora(lora, field):
    with pytest.raises(ConfigError) as err:
        ClusterSpec(lora=lora)
    assert err.value.field == field
    with pytest.raises(ConfigError):
        ClusterSpec(lora={"max_loras": 2}, backend="real")

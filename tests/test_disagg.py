"""`disagg`: prefill/decode pools with KV transfer (policies/disagg*.py, sim/memory/kv_transfer.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from policies.disagg import DisaggPolicy
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import Step, StepResult
from sim.engine.simulate import run_simulation
from sim.memory.kv_transfer import (GB, GBIT, LINKS, Link, exposed_seconds, link_preset, measured_link,
                             read_send_recv)
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, make_trace

KV_BPT = 1e5  # bytes per token in tests with linear executors


class OneIteration:
    """Runs interruptible Steps one iteration at a time (no jumps over decode runs)."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name

    @property
    def kv_capacity_tokens(self):
        return self.inner.kv_capacity_tokens

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        return self.inner.execute(step, 0.0 if step.stop_on_arrival else until_s)


def random_trace(seed: int, n: int, rate: float, max_prompt: int = 400,
                 max_out: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(1 / rate, n)),
                         "prompt_tokens": rng.integers(1, max_prompt, n),
                         "output_tokens": rng.integers(1, max_out, n)})


def params(**kw):
    return {"num_prefill": 1, "kv_bytes_per_token": KV_BPT, **kw}


# ---- links --------------------------------------------------------------------------------
def test_link_time_is_latency_plus_bytes_over_bandwidth():
    link = link_preset("rdma_400g")
    assert link.seconds(0) == 10e-6
    assert link.seconds(50e6) == pytest.approx(10e-6 + 50e6 / (400e9 / 8), rel=1e-12)
    assert link_preset("infiniband_200g") is LINKS["rdma_200g"]
    assert LINKS["ethernet_100g"].bandwidth_bytes_per_s == 100 * GBIT
    assert LINKS["nvlink"].bandwidth_bytes_per_s == 450 * GB
    assert LINKS["free"].seconds(1e12) == 0.0
    with pytest.raises(ConfigError, match="link='warp'.*unknown link"):
        link_preset("warp")
    with pytest.raises(ConfigError, match="bandwidth_bytes_per_s"):
        Link("x", 0.0, 0.0)


def test_layerwise_streaming_exposes_one_layer_or_what_the_prefill_did_not_hide():
    link = Link("l", 1e-3, 1e9)  # 1 ms + 1 s per GB
    whole = link.seconds(1e9)
    assert exposed_seconds(link, 1e9) == whole
    assert exposed_seconds(link, 1e9, True, 10, overlap_s=0.2) == pytest.approx(whole - 0.2)
    assert exposed_seconds(link, 1e9, True, 10, overlap_s=5.0) == pytest.approx(1e-3 + 0.1)


def write_send_recv(path, rows):
    """Vidur's layout: size (bytes), median ms, intra (2) / inter (1) devices per node."""
    pd.DataFrame([{"time_stats.send_recv.median": ms, "size": size, "num_workers": 2,
                   "devices_per_node": per_node, "collective": "send_recv"}
                  for size, ms, per_node in rows]).to_csv(path)


def test_measured_curve_interpolates_and_extends_at_the_fitted_bandwidth(tmp_path):
    path = tmp_path / "send_recv.csv"
    inter = [(1000, 0.02, 1), (2000, 0.03, 1), (3000, 0.04, 1), (4000, 0.05, 1)]
    write_send_recv(path, inter + [(1000, 0.001, 2), (4000, 0.002, 2)])
    link = read_send_recv(path)
    assert link.seconds(1500) == pytest.approx(0.025e-3, rel=1e-12)  # halfway, in seconds
    assert link.seconds(500) == pytest.approx(0.02e-3)  # below the smallest size: its time
    # past the largest size: 1e-5 ms per byte on the largest quarter (>= 2 points)
    assert link.seconds(14000) == pytest.approx(0.05e-3 + 10000 * 1e-8, rel=1e-9)
    intra = read_send_recv(path, inter_node=False)
    assert intra.seconds(2500) == pytest.approx(0.0015e-3, rel=1e-12)
    with pytest.raises(ConfigError, match="send_recv_csv"):
        read_send_recv(tmp_path / "nope.csv")
    with pytest.raises(ConfigError, match="send_recv_csv"):
        measured_link(np.array([1.0]), np.array([1.0]), "one point")


def test_the_shared_a100_curve_crosses_nodes_slower_than_nvlink():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "shared/data/profiles/a100/network/send_recv.csv"
    if not path.is_file():
        pytest.skip("shared profiles not present")
    inter, intra = read_send_recv(path), read_send_recv(path, inter_node=False)
    assert inter.seconds(2048) == pytest.approx(0.024e-3)  # its smallest measured size
    assert 5 * GB < inter.tail_bytes_per_s < 10 * GB  # ~7.9 GB/s between hosts
    assert intra.tail_bytes_per_s > 20 * inter.tail_bytes_per_s  # NVLink inside a DGX


# ---- one request, analytically ---------------------------------------------------------------
def test_one_request_ttft_is_prefill_plus_transfer_and_it_decodes_on_the_decode_instance():
    spec = ClusterSpec(model="llama-3-8b", gpu="H100-80GB", num_instances=2,
                       cost_model={"kind": "roofline"})
    executors = build_executors(spec)
    cm = executors[0].cost_model
    prompt, out = 2000, 50
    res = simulate(make_trace([(0.0, prompt, out)]), "disagg",
                   {"num_prefill": 1, "link": "rdma_200g"}, executors)
    r = res.records.iloc[0]
    prefill_s = cm.iteration_times_from_sums(prompt, 0, 0, prompt * prompt, 1, 1)[0]
    kv_bytes = prompt * 2 * 32 * 8 * 128 * 2  # llama-3-8b: 32 layers, 8 KV heads, 128, fp16
    transfer_s = 10e-6 + kv_bytes / (200e9 / 8)
    assert r["ttft_s"] == pytest.approx(prefill_s + transfer_s, rel=1e-12)
    decode = cm.iteration_times_from_sums(1, prompt, prompt, 1, 1, 1, out - 1)
    assert r["finish_s"] == pytest.approx(prefill_s + transfer_s + decode.sum(), rel=1e-12)
    assert r["instance_id"] == 1 and r["status"] == "finished"
    steps = res.steps.groupby("instance_id")["num_computed_tokens"].sum()
    assert steps.to_dict() == {0: prompt, 1: out - 1}
    ev = res.events.set_index("kind")
    assert f"{kv_bytes} B" in ev.loc["kv_transfer", "info"]
    assert "instance 0 -> 1" in ev.loc["kv_transfer", "info"]
    assert "waited 0.000000 s" in ev.loc["decode_kv_wait", "info"]


def test_a_one_token_request_finishes_on_its_prefill_instance():
    ex = LinearExecutor()
    res = simulate(make_trace([(0.0, 100, 1)]), "disagg", params(link="pcie4"), [ex, ex])
    r = res.records.iloc[0]
    assert r["status"] == "finished" and r["instance_id"] == 0
    assert r["first_token_s"] == r["finish_s"] == pytest.approx(0.01 + 1e-4 * 100)
    assert "kv_transfer" not in set(res.events["kind"])


def test_prefill_kv_is_held_until_its_transfer_lands():
    # the prefill instance holds one 300-token prompt: the second prefill waits for the landing
    small, big = LinearExecutor(capacity=400), LinearExecutor(capacity=5000)
    link = {"link": "ethernet_100g"}  # 300 x 1e5 B at 12.5 GB/s: 2.4 ms + 20 us
    res = simulate(make_trace([(0.0, 300, 5), (0.0, 300, 5)]), "disagg", params(**link),
                   [small, big])
    rec = res.records.set_index("request_id")
    lands = rec.loc[0, "first_token_s"]
    assert lands == pytest.approx(0.01 + 0.03 + 20e-6 + 300 * KV_BPT / 12.5e9)
    assert rec.loc[1, "scheduled_s"] == pytest.approx(lands)
    assert (res.steps.query("instance_id == 0")["reserved_kv_tokens"] <= 400).all()


def test_decode_admission_waits_for_memory_and_never_rejects():
    # the decode instance holds 1.5 requests: the second waits there until the first finishes
    ex = LinearExecutor(capacity=5000)
    res = simulate(make_trace([(0.0, 200, 40), (0.0, 200, 40)]), "disagg",
                   params(link="free"), [ex, LinearExecutor(capacity=360)])
    assert (res.records["status"] == "finished").all()
    waits = res.events.query("kind == 'decode_kv_wait'")["info"].str.extract(
        r"waited ([0-9.]+) s")[0].astype(float)
    assert waits.min() == 0.0 and waits.max() > 0.1
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "first_token_s"] < rec.loc[0, "finish_s"]  # landed, then waited
    assert (res.steps.query("instance_id == 1")["reserved_kv_tokens"] <= 360).all()


# ---- a random trace -----------------------------------------------------------------------
class CheckedDisagg(DisaggPolicy):
    """Asserts after every step that no request is in both pools."""

    def update(self, step, result, now):
        done = super().update(step, result, now)
        prefill = {r.request_id for s in self.prefill.state for r in [*s.waiting, *s.running]}
        decode = {r.request_id for s in self.decode.state for r in [*s.waiting, *s.running]}
        moving = {t.request_id for t in self.transfers}
        incoming = {r.request_id for rs in self.decode.incoming for r in rs}
        assert not prefill & decode and not prefill & moving and not decode & moving
        assert moving == incoming
        return done


@pytest.mark.parametrize("pools", [("vllm", "vllm"), ("sarathi", "vllm"), ("vllm_v0", "sarathi")])
def test_invariants_on_a_random_trace(pools):
    from policies.registry import make_config

    trace = random_trace(7, 150, rate=30.0)
    caps = [3000, 2000, 900, 700]
    executors = [LinearExecutor(capacity=c, per_ctx_s=1e-6) for c in caps]
    p = params(num_prefill=2, prefill_policy=pools[0], decode_policy=pools[1], link="rdma_200g",
               layerwise=True, prefill_params={"max_num_seqs": 8} if pools[0] == "sarathi" else {})
    config = make_config(CheckedDisagg, p)
    res = run_simulation(trace, lambda infos, rec: CheckedDisagg(
        config, infos, rec, np.random.default_rng(0)), executors)
    rec, steps = res.records, res.steps
    assert len(rec) == len(trace) and rec["request_id"].is_unique
    assert (rec["status"] == "finished").all()
    assert (rec["output_tokens"] == trace["output_tokens"]).all()
    useful = int((rec["prompt_tokens"] + rec["output_tokens"] - 1).sum())
    assert int(steps["num_computed_tokens"].sum()) == useful + int(rec["num_recomputed_tokens"].sum())
    for i, cap in enumerate(caps):
        mine = steps[steps["instance_id"] == i]
        assert (mine["kv_tokens"] <= cap).all() and (mine["reserved_kv_tokens"] <= cap).all()
    multi = rec[rec["output_tokens"] > 1]
    assert multi["instance_id"].isin([2, 3]).all()  # decoded on the decode pool
    assert (rec[rec["output_tokens"] == 1]["instance_id"] < 2).all()
    assert (multi["first_token_s"] > multi["scheduled_s"]).all()
    assert (res.events["kind"] == "kv_transfer").sum() == len(multi)


@pytest.mark.parametrize("decode_policy", ["vllm", "sarathi"])
def test_decode_jumps_are_exact(decode_policy):
    trace = random_trace(3, 80, rate=20.0)
    ex = LinearExecutor(capacity=6000, per_ctx_s=1e-6)
    p = params(decode_policy=decode_policy, link="ethernet_100g")
    jump = simulate(trace, "disagg", p, [ex] * 3)
    step = simulate(trace, "disagg", p, [OneIteration(ex)] * 3)
    for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s"):
        np.testing.assert_allclose(jump.records[col], step.records[col], rtol=1e-9, atol=1e-9)
    assert len(jump.steps) < len(step.steps)


def test_a_free_link_delivers_the_first_token_when_the_prefill_samples_it():
    trace = random_trace(5, 40, rate=10.0)
    ex = LinearExecutor(capacity=6000)
    res = simulate(trace, "disagg", params(link="free", serialize_link=False), [ex, ex])
    ev = res.events.query("kind == 'kv_transfer'")
    assert ev["info"].str.contains(" in 0.000000 s").all()
    starts = ev.set_index("request_id")["time_s"]
    first = res.records.set_index("request_id")["first_token_s"]
    np.testing.assert_allclose(first[starts.index], starts, rtol=0, atol=0)


# ---- configs refused -------------------------------------------------------------------------
@pytest.mark.parametrize("bad,field", [
    ({"num_prefill": 0}, "num_prefill"),
    ({"num_prefill": 2}, "num_prefill"),  # no decode instance left of 2
    ({"link": "carrier_pigeon"}, "link"),
    ({"prefill_policy": "orca"}, "prefill_policy"),
    ({"decode_policy": "magnus"}, "decode_policy"),
    ({"decode_params": {"enable_prefix_caching": True}}, "decode_params.enable_prefix_caching"),
    ({"prefill_params": {"num_speculative_tokens": 2}}, "prefill_params.num_speculative_tokens"),
    ({"prefill_params": {"bogus": 1}}, "prefill_params.bogus"),
    ({"kv_bytes_per_token": -1.0}, "kv_bytes_per_token"),
    ({"kv_bytes_per_token": 0.0}, "kv_bytes_per_token"),  # linear executors report no KV size
    ({"send_recv_csv": "/nonexistent.csv"}, "send_recv_csv"),
])
def test_bad_configs_name_the_field(bad, field):
    ex = LinearExecutor()
    with pytest.raises(ConfigError) as info:
        simulate(make_trace([(0.0, 10, 2)]), "disagg", params(**bad), [ex, ex])
    assert info.value.field.endswith(field), info.value


def test_the_real_engine_and_hf_static_are_refused():
    ex = LinearExecutor(name="llama-2-7b fp16 on cuda [flash_attn]")
    with pytest.raises(ConfigError, match="cluster.backend"):
        simulate(make_trace([(0.0, 10, 2)]), "disagg", params(), [ex, ex])


def test_the_kv_size_comes_from_the_instances_not_their_names():
    from sim.cluster.spec import ClusterSpec, build_executors
    from sim.models.catalog import get_model

    executors = build_executors(ClusterSpec(model="llama-2-7b", gpu="H100-80GB", kv_dtype="fp8",
                                            num_instances=2))
    per_token = get_model("llama-2-7b").kv_bytes_per_token(1.0)  # fp8: one byte an element
    assert executors[0].instance_info(0).kv_bytes_per_token == per_token
    res = simulate(make_trace([(0.0, 100, 4)]), "disagg", {}, executors)
    info = res.events.query("kind == 'kv_transfer'")["info"].iloc[0]
    assert f"{100 * per_token:.0f} B" in info


# ---- prefix caching in the prefill pool ------------------------------------------------------
def shared_prefix_trace(second_arrival_s: float):
    """A and B: one 100-token prompt of one content stream (ids per 4 tokens), 5 outputs."""
    from tests.factories import stream_block_ids

    trace = make_trace([(0.0, 100, 5), (second_arrival_s, 100, 5)])
    trace["block_ids"] = [stream_block_ids(1, 105, 4)] * 2
    trace["block_tokens"] = 4
    return trace


@pytest.mark.parametrize("pool,params_,cached", [
    ("vllm", {}, 96),  # V1's default: prefix caching on; 6 full blocks of 16 hit
    ("vllm", {"enable_prefix_caching": False}, 0),
    ("vllm_v0", {"enable_prefix_caching": True}, 96),
    ("sarathi", {}, 0),  # off by default there
])
def test_the_prefill_pool_caches_prefixes_and_ttft_is_the_uncached_prefill_plus_transfer(
        pool, params_, cached):
    ex = LinearExecutor()
    p = params(prefill_policy=pool, prefill_params=params_, link="pcie4")
    res = simulate(shared_prefix_trace(1.0), "disagg", p, [ex, ex])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_cached_tokens"] == cached
    transfer = LINKS["pcie4"].seconds(100 * KV_BPT)  # the whole prompt's KV is sent
    prefill = ex.base_s + ex.per_token_s * (100 - cached)
    assert rec.loc[1, "first_token_s"] == pytest.approx(1.0 + prefill + transfer, rel=1e-12)
    assert (rec["status"] == "finished").all()
    assert res.steps.query("instance_id == 0")["num_computed_tokens"].sum() == 200 - cached
    if cached:
        assert res.summary["prefix_hit_rate"] == pytest.approx(cached / 200)


def test_a_prompt_held_for_its_transfer_is_shared_by_the_next_prefill():
    """B arrives while A's KV is still in transfer: A's held blocks are its cached prompt
    blocks, so B starts from them, and the prefill instance holds them once."""
    ex = LinearExecutor(capacity=200)  # 12 blocks of 16: A's 7 and B's 7 do not fit apart
    p = params(link="ethernet_100g", serialize_link=True)  # 0.8 ms + 20 us per 100 tokens
    res = simulate(shared_prefix_trace(0.0105), "disagg", p, [ex, LinearExecutor()])
    rec = res.records.set_index("request_id")
    assert rec.loc[1, "num_cached_tokens"] == 96
    assert rec.loc[1, "scheduled_s"] < rec.loc[0, "first_token_s"]  # while A's KV moves
    assert (res.steps.query("instance_id == 0")["reserved_kv_tokens"] <= 200).all()


def test_invariants_with_prefix_caching_in_the_prefill_pool():
    from policies.registry import make_config
    from tests.factories import with_block_ids

    trace = with_block_ids(random_trace(11, 150, rate=30.0), 8)
    caps = [3000, 2000, 900, 700]
    executors = [LinearExecutor(capacity=c, per_ctx_s=1e-6) for c in caps]
    p = params(num_prefill=2, link="rdma_200g", prefill_params={"router": "cache_aware"})
    config = make_config(CheckedDisagg, p)
    res = run_simulation(trace, lambda infos, rec: CheckedDisagg(
        config, infos, rec, np.random.default_rng(0)), executors)
    rec, steps = res.records, res.steps
    assert (rec["status"] == "finished").all() and rec["num_cached_tokens"].sum() > 0
    useful = int((rec["prompt_tokens"] + rec["output_tokens"] - 1).sum())
    assert int(steps["num_computed_tokens"].sum()) == useful + int(
        rec["num_recomputed_tokens"].sum() - rec["num_cached_tokens"].sum())
    for i, cap in enumerate(caps):
        mine = steps[steps["instance_id"] == i]
        assert (mine["kv_tokens"] <= cap).all() and (mine["reserved_kv_tokens"] <= cap).all()

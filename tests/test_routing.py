"""Routers: choices on hand-built loads, consistent hashing stability, session affinity and
heterogeneous clusters end to end."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from policies.routing import HashRing, InstanceLoad, build_router, check_router
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.request import Request
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, random_trace


def req(rid: int = 0, prompt: int = 10, session: str | None = None) -> Request:
    return Request(rid, 0.0, prompt, 5, session_id=session)


def load(i: int, waiting: list[Request], running: list[Request] = (), reserved: int = 0,
         capacity: int = 1000) -> InstanceLoad:
    return InstanceLoad(i, list(waiting), list(running), reserved, capacity)


def test_round_robin_cycles_over_candidates():
    r = build_router("round_robin", 3)
    loads = [load(i, []) for i in range(3)]
    assert [r.route(req(k), loads) for k in range(5)] == [0, 1, 2, 0, 1]
    assert r.route(req(), [loads[0], loads[2]]) == 2  # skips a candidate that cannot fit


def test_least_requests_tokens_and_kv_pick_different_instances():
    # instance 0: one huge request; 1: three small ones; 2: twice the memory, one mid request
    loads = [load(0, [req(prompt=900)]), load(1, [req(prompt=10)] * 3),
             load(2, [req(prompt=600)], capacity=2000)]
    assert build_router("least_requests", 3).route(req(), loads) == 0  # 1 request, lowest id
    assert build_router("least_tokens", 3).route(req(), loads) == 1  # 30 tokens
    assert build_router("least_kv", 3).route(req(), loads) == 1  # 0.03 < 0.3 < 0.9
    assert loads[2].kv_load == pytest.approx(0.3)
    assert build_router("least_loaded", 3).route(req(), loads) == 0  # the old name


def test_kv_load_counts_reservation_and_waiting_prompts():
    lo = load(0, [req(prompt=100)], [req(prompt=50)], reserved=300, capacity=1000)
    assert (lo.num_requests, lo.num_tokens, lo.kv_load) == (2, 150, pytest.approx(0.4))


def test_hash_ring_adding_an_instance_moves_only_keys_it_takes():
    ring = HashRing(range(4))
    keys = [f"session-{k}" for k in range(4000)]
    before = {k: ring.owner(k) for k in keys}
    ring.add(4)
    after = {k: ring.owner(k) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == 4 for k in moved)  # nothing moves between old instances
    assert 0.1 < len(moved) / len(keys) < 0.3  # about 1/5 of the keys
    ring.remove(4)
    assert {k: ring.owner(k) for k in keys} == before


def test_hash_ring_spreads_keys_and_walk_visits_each_instance_once():
    ring = HashRing(range(4))
    owners = np.bincount([ring.owner(f"s{k}") for k in range(4000)], minlength=4)
    assert owners.min() > 0.6 * 1000 and owners.max() < 1.4 * 1000
    walk = ring.walk("s1")
    assert sorted(walk) == [0, 1, 2, 3] and walk[0] == ring.owner("s1")


def test_session_affinity_is_sticky_and_falls_back():
    r = build_router("session_affinity", 4)
    loads = [load(i, []) for i in range(4)]
    home = r.route(req(session="conv-7"), loads)
    busy = [load(i, [req()] * (10 if i == home else 0)) for i in range(4)]
    assert r.route(req(session="conv-7"), busy) == home  # load does not move a session
    others = [lo for lo in busy if lo.instance_id != home]
    assert r.route(req(session="conv-7"), others) != home  # its instance cannot hold it
    assert r.route(req(session=None), busy) == min(i for i in range(4) if i != home)


def session_trace(num_sessions: int, turns: int) -> pd.DataFrame:
    rows = [(s * 0.05 + t * 1.0, 50 + 30 * t, 20, f"s{s}")
            for s in range(num_sessions) for t in range(turns)]
    return pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens",
                                       "session_id"])


@pytest.mark.parametrize("policy", ["vllm_v0", "sarathi", "orca"])
def test_every_turn_of_a_session_lands_on_one_instance(policy):
    trace = session_trace(12, 4)
    res = simulate(trace, policy, {"router": "session_affinity"},
                   [LinearExecutor(capacity=5000)] * 4, seed=0)
    rec = res.records.merge(trace.reset_index(names="request_id")[["request_id", "session_id"]])
    per_session = rec.groupby("session_id")["instance_id"].nunique()
    assert (per_session == 1).all()
    assert rec["instance_id"].nunique() > 1  # sessions still spread


def test_round_robin_scatters_sessions():
    trace = session_trace(12, 4)
    res = simulate(trace, "vllm_v0", {"router": "round_robin"},
                   [LinearExecutor(capacity=5000)] * 4, seed=0)
    rec = res.records.merge(trace.reset_index(names="request_id")[["request_id", "session_id"]])
    assert (rec.groupby("session_id")["instance_id"].nunique() > 1).any()


def test_least_kv_favours_the_larger_instance():
    trace = random_trace(np.random.default_rng(0), 300, rate=200.0, max_prompt=400)
    executors = [LinearExecutor(capacity=20_000), LinearExecutor(capacity=2_000)]
    res = simulate(trace, "vllm_v0", {"router": "least_kv"}, executors, seed=0)
    counts = res.records["instance_id"].value_counts()
    assert counts[0] > 2 * counts[1]


def test_heterogeneous_cluster_spec_builds_one_executor_per_instance():
    spec = ClusterSpec(instances=[{"gpu": "H100-80GB", "count": 2}, {"gpu": "A100-40GB"}])
    assert spec.num_instances == 3
    names = [ex.name for ex in build_executors(spec)]
    assert names[0] == names[1] != names[2] and "A100-40GB" in names[2]


@pytest.mark.parametrize("kwargs, field", [
    ({"instances": [{"gpu": "nope"}]}, "cluster.instances[0].gpu"),
    ({"instances": [{"colour": "red"}]}, "cluster.instances[0].colour"),
    ({"instances": [{"count": 0}]}, "cluster.instances[0].count"),
    ({"instances": "H100"}, "cluster.instances"),
    ({"instances": [{"count": 2}], "num_instances": 3}, "cluster.num_instances"),
    ({"instances": [{"count": 2}], "cost_model": {"calibration": "x.json"}}, "cluster.instances"),
])
def test_bad_instance_groups_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        build_executors(ClusterSpec(**kwargs))
    assert err.value.field == field


def test_unknown_router_names_the_field():
    with pytest.raises(ConfigError, match="router='nearest'"):
        check_router("nearest")
    with pytest.raises(ConfigError):
        HashRing(range(2), num_vnodes=0)


def test_cache_aware_weighs_the_cached_prefix_against_load_by_hand():
    r = build_router("cache_aware", 3)
    new = req(7, prompt=100)
    hits = {0: 0, 1: 80, 2: 100}  # tokens of the prompt each instance has cached

    def cached(i: int):
        return lambda request: hits[i] if request is new else 0

    def loads(waiting_1: int) -> list[InstanceLoad]:
        return [InstanceLoad(i, [req(10 + k) for k in range(n)], [], 0, 1000, cached(i))
                for i, n in enumerate((0, waiting_1, 4))]

    # scores: 0 -> 2*0 + (1 - 0/5) = 1.0; 1 -> 2*0.8 + (1 - 1/5) = 2.4; 2 -> 2*1 + (1 - 4/5) = 2.2
    assert r.route(new, loads(1)) == 1
    # instance 1 busier (4 waiting, busiest 4 -> /5): 1.6 + 0.2 = 1.8 < instance 2's 2.2
    assert r.route(new, loads(4)) == 2
    # no prefix cache anywhere: load alone, ties to the lowest id
    plain = [InstanceLoad(i, [], [], 0, 1000) for i in range(3)]
    assert r.route(new, plain) == 0

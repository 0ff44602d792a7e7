"""Synthetic multi-turn sessions: structure of the turns, content ids, config, and the prefix hits
they give the paged policies."""

import dataclasses

import numpy as np
import pytest

from experiments.config.experiment import experiment_from_dict
from experiments.sweep.workload import build_workload
from policies.simulate import simulate
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, check_follow_ups_hit_previous_context
from traces.lengths import LengthDist
from traces.sessions import SESSION_ID_STRIDE, SessionConfig, session_draw, session_trace

CFG = SessionConfig(rate_per_s=2.0, num_sessions=40, mean_turns=3.0, think_time_s=5.0,
                    service_s_per_token=0.05, system_prompt_tokens=40,
                    new_input=LengthDist("uniform", min_tokens=1, max_tokens=120),
                    output=LengthDist("uniform", min_tokens=1, max_tokens=80))


def test_same_seed_same_trace_other_seed_differs():
    a, b = session_trace(CFG, 3), session_trace(CFG, 3)
    assert a.equals(b)
    assert not a.equals(session_trace(CFG, 4))


def test_each_turn_extends_the_previous_prompt_and_answer():
    df = session_trace(CFG, 0)
    assert set(df.columns) >= {"session_id", "turn", "block_ids", "block_tokens"}
    for _, turns in df.groupby("session_id"):
        turns = turns.sort_values("turn")
        assert turns["turn"].tolist() == list(range(len(turns)))
        prev = None
        for _, row in turns.iterrows():
            covered = -(-(row.prompt_tokens + row.output_tokens) // CFG.block_tokens)
            assert len(row.block_ids) == covered  # ids cover prompt and answer
            if prev is None:
                assert row.prompt_tokens > CFG.system_prompt_tokens
            else:
                assert row.prompt_tokens > prev.prompt_tokens + prev.output_tokens
                assert row.block_ids[:len(prev.block_ids)] == prev.block_ids
                assert row.arrival_s >= prev.arrival_s + prev.output_tokens * 0.05
            prev = row


def test_system_prompt_ids_are_shared_and_the_rest_per_session():
    df = session_trace(CFG, 1)
    shared = CFG.system_prompt_tokens // CFG.block_tokens  # 2 granules of 16 inside 40 tokens
    firsts = {ids[:shared] for ids in df["block_ids"]}
    assert firsts == {(0, 1)}
    owner = {}
    for sid, ids in zip(df["session_id"], df["block_ids"]):
        for i in ids[shared:]:
            assert owner.setdefault(i // SESSION_ID_STRIDE, sid) == sid


def test_turn_counts_follow_the_truncated_geometric():
    cfg = dataclasses.replace(CFG, num_sessions=3000, mean_turns=4.0, max_turns=6,
                              max_prompt_tokens=10**6)
    turns = session_trace(cfg, 0).groupby("session_id").size()
    assert turns.max() <= 6
    assert cfg.expected_turns == pytest.approx((1 - 0.75 ** 6) / 0.25)
    assert turns.mean() == pytest.approx(cfg.expected_turns, rel=0.05)
    drawn = session_draw(cfg, 0)  # by count: sessions start at rate / (their mean turns)
    assert drawn.session_rate_per_s == pytest.approx(cfg.rate_per_s * 3000 / turns.sum())


def test_sessions_start_within_a_duration():
    cfg = dataclasses.replace(CFG, num_sessions=None, duration_s=50.0)
    drawn = session_draw(cfg, 0)
    df = drawn.trace
    starts = df[df["turn"] == 0]["arrival_s"]
    assert starts.min() >= 0 and starts.max() < 50.0
    assert len(starts) == pytest.approx(50 * drawn.session_rate_per_s, rel=0.6)
    assert (df["arrival_s"] < 50).sum() == 100 and drawn.note is None  # 2 req/s x 50 s
    for _, turns in df.groupby("session_id"):  # begun before 0: its later turns, in order
        first = int(turns["turn"].iloc[0])
        assert turns["turn"].tolist() == list(range(first, first + len(turns)))
    capped = session_draw(dataclasses.replace(cfg, num_sessions=3), 0)
    assert capped.trace["session_id"].nunique() == 3 and capped.note is not None


def test_prompt_cap_ends_sessions():
    cfg = dataclasses.replace(CFG, mean_turns=20.0, max_prompt_tokens=400)
    df = session_trace(cfg, 0)
    assert (df[df["turn"] > 0]["prompt_tokens"] <= 400).all()


def test_next_turn_hits_the_previous_turn_including_its_answer():
    df = session_trace(CFG, 2)
    res, later = check_follow_ups_hit_previous_context(df)
    assert later > 10
    assert 0 < res.summary["prefix_hit_rate"] < 1


def test_session_affinity_keeps_more_hits_than_round_robin():
    df = session_trace(dataclasses.replace(CFG, num_sessions=60), 5)
    ex = LinearExecutor(capacity=10**6, per_token_s=1e-5)
    rate = {}
    for router in ("round_robin", "session_affinity"):
        params = {"enable_prefix_caching": True, "router": router}
        rate[router] = simulate(df, "vllm_v0", params, [ex] * 4).summary["prefix_hit_rate"]
    assert rate["session_affinity"] > rate["round_robin"] + 0.2


# ---- configuration ---------------------------------------------------------------------------
def raw_config(**sessions):
    return {"workload": {"sessions": {"num_sessions": 10, **sessions}}, "request_rates": [2],
            "policies": [{"name": "vllm_v0", "params": {"enable_prefix_caching": True}}]}


def test_a_sessions_workload_runs_from_a_config():
    cfg = experiment_from_dict(raw_config(new_input={"kind": "constant", "mean": 50},
                                          block_tokens=8), "s")
    df = build_workload(cfg, None, 2.0, seed=0)
    assert df["block_tokens"].unique().tolist() == [8]
    assert df["session_id"].nunique() == 10
    first = df[df["turn"] == 0]["prompt_tokens"]
    assert (first == 50).all()


@pytest.mark.parametrize("field,value", [
    ("mean_turns", 0.5), ("max_turns", 0), ("num_sessions", 1.5), ("think_time_s", -1.0),
    ("service_s_per_token", -0.1), ("system_prompt_tokens", -1), ("block_tokens", 0),
    ("max_prompt_tokens", 0), ("rate_per_s", 1.0), ("colour", "red"), ("duration_s", -5.0)])
def test_bad_session_fields_are_named(field, value):
    with pytest.raises(ConfigError, match=f"workload.sessions.{field}"):
        experiment_from_dict(raw_config(**{field: value}), "s")


def test_bad_session_lengths_and_rates_are_named():
    with pytest.raises(ConfigError, match="workload.sessions.output"):
        experiment_from_dict(raw_config(output={"kind": "lognormal", "cv": 0}), "s")
    raw = raw_config()
    raw["request_rates"] = [0]
    with pytest.raises(ConfigError, match="request_rates"):
        experiment_from_dict(raw, "s")
    raw = raw_config()
    raw["workload"]["synthetic"] = {"num_requests": 5}
    with pytest.raises(ConfigError, match="exactly one of synthetic / trace / sessions"):
        experiment_from_dict(raw, "s")


def test_direct_config_errors():
    with pytest.raises(ConfigError, match="sessions.rate_per_s"):
        SessionConfig(rate_per_s=float("inf"))
    with pytest.raises(ConfigError, match="sessions.num_sessions"):
        SessionConfig(num_sessions=0, duration_s=60.0)
    with pytest.raises(ConfigError, match="sessions.new_input"):
        SessionConfig(new_input=np.int64(3))  # type: ignore[arg-type]

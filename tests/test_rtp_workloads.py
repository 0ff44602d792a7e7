"""RTP-LLM's plugin-call and P-tuning session patterns (issue 31): prompt lengths in closed form,
follow-ups arriving after the tool's latency, a task's soft prompt with the same prefix keys in
every request of the task, the prefix hits each gives the paged policies, and the config."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.config.experiment import experiment_from_dict
from experiments.sweep.workload import build_workload
from policies.simulate import simulate
from sim.memory.prefix_keys import block_keys
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, check_follow_ups_hit_previous_context
from traces.content_ids import STREAM_STRIDE
from traces.lengths import LengthDist
from traces.plugin_calls import PluginCallConfig, plugin_call_trace
from traces.ptuning import PTuningConfig, ptuning_trace


def const(tokens: int) -> LengthDist:
    return LengthDist("constant", mean=tokens)


def uniform(low: int, high: int) -> LengthDist:
    return LengthDist("uniform", min_tokens=low, max_tokens=high)


PLUGIN = PluginCallConfig(rate_per_s=0.5, num_conversations=30, mean_calls=2.0, max_calls=4,
                          tool_latency_s=2.5, service_s_per_token=0.05,
                          system_prompt_tokens=40, user_input=uniform(1, 200),
                          call_output=uniform(10, 40), tool_result=uniform(20, 300),
                          output=uniform(1, 100))
PTUNE = PTuningConfig(rate_per_s=0.2, num_requests=60, num_tasks=3, prefix_tokens=100,
                      input=uniform(1, 150), output=uniform(1, 60))


# ---- plugin calls ----------------------------------------------------------------------------
def test_plugin_calls_in_closed_form_with_constant_lengths():
    """One call: the user request (40 + 100 tokens) writes a 20-token call; the tool answers 50
    tokens 2.5 s after the call's estimated end (20 x 0.05 s), so the follow-up's prompt is
    140 + 20 + 50 = 210 tokens and it arrives 1 + 2.5 = 3.5 s after the request."""
    cfg = dataclasses.replace(PLUGIN, mean_calls=1.0, user_input=const(100),
                              call_output=const(20), tool_result=const(50), output=const(30))
    df = plugin_call_trace(cfg, 0)
    assert len(df) == 60 and df["session_id"].nunique() == 30
    for _, conv in df.groupby("session_id"):
        first, follow = conv.sort_values("turn").itertuples()
        assert (first.prompt_tokens, first.output_tokens, first.tool_result_tokens) == (140, 20, 0)
        assert (follow.prompt_tokens, follow.output_tokens, follow.tool_result_tokens) == (
            210, 30, 50)
        assert follow.arrival_s - first.arrival_s == pytest.approx(3.5, abs=1e-9)


def test_each_follow_up_is_the_whole_previous_context_plus_the_tool_result():
    df = plugin_call_trace(PLUGIN, 1)
    assert plugin_call_trace(PLUGIN, 1).equals(df)
    assert not df.equals(plugin_call_trace(PLUGIN, 2))
    calls = []
    for _, conv in df.groupby("session_id"):
        conv = conv.sort_values("turn")
        assert conv["turn"].tolist() == list(range(len(conv)))
        calls.append(len(conv) - 1)
        prev = None
        for row in conv.itertuples():
            assert len(row.block_ids) == -(-(row.prompt_tokens + row.output_tokens) // 16)
            if prev is None:
                assert row.tool_result_tokens == 0 and row.prompt_tokens > 40
            else:  # token conservation and arrival after the call plus the tool's latency
                assert row.prompt_tokens == (prev.prompt_tokens + prev.output_tokens
                                             + row.tool_result_tokens)
                assert 20 <= row.tool_result_tokens <= 300
                assert row.arrival_s - prev.arrival_s == pytest.approx(
                    prev.output_tokens * 0.05 + 2.5, abs=1e-9)
                assert row.block_ids[:len(prev.block_ids) - 1] == prev.block_ids[:-1]
            prev = row
    assert min(calls) >= 1 and max(calls) <= 4 and max(calls) > 1


def test_system_prompt_granules_are_shared_and_the_rest_per_conversation():
    df = plugin_call_trace(PLUGIN, 3)
    assert {ids[:2] for ids in df["block_ids"]} == {(0, 1)}  # 40 tokens: 2 granules of 16
    owner: dict[int, str] = {}
    for sid, ids in zip(df["session_id"], df["block_ids"]):
        for i in ids[2:]:
            assert owner.setdefault(i // STREAM_STRIDE, sid) == sid


def test_exponential_tool_latency_has_the_mean_and_a_prompt_cap_ends_conversations():
    cfg = dataclasses.replace(PLUGIN, num_conversations=400, tool_latency="exponential",
                              mean_calls=1.0)
    df = plugin_call_trace(cfg, 0).sort_values(["session_id", "turn"])
    gaps = df.groupby("session_id")["arrival_s"].diff().dropna().to_numpy()
    calls = df[df["turn"] == 0]["output_tokens"].to_numpy()
    latency = gaps - calls * 0.05
    assert (latency > 0).all() and latency.mean() == pytest.approx(2.5, rel=0.1)
    capped = plugin_call_trace(dataclasses.replace(PLUGIN, mean_calls=4.0, max_prompt_tokens=300),
                               0)
    assert (capped[capped["turn"] > 0]["prompt_tokens"] <= 300).all()


def test_follow_ups_reuse_the_whole_previous_context():
    """With the previous request finished (its estimate is longer than the linear executor's
    steps), a follow-up's cached tokens are every full 16-token block of the previous prompt +
    output but the last token, whose KV was never computed."""
    df = plugin_call_trace(PLUGIN, 4)
    ex = LinearExecutor(capacity=10**6, per_token_s=1e-5)
    res, follow = check_follow_ups_hit_previous_context(df)
    assert follow > 30
    off = simulate(df, "vllm_v0", {}, [ex]).summary["prefix_hit_rate"]
    assert off == 0 < res.summary["prefix_hit_rate"] < 1


# ---- P-tuning --------------------------------------------------------------------------------
def test_ptuning_prompts_are_the_prefix_plus_the_input():
    df = ptuning_trace(dataclasses.replace(PTUNE, input=const(30)), 0)
    assert (df["prompt_tokens"] == 130).all() and (df["prefix_tokens"] == 100).all()
    assert (df["app"] == [f"task{t}" for t in df["task"]]).all()
    assert ptuning_trace(PTUNE, 5).equals(ptuning_trace(PTUNE, 5))


def test_a_tasks_requests_share_its_prefix_keys_and_no_other_task_does():
    df = ptuning_trace(PTUNE, 1)
    prefix_blocks = 100 // 16  # 6 full 16-token blocks inside the 100-token soft prompt
    keys = {}
    for row in df.itertuples():
        k = block_keys(row.block_ids, 16, 16, row.prompt_tokens, row.prompt_tokens)
        keys.setdefault(row.task, set()).add(tuple(k[:prefix_blocks]))
        assert len(set(k[prefix_blocks:]) & set().union(*keys.values())) == 0
    assert sorted(keys) == [0, 1, 2]
    assert all(len(v) == 1 for v in keys.values())  # one prefix per task
    assert len({next(iter(v)) for v in keys.values()}) == 3  # three different prefixes


def test_ptuning_hits_the_soft_prompt_after_each_tasks_first_request():
    """At 0.2 req/s every request finishes before the next arrives: each task's first request
    computes its prefix, every later one reuses floor(100 / 16) x 16 = 96 tokens."""
    df = ptuning_trace(PTUNE, 2)
    ex = LinearExecutor(capacity=10**6, per_token_s=1e-5)
    res = simulate(df, "vllm_v0", {"enable_prefix_caching": True}, [ex])
    first = ~df["task"].duplicated()
    cached = res.records["num_cached_tokens"].to_numpy()
    assert (cached[first.to_numpy()] == 0).all() and (cached[~first.to_numpy()] == 96).all()
    expected = 96 * (len(df) - 3) / df["prompt_tokens"].sum()
    assert res.summary["prefix_hit_rate"] == pytest.approx(expected, rel=1e-12)


def test_task_popularity_and_an_infinite_rate():
    cfg = dataclasses.replace(PTUNE, task_zipf=1.0, num_requests=6000, rate_per_s=float("inf"))
    assert cfg.task_weights == pytest.approx(np.array([6, 3, 2]) / 11)
    df = ptuning_trace(cfg, 0)
    assert (df["arrival_s"] == 0).all()
    shares = df["task"].value_counts(normalize=True).sort_index().to_numpy()
    assert shares == pytest.approx(np.array([6, 3, 2]) / 11, abs=0.02)


# ---- configuration ---------------------------------------------------------------------------
def raw(kind: str, rates=(2,), **fields) -> dict:
    return {"workload": {kind: fields}, "request_rates": list(rates),
            "policies": [{"name": "vllm_v0", "params": {"enable_prefix_caching": True}}]}


def test_both_workloads_run_from_a_config():
    cfg = experiment_from_dict(raw("plugin_calls", num_conversations=5, mean_calls=1,
                                   call_output={"kind": "constant", "mean": 8}), "p")
    df = build_workload(cfg, None, 2.0, seed=0)
    assert len(df) == 10 and (df[df["turn"] == 0]["output_tokens"] == 8).all()
    cfg = experiment_from_dict(raw("ptuning", rates=(1, "inf"), num_requests=7, prefix_tokens=64,
                                   input={"kind": "constant", "mean": 10}), "t")
    df = build_workload(cfg, None, float("inf"), seed=0)
    assert len(df) == 7 and (df["prompt_tokens"] == 74).all()


@pytest.mark.parametrize("kind,field,value", [
    ("plugin_calls", "mean_calls", 0.5), ("plugin_calls", "max_calls", 0),
    ("plugin_calls", "tool_latency_s", -1.0), ("plugin_calls", "tool_latency", "gamma"),
    ("plugin_calls", "rate_per_s", 1.0), ("plugin_calls", "colour", "red"),
    ("ptuning", "prefix_tokens", 0), ("ptuning", "num_tasks", 1.5),
    ("ptuning", "task_zipf", -1.0), ("ptuning", "rate_per_s", 1.0)])
def test_bad_fields_are_named(kind, field, value):
    with pytest.raises(ConfigError, match=f"workload.{kind}.{field}"):
        experiment_from_dict(raw(kind, **{field: value}), "x")


def test_bad_lengths_and_rates_are_named():
    with pytest.raises(ConfigError, match="workload.plugin_calls.tool_result"):
        experiment_from_dict(raw("plugin_calls", tool_result={"kind": "uniform",
                                                              "min_tokens": 0}), "x")
    with pytest.raises(ConfigError, match=r"request_rates\[1\]"):  # tools take time: no inf
        experiment_from_dict(raw("plugin_calls", rates=(1, "inf")), "x")
    both = raw("ptuning")
    both["workload"]["plugin_calls"] = {}
    with pytest.raises(ConfigError, match="exactly one of"):
        experiment_from_dict(both, "x")

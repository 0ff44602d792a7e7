"""Θ in bytes on the HF static-batch engine (policies/magnus/memory.py, issue 17).

The adaptive batcher sizes batches by the engine's peak bytes (prefill logits and scores
included), so batches it builds from true lengths never run out of memory, where sizing them by
KV tokens alone fails in the prefill.
"""

from __future__ import annotations

import pandas as pd
import pytest

from policies.magnus.batcher import AdaptiveBatcher
from policies.magnus.config import MagnusConfig
from policies.magnus.memory import EngineMemory, KVTokenMemory, batch_memory
from policies.simulate import simulate
from sim.cluster.hf_static import HFStaticExecutor
from sim.cluster.spec import ClusterSpec, build_executors
from sim.core.executor import InstanceInfo
from sim.core.request import Request
from sim.util.errors import ConfigError


def chatglm_v100(**engine) -> HFStaticExecutor:
    spec = ClusterSpec(model="chatglm-6b", gpu="V100-32GB", engine={"kind": "hf_static", **engine})
    (executor,) = build_executors(spec)
    assert isinstance(executor, HFStaticExecutor)
    return executor


@pytest.mark.parametrize("rows", [1, 3, 7, 8, 20, 60])
def test_batch_peak_fits_exactly_when_the_engine_runs_it_without_oom(rows):
    ex, mem = chatglm_v100(), chatglm_v100().memory
    for prompt in (1, 50, 300, 1000, 2047):
        for gen in (1, 2, 100, 700, 1500):
            no_oom = ex.first_oom_iteration(rows, prompt, 0, gen) == 0
            assert (mem.batch_peak_bytes(rows, prompt, gen) <= mem.free_bytes) == no_oom


def test_the_prefill_is_the_peak_for_long_prompts_and_short_outputs():
    mem = chatglm_v100().memory
    kv_only = 8 * (1000 + 20) * mem.kv_bytes_per_token
    assert mem.batch_peak_bytes(8, 1000, 20) == mem.prefill_peak_bytes(8, 1000) > 2 * kv_only


def test_policies_see_the_engine_through_instance_info_and_names_differ_with_params():
    default, more = chatglm_v100(), chatglm_v100(logits_copies=3.0)
    assert default.instance_info(0).engine is default  # the memory model and batch times
    assert more.memory != default.memory
    assert default.name.endswith("(hf_static)") and "logits_copies=3.0" in more.name
    assert chatglm_v100(kv_passes=4.0).name != default.name  # time parameters too
    from sim.cluster.spec import ClusterSpec, build_executors
    paged = build_executors(ClusterSpec(model="chatglm-6b", gpu="V100-32GB"))[0]
    assert paged.instance_info(0).engine is None  # a paged executor offers none


def test_batch_memory_uses_bytes_on_hf_static_and_tokens_elsewhere():
    ex = chatglm_v100()
    hf = [ex.instance_info(0), ex.instance_info(1)]
    paged = [InstanceInfo(0, 1000, "paged"), InstanceInfo(1, 800, "paged")]
    assert batch_memory(hf, 0.5) == EngineMemory((ex.memory,), 0.5)
    assert batch_memory(hf, 0.5, "kv_tokens") == KVTokenMemory(ex.kv_capacity_tokens // 2)
    assert batch_memory(paged, 0.5) == KVTokenMemory(400)
    assert batch_memory(hf + paged[:1], 1.0) == KVTokenMemory(1000)  # mixed: tokens


def test_memory_check_is_validated():
    with pytest.raises(ConfigError, match="memory_check"):
        MagnusConfig(memory_check="bytes")


def test_batcher_opens_a_new_batch_when_the_prefill_would_not_fit():
    ex = chatglm_v100()
    by_bytes = AdaptiveBatcher(EngineMemory((ex.memory,)), threshold=1e12)
    by_tokens = AdaptiveBatcher(ex.kv_capacity_tokens, threshold=1e12)
    rows = next(n for n in range(1, 100)
                if ex.first_oom_iteration(n, 1500, 0, 10) == 1)  # first to fail in the prefill
    assert rows * (1500 + 10) <= ex.kv_capacity_tokens  # tokens alone would allow it
    for b in (by_bytes, by_tokens):
        for i in range(rows):
            b.insert(Request(i, 0.0, 1500, 10), 1500, 10)
    assert [x.size for x in by_tokens.batches] == [rows]
    assert [x.size for x in by_bytes.batches] == [rows - 1, 1]


def long_prompt_trace(n: int = 24) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": [0.0] * n, "prompt_tokens": [1500] * n,
                         "output_tokens": [10] * n, "app": ["a"] * n,
                         "text": [f"r{i}" for i in range(n)]})


@pytest.mark.parametrize("name", ["abp", "magnus"])
def test_adaptive_batches_from_true_lengths_never_oom_when_counted_in_bytes(name):
    params = {"predictor": {"kind": "oracle"}, "wma_threshold": 1e12}
    by_bytes = simulate(long_prompt_trace(), name, params, [chatglm_v100()])
    by_tokens = simulate(long_prompt_trace(), name, {**params, "memory_check": "kv_tokens"},
                         [chatglm_v100()])
    assert not by_bytes.steps["oom"].any()
    assert by_tokens.steps["oom"].any()  # KV tokens alone size batches the prefill cannot hold
    assert (by_bytes.records["status"] == "finished").all()

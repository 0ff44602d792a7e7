"""Request classes in workloads, records and tables: trace columns (`class`, `priority`,
`timeout_s`) and their errors, multi-client specs, per-class summaries, and records of runs
without classes unchanged."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments.config.classes import ClassSpec, apply_classes, classes_from_dict
from experiments.config.experiment import experiment_from_dict
from experiments.config.workload import clients_from_dict
from experiments.report.classes import format_class_table
from experiments.run import run_sweep
from policies.simulate import simulate
from sim.metrics.slo import SLO
from sim.util.errors import ConfigError, TraceError
from traces.clients import multi_client_trace
from traces.mapping import TraceMapping, load_mapped
from traces.paths import shared_trace_path
from traces.registry import load_trace
from tests.factories import LinearExecutor, make_trace, random_trace

ROWS = {"arrival_s": [0.0, 0.5, 1.0], "prompt_tokens": [10, 20, 30],
        "output_tokens": [5, 6, 7]}
# the record columns of every run before request classes (a run without them keeps exactly these)
BASE_COLUMNS = [
    "request_id", "arrival_s", "prompt_tokens", "output_tokens", "target_output_tokens",
    "status", "instance_id", "scheduled_s", "first_token_s", "finish_s", "num_preemptions",
    "num_recomputed_tokens", "num_padding_tokens", "max_itl_s", "predicted_output_tokens", "app",
    "num_spec_steps", "num_draft_tokens", "num_accepted_tokens", "num_cached_tokens",
    "requested_output_tokens", "finish_reason", "reason", "reason_detail", "e2e_s", "ttft_s",
    "queueing_s", "tpot_s", "normalized_latency_s"]


def write(df: pd.DataFrame, path, fmt: str) -> None:
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "parquet":
        df.to_parquet(path, index=False)
    else:
        with open(path, "w") as fh:
            for row in df.to_dict("records"):
                fh.write(json.dumps({k: (None if v != v else v) for k, v in row.items()}) + "\n")


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_loaders_read_class_priority_and_timeout(tmp_path, fmt):
    df = pd.DataFrame({**ROWS, "class": ["chat", "007", None], "priority": [0, 2, None],
                       "timeout_s": [1.5, None, 30.0]})
    path = tmp_path / f"t.{fmt}"
    write(df, path, fmt)
    out = load_trace(path)
    assert out["class"].tolist()[:2] == ["chat", "007"] and pd.isna(out["class"].iloc[2])
    assert out["priority"].tolist() == [0, 2, 0] and out["priority"].dtype == np.int64
    assert out["timeout_s"].iloc[0] == 1.5 and np.isnan(out["timeout_s"].iloc[1])
    rec = simulate(out, "orca", {}, [LinearExecutor()]).records
    assert list(rec.columns[-8:-5]) == ["class", "priority", "timeout_s"]
    assert rec["class"].tolist()[:2] == ["chat", "007"] and pd.isna(rec["class"].iloc[2])


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
@pytest.mark.parametrize("column, value", [
    ("class", "two words"), ("class", "x" * 65), ("priority", "high"), ("priority", 1.5),
    ("priority", 2**40), ("timeout_s", 0), ("timeout_s", -3), ("timeout_s", "soon"),
])
def test_bad_class_values_name_the_column_and_value(tmp_path, fmt, column, value):
    if fmt == "parquet" and isinstance(value, str) and column != "class":
        values = ["1", value, "2"]  # a parquet column has one type: text throughout
    else:
        values = [None, value, None] if column != "priority" else [0, value, 1]
    df = pd.DataFrame({**ROWS, column: pd.Series(values, dtype=object)})
    path = tmp_path / f"t.{fmt}"
    write(df, path, fmt)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    got = err.value.value  # CSV cells come as text, a column with gaps as floats
    assert err.value.field == column and (got == value or str(got) == str(value))
    assert f"field {column!r}=" in str(err.value)


def test_a_bool_priority_and_a_numeric_class_are_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2, "priority": true}\n')
    with pytest.raises(TraceError, match="priority"):
        load_trace(path)
    df = pd.DataFrame({**ROWS, "class": [1, 2, 3]})
    df.to_parquet(tmp_path / "c.parquet", index=False)
    with pytest.raises(TraceError, match="'class'=1"):
        load_trace(tmp_path / "c.parquet")


def test_a_mapping_reads_class_columns_under_other_names(tmp_path):
    pd.DataFrame({"t": [0, 1], "p": [5, 6], "o": [2, 3], "tier": ["gold", "bronze"],
                  "prio": [0, 1]}).to_csv(tmp_path / "m.csv", index=False)
    mapping = TraceMapping.from_columns({"arrival_s": "t", "prompt_tokens": "p",
                                         "output_tokens": "o", "class": "tier",
                                         "priority": "prio"})
    out = load_mapped(tmp_path / "m.csv", "csv", mapping)
    assert out["class"].tolist() == ["gold", "bronze"] and out["priority"].tolist() == [0, 1]


def test_clients_carry_their_class_and_priority():
    raw = {"num_requests": 60, "clients": [
        {"name": "chat", "class": "interactive", "priority": 0, "share": 2},
        {"name": "jobs", "priority": 3}]}
    trace = multi_client_trace(clients_from_dict(raw), seed=0)
    chat = trace["app"] == "chat"
    assert set(trace.loc[chat, "class"]) == {"interactive"}
    assert trace.loc[~chat, "class"].isna().all()
    assert set(trace.loc[chat, "priority"]) == {0} and set(trace.loc[~chat, "priority"]) == {3}
    plain = multi_client_trace(clients_from_dict({"num_requests": 5, "clients": [
        {"name": "a"}]}), seed=0)
    assert "class" not in plain.columns and "priority" not in plain.columns
    with pytest.raises(ConfigError) as err:
        clients_from_dict({"num_requests": 5, "clients": [{"name": "a", "class": "a b"}]})
    assert err.value.field == "workload.clients[0].class"


def shared_trace_present(name: str) -> bool:
    """Whether the shared trace is on this machine (a clean CI clone may lack ../shared)."""
    try:
        return shared_trace_path(name).is_file()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not shared_trace_present("azure_code"), reason="shared trace absent")
def test_a_client_resamples_lengths_from_a_shared_trace():
    raw = {"num_requests": 50, "clients": [{"name": "code", "lengths_trace": "azure_code"}]}
    trace = multi_client_trace(clients_from_dict(raw), seed=1)
    code = load_trace(shared_trace_path("azure_code"))
    pairs = set(zip(code["prompt_tokens"], code["output_tokens"]))
    assert set(zip(trace["prompt_tokens"], trace["output_tokens"])) <= pairs
    with pytest.raises(ConfigError):
        clients_from_dict({"num_requests": 5, "clients": [{"name": "c", "lengths_trace": "x"}]})


def test_records_and_summary_of_a_run_without_classes_are_unchanged():
    res = simulate(random_trace(np.random.default_rng(0), 30), "vllm", {}, [LinearExecutor()])
    assert list(res.records.columns) == BASE_COLUMNS
    assert not [k for k in res.summary if k.startswith("class.") or k == "cancelled"]


def test_per_class_summary_and_table():
    trace = random_trace(np.random.default_rng(0), 60, rate=40.0)
    trace["class"] = np.where(np.arange(60) % 2 == 0, "chat", "batch")
    trace["priority"] = np.where(trace["class"] == "chat", 0, 1)
    res = simulate(trace, "vllm", {"scheduling_policy": "priority", "max_num_seqs": 4,
                                   "max_num_batched_tokens": 64}, [LinearExecutor()])
    s = res.summary
    assert s["class.chat.num_requests"] == 30 == s["class.batch.num_requests"]
    chat = res.records[res.records["class"] == "chat"]
    assert s["class.chat.p90_ttft_s"] == pytest.approx(np.percentile(chat["ttft_s"], 90))
    assert s["class.chat.mean_ttft_s"] < s["class.batch.mean_ttft_s"]
    assert [k for k in s if k.endswith(".num_requests")] == ["class.chat.num_requests",
                                                            "class.batch.num_requests"]
    row = {"run": "r", "label": "vllm", "rate": 1.0, "seed": 0, **s}
    table = format_class_table([row], ["vllm"])
    assert "chat" in table and "batch" in table and "attain" not in table
    assert format_class_table([{"run": "r", "label": "x", "rate": 1.0}], ["x"]) == ""


def test_classes_section_sets_priority_timeout_and_slo():
    classes = classes_from_dict({"chat": {"priority": 0, "timeout_s": 2,
                                          "slo": {"ttft_ms": 300}},
                                 "default": {"priority": 4}})
    assert classes["chat"].slo == SLO(ttft_s=0.3)
    df = make_trace([(0.0, 5, 5)] * 3).assign(**{"class": ["chat", None, "bulk"]})
    out = apply_classes(df, classes)
    assert out["priority"].tolist() == [0, 4, 0]
    assert out["timeout_s"].iloc[0] == 2.0 and out["timeout_s"].iloc[1:].isna().all()
    with pytest.raises(TraceError, match="no class column"):
        apply_classes(make_trace([(0.0, 5, 5)]), classes)
    for bad, field in (({"a b": {}}, "classes.a b"), ({"x": {"timeout_s": 0}},
                                                      "classes.x.timeout_s"),
                       ({"x": {"slo": {"tbt_p99_s": 1}}}, "classes.x.slo.tbt_p99_s"),
                       ({"x": {"deadline": 1}}, "classes.x.deadline")):
        with pytest.raises(ConfigError) as err:
            classes_from_dict(bad)
        assert err.value.field == field
    assert ClassSpec().priority is None


def test_a_sweep_reports_per_class_attainment(tmp_path):
    raw = {"name": "t", "workload": {"num_requests": 40, "clients": [
        {"name": "chat", "class": "chat", "priority": 0},
        {"name": "bulk", "class": "bulk", "priority": 1}]},
        "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
        "policies": [{"name": "vllm", "params": {"scheduling_policy": "priority"}}],
        "request_rates": [4], "slo": {"e2e_s": 60},
        "classes": {"chat": {"timeout_s": 30, "slo": {"ttft_s": 0.5}}}}
    rows = run_sweep(experiment_from_dict(raw, "t"), tmp_path, progress=False)
    row = rows[0]
    for name in ("chat", "bulk"):
        assert 0 <= row[f"class.{name}.slo_attainment"] <= 1
        assert f"class.{name}.goodput" in row
    assert row["cancelled"] == row["class.chat.cancelled"] + row["class.bulk.cancelled"]
    records = pd.read_parquet(tmp_path / "runs" / row["run"] / "records.parquet")
    assert list(records.columns[-8:-5]) == ["class", "priority", "timeout_s"]
    assert np.isinf(records.loc[records["class"] == "bulk", "timeout_s"]).all()  # none
    with pytest.raises(ConfigError, match="cannot cancel"):
        experiment_from_dict({**raw, "policies": ["vanilla"]}, "t")

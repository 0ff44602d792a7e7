"""Trace input (issue 13, no silent wrong answers): absolute times are shifted exactly to start at
0, files are read by their bytes (gzip magic, BOMs, binary), Azure timezones are never guessed,
block ids need their granule size, and retimings that divide by a zero span fail before any run.
Every error names the file or field and the offending value."""

from __future__ import annotations

import gzip
import json
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments import run
from experiments.config.experiment import experiment_from_dict
from experiments.sweep.runner import preload
from policies.simulate import simulate
from sim.util.errors import ConfigError, TraceError
from tests.factories import LinearExecutor, make_trace
from traces.registry import load_trace
from traces.schema import UnsortedTraceWarning, validate_trace

TIMES = ["0.1", "0.37", "0.370001", "2.5", "2.75"]  # seconds, as decimal text
LENGTHS = [(30, 5), (12, 9), (50, 3), (7, 4), (64, 2)]  # (prompt, output) tokens per row
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def schema_csv(times: list[str]) -> str:
    rows = "".join(f"{t},{p},{o}\n" for t, (p, o) in zip(times, LENGTHS))
    return "arrival_s,prompt_tokens,output_tokens\n" + rows


def schema_jsonl(times: list[str]) -> str:
    return "".join(f'{{"arrival_s": {t}, "prompt_tokens": {p}, "output_tokens": {o}}}\n'
                   for t, (p, o) in zip(times, LENGTHS))


def mooncake_jsonl(stamps_ms: list[int]) -> str:
    return "".join(json.dumps({"timestamp": t, "input_length": p, "output_length": o,
                               "hash_ids": [1, 2]}) + "\n"
                   for t, (p, o) in zip(stamps_ms, LENGTHS))


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def records(df: pd.DataFrame) -> pd.DataFrame:
    return simulate(df, "orca", {}, [LinearExecutor(per_ctx_s=1e-6)]).records


# ---- large absolute arrival times ------------------------------------------------------------
OFFSET = "1000000000000000"  # 1e15 s: float64 resolves only 0.125 s there


@pytest.mark.parametrize("name, fmt, build", [("t.csv", "csv", schema_csv),
                                               ("t.jsonl", "jsonl", schema_jsonl)],
                         ids=["csv", "jsonl"])
def test_trace_offset_by_1e15_s_gives_identical_records(tmp_path, name, fmt, build):
    plain = load_trace(write(tmp_path, "a_" + name, build(TIMES)), fmt)
    offset = [str(Decimal(OFFSET) + Decimal(t)) for t in TIMES]  # "1000000000000000.1", ...
    shifted = load_trace(write(tmp_path, "b_" + name, build(offset)), fmt)
    assert plain["arrival_s"].iloc[0] == 0.0
    assert plain["arrival_s"].iloc[2] == pytest.approx(0.270001, abs=0)  # not rounded to 0.125
    pd.testing.assert_frame_equal(shifted, plain)
    pd.testing.assert_frame_equal(records(shifted), records(plain))


def test_mooncake_offset_by_1e15_s_gives_identical_records(tmp_path):
    ms = [100, 370, 371, 2500, 2750]
    plain = load_trace(write(tmp_path, "a.jsonl", mooncake_jsonl(ms)), "mooncake")
    shifted = load_trace(write(tmp_path, "b.jsonl",
                               mooncake_jsonl([10**18 + t for t in ms])), "mooncake")
    assert plain["arrival_s"].tolist() == [0.0, 0.27, 0.271, 2.4, 2.65]
    pd.testing.assert_frame_equal(shifted, plain)
    pd.testing.assert_frame_equal(records(shifted), records(plain))


def test_binary_float_times_too_coarse_for_microseconds_are_refused(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_s": [1e15, 1e15 + 0.5], "prompt_tokens": [3, 4],
                  "output_tokens": [1, 2]}).to_parquet(path)
    with pytest.raises(TraceError, match="coarser than 1e-06 s") as info:
        load_trace(path)
    assert "'arrival_s'=1000000000000000.5" in str(info.value) and info.value.row == 1


@pytest.mark.parametrize("name, text, field, value", [
    ("t.csv", schema_csv(["0", "2e9"]), "arrival_s", "'2e9'"),
    ("m.jsonl", mooncake_jsonl([0, 2 * 10**12]), "timestamp", "2000000000000"),
    ("azure.csv", AZURE_HEADER + "1900-01-01 00:00:00,5,1\n2000-01-01 00:00:00,5,1\n",
     "TIMESTAMP", "'2000-01-01 00:00:00'"),
], ids=["csv", "mooncake", "azure"])
def test_span_over_1e9_s_is_refused(tmp_path, name, text, field, value):
    with pytest.raises(TraceError, match="cannot resolve microseconds") as info:
        load_trace(write(tmp_path, name, text))
    assert f"'{field}'={value}" in str(info.value)


def test_hand_built_frame_with_absolute_times_is_refused():
    df = make_trace([(1e15, 5, 1), (1e15 + 1, 5, 1)])
    with pytest.raises(TraceError, match="starts at 0") as info:
        validate_trace(df, "mem")
    assert "'arrival_s'=1000000000000000.0" in str(info.value)


# ---- Azure timestamps with UTC offsets ----------------------------------------------------------
def test_azure_naive_mixed_with_offsets_is_ambiguous(tmp_path):
    path = write(tmp_path, "azure.csv", AZURE_HEADER + "2023-11-16 18:17:03+00:00,5,1\n"
                                                      "2023-11-16 18:17:04.5,6,2\n")
    with pytest.raises(TraceError, match="ambiguous") as info:
        load_trace(path)
    text = str(info.value)
    assert str(path) in text and "row 3" in text
    assert "'TIMESTAMP'='2023-11-16 18:17:04.5'" in text


def test_azure_different_offsets_are_converted_to_utc(tmp_path):
    path = write(tmp_path, "azure.csv", AZURE_HEADER + "2023-11-16 18:17:03+00:00,5,1\n"
                                                      "2023-11-16 13:17:04.25-05:00,6,2\n"
                                                      "2023-11-16T18:17:05Z,7,3\n")
    assert load_trace(path)["arrival_s"].tolist() == [0.0, 1.25, 2.0]


# ---- gzip without .gz, UTF-16, binary files --------------------------------------------------------
FORMATS = [
    ("azure.csv", "azure", AZURE_HEADER + "2023-11-16 18:17:03,5,1\n2023-11-16 18:17:04,6,2\n"),
    ("m.jsonl", "mooncake", mooncake_jsonl([0, 1000])),
    ("t.csv", "csv", schema_csv(["0", "1"])),
    ("t.jsonl", "jsonl", schema_jsonl(["0", "1"])),
]


@pytest.mark.parametrize("name, fmt, text", FORMATS, ids=[f for _, f, _ in FORMATS])
@pytest.mark.parametrize("encode", [lambda t: gzip.compress(t.encode()),
                                    lambda t: t.encode("utf-16"),
                                    lambda t: gzip.compress(t.encode("utf-16"))],
                         ids=["gzip", "utf16", "gzip-utf16"])
def test_gzip_and_utf16_are_read_by_their_bytes(tmp_path, name, fmt, text, encode):
    expected = load_trace(write(tmp_path, "plain_" + name, text), fmt)
    path = write(tmp_path, name, encode(text))  # no .gz suffix
    for given in (fmt, None):
        pd.testing.assert_frame_equal(load_trace(path, given), expected)


def test_gzip_parquet_without_suffix(tmp_path):
    plain = tmp_path / "p.parquet"
    pd.DataFrame({"arrival_s": [0.0, 1.5], "prompt_tokens": [3, 4],
                  "output_tokens": [1, 2]}).to_parquet(plain)
    path = write(tmp_path, "z.parquet", gzip.compress(plain.read_bytes()))
    pd.testing.assert_frame_equal(load_trace(path), load_trace(plain))


BINARY = bytes(range(256)) * 8


@pytest.mark.parametrize("name, fmt, data, why", [
    *[(name, fmt, BINARY, "binary file") for name, fmt, _ in FORMATS],
    *[(name, fmt, text.encode() + b"\xe9\xff\n", "not valid text") for name, fmt, text in FORMATS],
    *[(name, fmt, text.encode("utf-16-le"), "binary file") for name, fmt, text in FORMATS],
    *[(name, fmt, gzip.compress(text.encode() * 50)[:60], "corrupt gzip") for name, fmt, text in
      FORMATS],
], ids=[f"{kind}-{f}" for kind in ("binary", "latin1", "utf16-no-bom", "truncated-gzip")
        for _, f, _ in FORMATS])
def test_binary_or_undecodable_file_names_file_and_format(tmp_path, name, fmt, data, why):
    path = write(tmp_path, name, data)
    with pytest.raises(TraceError, match=why) as info:
        load_trace(path, fmt)
    assert str(path) in str(info.value) and f"format tried: {fmt}" in str(info.value)


# ---- block_ids need block_tokens --------------------------------------------------------------------
def test_block_ids_without_block_tokens_is_an_error(tmp_path):
    path = write(tmp_path, "t.csv", 'arrival_s,prompt_tokens,output_tokens,block_ids\n'
                                    '0,40,2,"[7, 8, 9]"\n1,40,2,"[7, 8]"\n')
    with pytest.raises(TraceError, match="block_ids=\\[7, 8, 9\\]") as info:
        load_trace(path)
    assert "'block_tokens'=None" in str(info.value) and info.value.row == 0
    with_tokens = path.read_text().replace("block_ids\n", "block_ids,block_tokens\n")
    with_tokens = with_tokens.replace('"\n', '",16\n')
    assert load_trace(write(tmp_path, "u.csv", with_tokens))["block_tokens"].tolist() == [16, 16]


def test_prefix_caching_refuses_ids_without_granule_at_run_time():
    df = make_trace([(0.0, 64, 2), (5.0, 64, 2)])
    df["block_ids"] = [(1, 2, 3, 4), (1, 2, 3, 4)]  # a hand-built frame, never validated
    with pytest.raises(ValueError, match="block_tokens=None with block_ids=\\[1, 2, 3, 4\\]"):
        simulate(df, "vllm_v0", {"enable_prefix_caching": True}, [LinearExecutor()])


# ---- retime: scale on a zero span -----------------------------------------------------------------
def scale_config(path: Path) -> dict:
    return {"name": "scale", "workload": {"trace": {"path": str(path), "retime": "scale"}},
            "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
            "policies": [{"name": "orca"}], "request_rates": [2], "seeds": [0]}


@pytest.mark.parametrize("times", [["3", "3", "3"], ["3"]])
def test_retime_scale_of_a_zero_span_fails_before_any_run(tmp_path, capsys, times):
    raw = scale_config(write(tmp_path, "t.csv", schema_csv(times)))
    with pytest.raises(ConfigError, match="span 0 s") as info:
        preload(experiment_from_dict(raw, "x"))
    assert str(info.value).startswith("workload.trace.retime='scale'")
    config = write(tmp_path, "c.yaml", yaml.safe_dump(raw))
    out = tmp_path / "out"
    assert run.main([str(config), "--out", str(out), "--no-progress"]) == 2
    assert "workload.trace.retime='scale'" in capsys.readouterr().err
    assert not (out / "runs").exists()


def test_retime_scale_with_a_span_still_runs(tmp_path):
    raw = scale_config(write(tmp_path, "t.csv", schema_csv(TIMES)))
    preload(experiment_from_dict(raw, "x"))


# ---- a little fuzzing ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, text, field, value", [
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,-3,2\n", "prompt_tokens", "-3"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,3,NaN\n", "output_tokens", "nan"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1e300,2\n", "prompt_tokens", "1e+300"),
    ("t.csv", "arrival_s,prompt_tokens,output_tokens\n-1,3,2\n", "arrival_s", "'-1'"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": NaN, "output_tokens": 1}\n',
     "prompt_tokens", "nan"),
    ("m.jsonl", mooncake_jsonl([0]).replace('"input_length": 30', '"input_length": -30'),
     "input_length", "-30"),
    ("m.jsonl", mooncake_jsonl([10**400]), "timestamp", "1000000000"),
    ("m.jsonl", mooncake_jsonl([0]).replace("[1, 2]", f"[{2**70}]"), "hash_ids", "[118059"),
    ("azure.csv", AZURE_HEADER + "2023-11-16 18:17:03,10000000000000000000,1\n",
     "ContextTokens", "'10000000000000000000'"),
    ("azure.csv", AZURE_HEADER + "yesterday,5,1\n", "TIMESTAMP", "'yesterday'"),
], ids=["negative", "nan", "huge", "negative-time", "jsonl-nan", "mooncake-negative",
        "mooncake-huge-time", "mooncake-huge-id", "azure-huge", "azure-bad-time"])
def test_bad_cells_name_field_and_value(tmp_path, name, text, field, value):
    with pytest.raises(TraceError) as info:
        load_trace(write(tmp_path, name, text))
    assert f"'{field}'={value}" in str(info.value)


@pytest.mark.parametrize("name, text", [
    ("t.csv", ""), ("t.csv", "arrival_s,prompt_tokens,output_tokens\n"),
    ("t.jsonl", ""), ("m.jsonl", "\n\n"), ("azure.csv", ""), ("azure.csv", AZURE_HEADER),
], ids=["csv", "csv-header", "jsonl", "mooncake-blank", "azure", "azure-header"])
def test_empty_file_or_header_only_is_an_error(tmp_path, name, text):
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError, match="no requests|empty file") as info:
        load_trace(path, "azure" if name.startswith("azure") else None)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name, text", [
    ("t.csv", schema_csv(["5", "1", "3"])), ("m.jsonl", mooncake_jsonl([5000, 1000, 3000])),
    ("azure.csv", AZURE_HEADER + "2023-11-16 18:17:05,30,5\n2023-11-16 18:17:01,12,9\n"
                                 "2023-11-16 18:17:03,50,3\n"),
], ids=["csv", "mooncake", "azure"])
def test_unsorted_arrivals_are_sorted_with_a_warning(tmp_path, name, text):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = load_trace(write(tmp_path, name, text))
    assert df["arrival_s"].tolist() == [0.0, 2.0, 4.0]
    assert df["prompt_tokens"].tolist() == [12, 50, 30]
    assert any(issubclass(w.category, UnsortedTraceWarning) for w in caught)
    assert np.all(np.diff(df["arrival_s"]) >= 0)


def test_scale_rate_refuses_to_stretch_times_past_resolution():
    from traces.transform import scale_rate

    with pytest.raises(ConfigError, match="cannot resolve microseconds") as info:
        scale_rate(make_trace([(0.0, 5, 1), (10.0, 5, 1)]), 1e-9)
    assert str(info.value).startswith("scale_rate.factor=1e-09")

"""Loaders on small hand-made files: good input, and every kind of malformed input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.util.errors import ConfigError, TraceError
from traces.azure import load_azure
from traces.generic import load_csv, load_jsonl, load_parquet
from traces.mooncake import load_mooncake
from traces.schema import UnsortedTraceWarning

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def azure_file(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path, "azure_test.csv", HEADER + "".join(r + "\n" for r in rows))


def test_azure_good(tmp_path: Path) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:03.9799600,4808,10",
                      "2023-11-16 18:17:04.0319600,3180,8", "2023-11-16 18:17:05,7,1")
    df = load_azure(path)
    assert df["arrival_s"].tolist() == pytest.approx([0.0, 0.052, 1.02004])
    assert df["prompt_tokens"].tolist() == [4808, 3180, 7]
    assert df["output_tokens"].tolist() == [10, 8, 1]
    assert len(load_azure(path, limit=2)) == 2


@pytest.mark.parametrize("bad_row, field, value", [
    ("2023-13-45 99:00:00.1234567,10,5", "TIMESTAMP", "2023-13-45 99:00:00.1234567"),
    ("yesterday,10,5", "TIMESTAMP", "yesterday"),
    ("2023-11-16 18:17:05.0,ten,5", "ContextTokens", "ten"),
    ("2023-11-16 18:17:05.0,10,2.5", "GeneratedTokens", "2.5"),
    ("2023-11-16 18:17:05.0,0,5", "ContextTokens", "0"),
    ("2023-11-16 18:17:05.0,10,-3", "GeneratedTokens", "-3"),
    ("2023-11-16 18:17:05.0,,5", "ContextTokens", ""),
    ("2023-11-16 18:17:05.0,10", "GeneratedTokens", None),
])
def test_azure_bad_row_names_line_field_value(tmp_path: Path, bad_row: str, field: str,
                                              value: object) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:03.9799600,4808,10",
                      "2023-11-16 18:17:04.0319600,3180,8", bad_row)
    with pytest.raises(TraceError) as info:
        load_azure(path)
    err = info.value
    assert err.row == 4 and err.field == field and err.value == value
    msg = str(err)
    assert str(path) in msg and "line 4" in msg and field in msg and repr(value) in msg


def test_azure_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:03.9799600,4808,10", "",
                      "2023-11-16 18:17:04.0,bad,8")
    with pytest.raises(TraceError, match="line 4") as info:
        load_azure(path)
    assert info.value.row == 4


def test_azure_too_many_fields(tmp_path: Path) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:03.9799600,4808,10,99")
    with pytest.raises(TraceError, match="line 2"):
        load_azure(path)


def test_azure_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,5\n")
    with pytest.raises(TraceError, match="GeneratedTokens") as info:
        load_azure(path)
    assert info.value.field == "GeneratedTokens"


def test_azure_empty_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no requests"):
        load_azure(write(tmp_path, "a.csv", HEADER))
    with pytest.raises(TraceError, match="missing column"):
        load_azure(write(tmp_path, "b.csv", ""))
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_azure(missing)


def test_azure_unsorted_sorted_with_warning(tmp_path: Path) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:05,10,1", "2023-11-16 18:17:03,20,2",
                      "2023-11-16 18:17:04,30,3", "2023-11-16 18:17:06,40,4")
    with pytest.warns(UnsortedTraceWarning, match="3 of 4 rows"):
        df = load_azure(path)
    assert df["arrival_s"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert df["prompt_tokens"].tolist() == [20, 30, 10, 40]


def test_azure_gzip_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv.gz"
    with gzip.open(path, "wt", newline="") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.1,5,6\r\n")
    assert load_azure(path)["prompt_tokens"].tolist() == [5]


def mooncake_line(ts: object = 0, inp: object = 600, out: object = 5,
                  hashes: object = (0, 1)) -> str:
    return json.dumps({"timestamp": ts, "input_length": inp, "output_length": out,
                       "hash_ids": list(hashes) if isinstance(hashes, tuple) else hashes})


def test_mooncake_good(tmp_path: Path) -> None:
    text = "\n".join([mooncake_line(1000), mooncake_line(1000, hashes=(0, 2)),
                      "", mooncake_line(4500, 100, 7, (3,))]) + "\n"
    df = load_mooncake(write(tmp_path, "m.jsonl", text))
    assert df["arrival_s"].tolist() == [0.0, 0.0, 3.5]
    assert df["block_ids"].tolist() == [(0, 1), (0, 2), (3,)]
    assert df["output_tokens"].tolist() == [5, 5, 7]
    assert len(load_mooncake(write(tmp_path, "m2.jsonl", text), limit=2)) == 2


@pytest.mark.parametrize("bad, field", [
    ('{"timestamp": 5, "input_length": 3', None),
    ('{"timestamp": 5, "input_length": 3, "output_length": 2}', "hash_ids"),
    (mooncake_line(inp=0), "input_length"),
    (mooncake_line(out=-1), "output_length"),
    (mooncake_line(hashes=[1, "x"]), "hash_ids"),
    (mooncake_line(ts="soon"), "timestamp"),
    ("[1, 2, 3]", None),
])
def test_mooncake_bad_line(tmp_path: Path, bad: str, field: str | None) -> None:
    path = write(tmp_path, "m.jsonl", mooncake_line() + "\n\n" + bad + "\n")
    with pytest.raises(TraceError, match="line 3") as info:
        load_mooncake(path)
    assert info.value.row == 3 and info.value.field == field
    assert str(path) in str(info.value)


def test_generic_csv_roundtrip(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens,app,block_ids,"
                                    "block_tokens,x\n"
                                    '0.5,10,2,chat,"[1, 2]",16,7\n1.5,3,4,,"[]",16,8\n')
    df = load_csv(path)
    assert df["block_ids"].tolist() == [(1, 2), ()]
    assert df["app"].tolist() == ["chat", None]
    assert df["x"].tolist() == [7, 8]
    assert df["arrival_s"].tolist() == [0.0, 1.0]  # shifted to start at 0
    assert df.attrs["arrival_origin"] == 0.5


def test_generic_csv_bad_and_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,nan,2\n")
    with pytest.raises(TraceError, match="prompt_tokens") as info:
        load_csv(path)
    assert info.value.row == 1
    path = write(tmp_path, "u.csv", "arrival_s,prompt_tokens\n0,1\n")
    with pytest.raises(TraceError, match="output_tokens"):
        load_csv(path)


def test_generic_jsonl_and_parquet(tmp_path: Path) -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 5, "output_tokens": 1, "text": "hi",
             "block_ids": [4, 5], "block_tokens": 4},
            {"arrival_s": 2.0, "prompt_tokens": 6, "output_tokens": 2, "text": "yo",
             "block_ids": [4], "block_tokens": 4}]
    path = write(tmp_path, "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    df = load_jsonl(path)
    assert df["text"].tolist() == ["hi", "yo"] and df["block_ids"].tolist() == [(4, 5), (4,)]
    pq = tmp_path / "t.parquet"
    df.assign(block_ids=[list(b) for b in df["block_ids"]]).to_parquet(pq)
    back = load_parquet(pq)
    pd.testing.assert_frame_equal(back, df)
    assert len(load_parquet(pq, limit=1)) == 1


def test_generic_jsonl_bad_line(tmp_path: Path) -> None:
    text = '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n' \
           '{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 1}\n'
    with pytest.raises(TraceError, match="line 2") as info:
        load_jsonl(write(tmp_path, "t.jsonl", text))
    assert info.value.field == "arrival_s" and info.value.value == -1


def test_bad_limit(tmp_path: Path) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:03,1,1")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="limit"):
            load_azure(path, limit=bad)  # type: ignore[arg-type]


def test_arrival_shift_is_float(tmp_path: Path) -> None:
    path = azure_file(tmp_path, "2023-11-16 18:17:03.9799600,1,1")
    assert load_azure(path)["arrival_s"].dtype == np.float64

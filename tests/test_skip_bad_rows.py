"""`workload.trace.skip_bad_rows` (traces/skip_rows.py): malformed rows of a real trace file are
dropped, counted by reason and reported (console and each run's summary); without it the first
bad row is still an error naming the row, field and value; a file of only bad rows is an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.config.experiment import experiment_from_dict
from experiments.run import run_sweep
from experiments.sweep.workload import WORKLOAD_NOTE, build_workload, load_base_trace
from sim.util.errors import ConfigError, TraceError
from traces.mapping import TraceMapping
from traces.skip_rows import load_skipping

CLUSTER = {"model": "llama-2-7b", "gpu": "A100-80GB"}
BAD_CSV = """arrival_s,prompt_tokens,output_tokens
0.0,100,10
0.5,-3,10
1.0,abc,12
1.5,200,
2.0,50,5
x,60,6
3.0,70,7.5
3.5,80,8
4.0,0,9
"""  # data rows 1, 2, 3, 5, 6, 8 are bad; 0, 4, 7 are good
BAD_JSONL = "\n".join([
    '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}',
    '{bad json',
    '[1, 2]',
    '{"arrival_s": 1, "prompt_tokens": -5, "output_tokens": 2}',
    '{"arrival_s": 2, "prompt_tokens": 5, "output_tokens": 2}',
]) + "\n"  # lines 2, 3, 4 are bad


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config(trace: dict, rates: list | None = None):
    raw = {"workload": {"trace": trace}, "cluster": CLUSTER, "policies": [{"name": "orca"}]}
    if rates is not None:
        raw["request_rates"] = rates
    return experiment_from_dict(raw, "skip")


def test_csv_bad_rows_are_dropped_counted_and_named(tmp_path):
    df, skipped = load_skipping(write(tmp_path, "t.csv", BAD_CSV), "csv")
    assert df["prompt_tokens"].tolist() == [100, 50, 80]
    assert skipped.rows_read == 9 and len(skipped.bad) == 6
    assert [r.row for r in skipped.bad] == [1, 2, 3, 5, 6, 8]  # 0-based data rows
    assert skipped.by_reason() == {"prompt_tokens: token count must be >= 1": 2,
                                   "prompt_tokens: not a number": 1,
                                   "output_tokens: missing value": 1,
                                   "arrival_s: not a number": 1,
                                   "output_tokens: not an integer": 1}
    report = skipped.report()
    assert report[0].endswith("skipped 6 bad row(s) of 9 read (workload.trace.skip_bad_rows)")
    assert "  2 x prompt_tokens: token count must be >= 1" in report
    first = report[report.index("  first 5:") + 1:]
    assert first == ["    row 1, field 'prompt_tokens'='-3': token count must be >= 1",
                     "    row 2, field 'prompt_tokens'='abc': not a number",
                     "    row 3, field 'output_tokens'=nan: missing value",
                     "    row 5, field 'arrival_s'='x': not a number",
                     "    row 6, field 'output_tokens'=7.5: not an integer"]


def test_json_lines_that_are_not_objects_are_bad_rows_named_by_line(tmp_path):
    df, skipped = load_skipping(write(tmp_path, "t.jsonl", BAD_JSONL), "jsonl")
    assert df["prompt_tokens"].tolist() == [10, 5]
    assert [(r.row, r.field) for r in skipped.bad] == [(2, None), (3, None),
                                                       (4, "prompt_tokens")]
    assert skipped.bad[1].reason == "not a JSON object"
    assert skipped.bad[0].reason.startswith("malformed JSON (")


def test_azure_and_mooncake_rows_that_cannot_be_read_are_skipped(tmp_path):
    azure = write(tmp_path, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:17:03.0,10,5\n2023-11-16 18:17:04.0,10\nnot a date,3,4\n"
                  "2023-11-16 18:17:05.0,10,5,9\n2023-11-16 18:17:06.0,11,6\n")
    df, skipped = load_skipping(azure, "azure")
    assert df["arrival_s"].tolist() == [0.0, 3.0]
    assert [(r.row, r.field) for r in skipped.bad] == [(3, "GeneratedTokens"),
                                                       (4, "TIMESTAMP"), (5, None)]
    mooncake = write(tmp_path, "mc.jsonl", "\n".join([
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
        '{"timestamp": 10, "input_length": 600, "output_length": 5}',
        '{"timestamp": 20, "input_length": 600, "output_length": 5, "hash_ids": "x"}',
        '{"timestamp": 40, "input_length": 100, "output_length": 5, "hash_ids": [4]}']))
    df, skipped = load_skipping(mooncake, "mooncake")
    assert df["block_ids"].tolist() == [(1, 2), (4,)]
    assert [(r.row, r.reason) for r in skipped.bad] == [
        (2, "missing key 'hash_ids'"), (3, "expected a list of integer block ids")]


def test_a_mapped_file_names_its_own_columns(tmp_path):
    path = write(tmp_path, "m.csv", "t,inp,out\n0,5,1\n1,-1,1\n2,6,1\n")
    mapping = TraceMapping.from_columns({"arrival_s": "t", "prompt_tokens": "inp",
                                         "output_tokens": "out"})
    df, skipped = load_skipping(path, "csv", mapping)
    assert df["prompt_tokens"].tolist() == [5, 6]
    assert [(r.row, r.field, r.value) for r in skipped.bad] == [(1, "inp (prompt_tokens)", "-1")]


def test_many_bad_rows_of_a_few_kinds_are_all_dropped(tmp_path):
    rows = [f"{i},{'x' if i % 3 == 0 else -i if i % 3 == 1 else 7},1" for i in range(3000)]
    path = write(tmp_path, "many.csv", "arrival_s,prompt_tokens,output_tokens\n"
                 + "\n".join(rows) + "\n")
    df, skipped = load_skipping(path, "csv", limit=2999)
    assert len(df) == 999 and skipped.rows_read == 2999 and len(skipped.bad) == 2000
    assert skipped.by_reason() == {"prompt_tokens: not a number": 1000,
                                   "prompt_tokens: token count must be >= 1": 1000}
    assert len(skipped.report()) == 1 + 2 + 1 + 5  # count, 2 reasons, "first 5:", 5 rows


def test_a_file_of_only_bad_rows_is_still_an_error(tmp_path):
    path = write(tmp_path, "bad.csv", "arrival_s,prompt_tokens,output_tokens\n0,-1,3\n1,x,2\n")
    with pytest.raises(TraceError, match=r"every row is bad \(2 rows.*row 0, field "
                                         r"'prompt_tokens'='-1'"):
        load_skipping(path, "csv")


def test_file_level_problems_are_not_skipped(tmp_path):
    path = write(tmp_path, "nocol.csv", "arrival_s,prompt_tokens\n0,5\n")
    with pytest.raises(TraceError, match="missing required column"):
        load_skipping(path, "csv")
    with pytest.raises(ConfigError, match="workload.trace.skip_bad_rows"):
        load_skipping(path, "magnus_apps")


def test_without_the_flag_the_first_bad_row_stops_the_load(tmp_path):
    text = "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,-3,10\n1,0,5\n2,9,9\n"
    cfg = config({"path": str(write(tmp_path, "t.csv", text))})
    with pytest.raises(TraceError) as err:
        load_base_trace(cfg)
    assert (err.value.row, err.value.field, err.value.value) == (1, "prompt_tokens", -3)
    assert str(err.value).endswith("t.csv, row 1, field 'prompt_tokens'=-3: token count must "
                                   "be >= 1 at data row 1 (2 bad rows)")


def test_skip_bad_rows_prints_and_notes_what_it_dropped(tmp_path, capsys):
    path = write(tmp_path, "t.csv", BAD_CSV)
    cfg = config({"path": str(path), "skip_bad_rows": True, "retime": "poisson"}, [2])
    base = load_base_trace(cfg)
    assert len(base) == 3
    err = capsys.readouterr().err
    assert "skipped 6 bad row(s) of 9 read" in err
    assert "row 1, field 'prompt_tokens'='-3': token count must be >= 1" in err
    trace = build_workload(cfg, base, 2.0, 0)
    assert trace.attrs[WORKLOAD_NOTE].startswith(f"skipped_bad_rows=6 of 9 rows read from {path}")


def test_the_count_is_in_each_runs_summary(tmp_path):
    path = write(tmp_path, "t.csv", BAD_CSV)
    cfg = config({"path": str(path), "skip_bad_rows": True, "retime": "poisson"}, [2])
    run_sweep(cfg, tmp_path / "out", progress=False)
    summary = json.loads((tmp_path / "out" / "runs" / "orca__rate2__seed0" /
                          "summary.json").read_text())
    assert "skipped_bad_rows=6 of 9 rows read" in summary[WORKLOAD_NOTE]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_skip_bad_rows_takes_a_bool(tmp_path, value):
    with pytest.raises(ConfigError, match="workload.trace.skip_bad_rows"):
        config({"path": str(write(tmp_path, "t.csv", BAD_CSV)), "skip_bad_rows": value})

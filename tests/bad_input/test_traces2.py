"""Traces, second round (issue 28): a trace path must be a regular file before it is read or
hashed (a FIFO or /dev/zero hung the run identity; `~` broke there too); times of day crossing
midnight roll to the next day; `nan` and `inf` timeouts both mean none; a request cut at the
context limit and then rejected keeps both events."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.run import load_config
from experiments.sweep.runner import expand, run_identity
from experiments.sweep.workload import load_base_trace, trace_path
from policies.simulate import simulate
from sim.util.errors import TraceError
from tests.factories import LinearExecutor, finishes, make_trace
from traces.mapping import TimestampFormat, TraceMapping, load_mapped
from traces.registry import load_trace
from traces.times import MidnightWarning

CSV = "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,20,6\n"




def config(tmp_path: Path, path: str) -> object:
    raw = {"name": "t", "workload": {"trace": {"path": path, "format": "csv"}},
           "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"}, "policies": ["orca"]}
    file = tmp_path / "c.yaml"
    file.write_text(yaml.safe_dump(raw))
    return load_config(file)


# ---- the trace path: a regular file, `~` expanded, checked before reading or hashing --------
@pytest.mark.parametrize("kind", ["fifo", "zero", "folder"])
def test_a_trace_that_is_not_a_regular_file_is_refused_before_it_is_hashed(tmp_path, kind):
    path = tmp_path / "trace.csv"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    cfg = config(tmp_path, str(path))

    def check() -> None:
        for step in (lambda: trace_path(cfg.workload.trace),
                     lambda: run_identity(cfg, expand(cfg)[0]), lambda: load_base_trace(cfg),
                     lambda: load_trace(path)):
            with pytest.raises(TraceError, match="not a regular file") as err:
                step()
            assert err.value.source == str(path)
    finishes(check)


def test_a_trace_path_under_home_is_read_and_hashed(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "t.csv").write_text(CSV)
    cfg = config(tmp_path, "~/t.csv")
    assert trace_path(cfg.workload.trace) == str(tmp_path / "t.csv")
    identity = run_identity(cfg, expand(cfg)[0])
    assert identity["workload"]["trace"]["content"].startswith(f"{len(CSV)}:")
    assert len(load_base_trace(cfg)) == 2


def test_a_missing_trace_is_still_file_not_found(tmp_path):
    cfg = config(tmp_path, str(tmp_path / "none.csv"))
    with pytest.raises(FileNotFoundError, match="none.csv"):
        trace_path(cfg.workload.trace)


# ---- times of day crossing midnight ------------------------------------------------------------
def clock_trace(tmp_path: Path, times: list[str]) -> Path:
    path = tmp_path / "clock.csv"
    rows = "".join(f"{t},10,5\n" for t in times)
    path.write_text("ts,prompt_tokens,output_tokens\n" + rows)
    return path


def load_clock(path: Path, pattern: str = "%H:%M:%S") -> pd.DataFrame:
    mapping = TraceMapping.from_columns({"arrival_s": "ts"}, TimestampFormat(format=pattern))
    return load_mapped(path, "csv", mapping)


def test_times_of_day_crossing_midnight_roll_to_the_next_day(tmp_path):
    path = clock_trace(tmp_path, ["23:59:58", "23:59:59", "00:00:01", "00:00:02"])
    with pytest.warns(MidnightWarning, match="crossed midnight 1 time.*data row 2"):
        df = load_clock(path)
    assert df["arrival_s"].tolist() == [0.0, 1.0, 3.0, 4.0]  # 4 s, not 86,398 s


@pytest.mark.filterwarnings("ignore::traces.schema.UnsortedTraceWarning")
def test_two_midnights_and_slightly_unsorted_rows(tmp_path):
    path = clock_trace(tmp_path, ["22:00:00", "23:59:59", "23:59:57", "06:00:00", "18:00:00",
                                  "01:00:00"])
    with pytest.warns(MidnightWarning, match="crossed midnight 2 time"):
        df = load_clock(path)
    hours = sorted(round(x / 3600, 3) for x in df["arrival_s"])
    assert hours == [0.0, 1.999, 2.0, 8.0, 20.0, 27.0]


def test_a_long_jump_after_midnight_is_ambiguous_and_names_the_row(tmp_path):
    path = clock_trace(tmp_path, ["23:00:00", "01:00:00", "23:30:00"])
    with pytest.raises(TraceError, match="crossed midnight before this row") as err:
        load_clock(path)
    assert err.value.row == 2 and err.value.field == "ts" and err.value.value == "23:30:00"


@pytest.mark.filterwarnings("ignore::traces.schema.UnsortedTraceWarning")
def test_dated_timestamps_are_not_rolled(tmp_path):
    path = clock_trace(tmp_path, ["2024-01-02 00:00:01", "2024-01-01 23:59:59"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", MidnightWarning)
        df = load_clock(path, "%Y-%m-%d %H:%M:%S")
    assert df["arrival_s"].tolist() == [0.0, 2.0]  # sorted by date, 2 s apart


# ---- timeouts: nan and inf both mean none ------------------------------------------------------
@pytest.mark.parametrize("name,text", [
    ("t.csv", CSV.replace("output_tokens\n0,10,5\n1,20,6", "output_tokens,timeout_s\n"
                          "0,10,5,nan\n1,20,6,inf")),
    ("t.csv", CSV.replace("output_tokens\n0,10,5\n1,20,6", "output_tokens,timeout_s\n"
                          "0,10,5,\n1,20,6,Infinity")),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "timeout_s": "nan"}\n'
                '{"arrival_s": 1, "prompt_tokens": 20, "output_tokens": 6, "timeout_s": "inf"}\n'),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "timeout_s": NaN}\n'
                '{"arrival_s": 1, "prompt_tokens": 20, "output_tokens": 6, '
                '"timeout_s": Infinity}\n'),
])
def test_nan_and_inf_timeouts_both_mean_no_timeout(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    df = load_trace(path)
    assert df["timeout_s"].isna().all()
    res = simulate(df, "orca", {}, [LinearExecutor()])
    assert (res.records["status"] == "finished").all()


@pytest.mark.parametrize("cell", ["0", "-1", "-inf", "soon"])
def test_other_timeouts_are_refused_naming_the_row(tmp_path, cell):
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens,timeout_s\n0,10,5,3\n1,20,6,{cell}\n")
    with pytest.raises(TraceError, match=r"a timeout must be a number of seconds > 0 \(empty, "
                                         r"nan or inf: none\)") as err:
        load_trace(path)
    assert err.value.row == 1 and err.value.field == "timeout_s"


# ---- a request cut at the context limit, then rejected: both events ---------------------------
def test_a_cut_then_rejected_request_keeps_both_events():
    trace = make_trace([(0.0, 100, 50), (0.1, 10, 5)])
    res = simulate(trace, "vllm_v0", {}, [LinearExecutor(capacity=64)], max_model_len=120)
    events = res.events[res.events["request_id"] == 0]
    assert events["kind"].tolist() == ["cut", "rejected"]
    cut, rejected = events["info"].tolist()
    assert cut.startswith("max_model_len: prompt_tokens=100 + output_tokens=50 > "
                          "max_model_len=120: output cut to 20")
    assert rejected.startswith("exceeds_kv_capacity")
    record = res.records.set_index("request_id").loc[0]
    assert record["status"] == "rejected" and record["reason"] == "exceeds_kv_capacity"


def test_a_cut_request_that_runs_has_one_cut_event():
    res = simulate(make_trace([(0.0, 100, 50)]), "vllm_v0", {}, [LinearExecutor()],
                   max_model_len=120)
    assert res.events["kind"].tolist() == ["cut"]

"""The calibration tools refuse unusable input instead of writing results from it (issue 28).

Before: `bench_calibrate` fitted and wrote a calibration, exit 0, from a file with empty
inter-token gaps, latencies below their TTFT, TTFTs of 1e300 or requests the simulation all
rejected (parameters pinned at their bounds); `fidelity_e2e` truncated a fractional TP or batch
size and scored infinite times. Now inconsistent rows are dropped with a count per reason, and
a file (or table) with nothing usable is an error naming it, exit 2, nothing written.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest

from experiments.bench.calibrate import main as calibrate_main
from experiments.fidelity.e2e import main as fidelity_main
from experiments.fidelity.e2e import read_perf_rows
from sim.fit.bench_fit import fit_bench
from sim.fit.bench_replay import check_trace, usable_rows
from sim.util.errors import ConfigError
from tests.test_fidelity_bench import CLUSTER, KNOWN, VLLM, two_runs
from tests.test_fidelity_e2e import perf_table

ARGS = ("--policy", "vllm_v0", "--cost-model", "roofline", "--max-evals", "3")


@pytest.fixture(scope="module")
def light() -> dict[str, Any]:
    """A 30-request vLLM detailed result (rebuilt arrivals) served with known overheads."""
    return two_runs(KNOWN)[0]


def edited(data: dict[str, Any], edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    edit(out)
    return out


def calibrate(tmp_path: Path, data: dict[str, Any]) -> tuple[int, Path]:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "cal.json"
    return calibrate_main([str(path), *ARGS, "--out", str(out)]), out


def empty_gaps(d: dict[str, Any]) -> None:
    d["itls"] = [[] for _ in d["itls"]]


def latency_below_ttft(d: dict[str, Any]) -> None:
    d["latencies"] = [t / 2 for t in d["ttfts"]]


def huge_ttft(d: dict[str, Any]) -> None:
    d["ttfts"] = [1e300] * len(d["ttfts"])


@pytest.mark.parametrize("edit, reason", [
    (empty_gaps, "no decode time"),
    (latency_below_ttft, "latency below TTFT"),
    (huge_ttft, "TTFT above"),
])
def test_a_bench_file_with_no_usable_request_writes_nothing(tmp_path, capsys, light, edit,
                                                            reason):
    rc, out = calibrate(tmp_path, edited(light, edit))
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "bench.json" in err and f"none of its 30 requests is usable: 30 {reason}" in err


def test_a_bench_file_the_simulation_rejects_entirely_writes_nothing(tmp_path, capsys, light):
    data = edited(light, lambda d: d.update(input_lens=[5000] * len(d["input_lens"])))
    rc, out = calibrate(tmp_path, data)  # 5000-token prompts, llama-2-7b's context is 4096
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "finished none" in err and "rejected 30 (prompt_too_long: 30)" in err


def test_inconsistent_requests_are_dropped_and_counted(tmp_path, capsys, light):
    def some_bad(d: dict[str, Any]) -> None:
        d["latencies"] = [t + math.fsum(g) for t, g in zip(d["ttfts"], d["itls"])]
        d["latencies"][0] = d["ttfts"][0] / 2
        d["latencies"][1] = d["ttfts"][1] = 1e300

    rc, out = calibrate(tmp_path, edited(light, some_bad))
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "dropped 2 of 30 requests" in err and "1 latency below TTFT" in err
    assert "1 TTFT above" in err
    run = json.loads(out.read_text())["runs"][0]
    assert run["num_requests"] == 28 and sum(run["dropped"].values()) == 2


def test_a_clean_file_reports_no_drops(tmp_path, capsys, light):
    rc, out = calibrate(tmp_path, light)
    assert rc == 0 and "dropped" not in capsys.readouterr().err
    assert "dropped" not in json.loads(out.read_text())["runs"][0]


def test_usable_rows_checks_each_request_against_the_run():
    trace = pd.DataFrame({"arrival_s": [0.0, 0.0, 1.0, 2.0, 3.0],
                          "prompt_tokens": [10] * 5, "output_tokens": [5, 1, 5, 5, 5],
                          "measured_ttft_s": [0.1, 0.1, 0.1, 0.1, 0.1],
                          "measured_tpot_s": [0.01, np.nan, 0.0, 0.01, 0.01],
                          "measured_e2e_s": [0.14, 0.1, 0.1, 0.14, 9.0]})
    kept, dropped = usable_rows(trace, duration_s=5.0, measured_arrivals=True)
    assert kept.index.tolist() == [0, 1, 3]
    assert sorted(k.split(" s ")[0].split(":")[0] for k in dropped) == [
        "latency above 5.001", "no decode time"] and set(dropped.values()) == {1}
    kept, dropped = usable_rows(trace, duration_s=10.0, measured_arrivals=True)
    assert kept.index.tolist() == [0, 1, 3]  # 9 s fit the run, but it ends at 12 s
    assert any(k.startswith("ends past the run's duration of 10.0 s") for k in dropped)
    assert len(usable_rows(trace, duration_s=10.0)[0]) == 4  # rebuilt arrivals: not checked


@pytest.mark.parametrize("column, value", [("measured_ttft_s", math.inf),
                                           ("measured_ttft_s", 0.0),
                                           ("measured_tpot_s", -0.01)])
def test_the_fit_api_refuses_unusable_measurements(column, value):
    trace = pd.DataFrame({"arrival_s": [0.0, 0.1], "prompt_tokens": [10, 20],
                          "output_tokens": [3, 4], "measured_ttft_s": [0.05, 0.06],
                          "measured_tpot_s": [0.02, 0.02]})
    trace.loc[1, column] = value
    with pytest.raises(ConfigError) as err:
        check_trace(trace)
    assert err.value.field == f"trace.{column}" and "row 1" in err.value.reason
    with pytest.raises(ConfigError, match=column):
        fit_bench(trace, CLUSTER, VLLM, max_evaluations=3)


def write_table(tmp_path: Path, edit: Callable[[pd.DataFrame], None]) -> Path:
    table = perf_table({"kind": "stage"}, repeats=1)
    table = table.astype({"tensor_parallel": float, "batch_size": float,
                          "token_time": float})
    edit(table)
    path = tmp_path / "perf.csv"
    table.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("column, value", [("tensor_parallel", 2.5), ("batch_size", 8.5),
                                           ("token_time", math.inf), ("prompt_size", 0)])
def test_fidelity_e2e_drops_and_counts_unusable_rows(tmp_path, capsys, column, value):
    path = write_table(tmp_path, lambda t: t.__setitem__(column, t[column].where(
        t.index != 0, value)))
    table, dropped = read_perf_rows(path)
    assert len(table) == 6 and list(dropped.values()) == [1]
    assert next(iter(dropped)).startswith(column)
    assert fidelity_main([str(path), "--out", str(tmp_path / "o")]) == 0
    assert f"dropped 1 rows: 1 with {column}" in capsys.readouterr().err
    rows = pd.read_csv(tmp_path / "o" / "rows.csv")
    assert np.isfinite(rows["rel_err"]).all() and (rows["tp"] == rows["tp"].round()).all()


@pytest.mark.parametrize("column, value", [("tensor_parallel", 2.5), ("token_time", math.inf),
                                           ("model", None)])
def test_fidelity_e2e_with_no_usable_row_names_the_column_and_writes_nothing(
        tmp_path, capsys, column, value):
    path = write_table(tmp_path, lambda t: t.__setitem__(column, value))
    with pytest.raises(ConfigError) as err:
        read_perf_rows(path)
    assert err.value.field == f"perf_csv.{column}" and "none of its 7 rows" in err.value.reason
    assert fidelity_main([str(path), "--out", str(tmp_path / "o")]) == 2
    assert f"perf_csv.{column}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_fidelity_e2e_refuses_a_non_finite_override(tmp_path, capsys):
    path = write_table(tmp_path, lambda t: None)
    assert fidelity_main([str(path), "--set", "cpu_step_s=inf", "--out",
                          str(tmp_path / "o")]) == 2
    assert "--set cpu_step_s" in capsys.readouterr().err

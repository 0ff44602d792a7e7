"""SLO checks, goodput, the capacity search (bisection over the rate) and its CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.capacity.main import SearchConfig, main as capacity_main, search_capacity
from experiments.capacity.table import result_line
from experiments.run import load_config, main as run_main
from sim.metrics.slo import SLO, good_requests, meets_slo, slo_summary, slo_violations
from sim.util.errors import ConfigError


# ---- SLO and goodput -------------------------------------------------------------------------
def records(rows: list[tuple[str, float, float, float, float]]) -> pd.DataFrame:
    """Records from (status, ttft_s, tpot_s, max_itl_s, e2e_s) rows, 10 outputs each."""
    df = pd.DataFrame(rows, columns=["status", "ttft_s", "tpot_s", "max_itl_s", "e2e_s"])
    df["normalized_latency_s"] = df["e2e_s"] / 10
    return df


def test_goodput_counts_finished_requests_meeting_every_bound():
    rec = records([("finished", 0.5, 0.02, 0.05, 1.0),  # good
                   ("finished", 1.5, 0.02, 0.05, 1.0),  # TTFT too long
                   ("finished", 0.5, 0.02, 0.30, 1.0),  # one gap too long
                   ("finished", 0.5, math.nan, 0.0, 0.5),  # one output: no TPOT, passes
                   ("rejected", math.nan, math.nan, 0.0, 0.0)])
    slo = SLO(ttft_p90_s=1.0, tbt_p99_s=0.2, tpot_p99_s=0.05)
    assert good_requests(rec, slo).tolist() == [True, False, False, True, False]
    out = slo_summary(rec, {"duration_s": 4.0, "p90_ttft_s": 0.9, "p99_itl_s": 0.1,
                            "p99_tpot_s": 0.02, "failed": 0}, slo)
    assert out == {"goodput": 0.5, "slo_attainment": 0.4, "meets_slo": 1.0}
    assert good_requests(rec, SLO(e2e_p99_s=0.9)).tolist() == [False] * 3 + [True, False]
    assert good_requests(rec, SLO(normalized_latency_mean_s=0.06)).sum() == 1


def test_run_level_bounds_and_failures():
    slo = SLO(ttft_p90_s=2.0, tbt_p99_s=0.1)
    ok = {"p90_ttft_s": 1.9, "p99_itl_s": 0.1, "failed": 0}
    assert meets_slo(ok, slo)
    assert slo_violations({**ok, "p90_ttft_s": 2.5}, slo) == ["p90_ttft_s=2.5 > 2"]
    assert not meets_slo({**ok, "failed": 1}, slo)
    assert not meets_slo({**ok, "p99_itl_s": math.nan}, slo)


@pytest.mark.parametrize("bad", [{}, {"ttft_p90_s": 0}, {"tbt_p99_s": -1.0},
                                 {"e2e_p99_s": math.inf}, {"tpot_p99_s": "fast"}])
def test_slo_is_validated(bad):
    with pytest.raises(ConfigError):
        SLO(**bad)


# ---- the search ---------------------------------------------------------------------------------
@pytest.mark.parametrize("true_capacity", [0.3, 3.7, 100.0])
def test_search_brackets_a_known_capacity(true_capacity):
    search = SearchConfig(min_rate=0.25, max_rate=1024, rel_tol=0.02)
    found = search_capacity(lambda rate: rate <= true_capacity, search)
    assert found.capacity_rps <= true_capacity < found.failing_rps
    assert found.failing_rps - found.capacity_rps <= 0.02 * found.failing_rps
    rates = [r for r, _ in found.probes]
    assert rates[:2] == [0.25, 0.5] and len(rates) == len(set(rates))


def test_search_edges():
    never = search_capacity(lambda rate: False, SearchConfig(min_rate=1.0, max_probes=6))
    # the first probe fails: no bisection towards 0 req/s (ever longer arrivals), capacity 0
    assert never.capacity_rps == 0.0 and never.probes == [(1.0, False)]
    line = result_line({"label": "p", "capacity_rps": 0.0, "failing_rps": 1.0,
                        "delivered_rps": math.nan, "seed_aggregate": "min",
                        "capacity_spread_rps": 0.0, "num_probes": 1, "wall_s": 0.1})
    assert "even the first probe (1 req/s) missed the SLO" in line and "--min-rate" in line
    always = search_capacity(lambda rate: True, SearchConfig(min_rate=1.0, max_rate=8.0))
    assert always.capacity_rps == 8.0 and always.failing_rps == math.inf
    assert [r for r, _ in always.probes] == [1.0, 2.0, 4.0, 8.0]


def test_search_config_is_validated():
    for bad in ({"min_rate": 0}, {"min_rate": 2.0, "max_rate": 1.0}, {"rel_tol": 0},
                {"max_probes": 0}):
        with pytest.raises(ConfigError):
            SearchConfig(**bad)


# ---- config and CLI -----------------------------------------------------------------------------
TINY = {
    "name": "tiny_capacity",
    "workload": {"synthetic": {"num_requests": 30, "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}},
                 {"name": "vllm_v0", "params": {"max_num_seqs": 16}}],
    "request_rates": [1],
    "slo": {"ttft_p90_s": 1.0, "tbt_p99_s": 0.2},
}


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_config_slo_section(tmp_path):
    cfg = load_config(write(tmp_path, TINY))
    assert cfg.slo == SLO(ttft_p90_s=1.0, tbt_p99_s=0.2)
    with pytest.raises(ConfigError, match=r"slo\.ttft_p90"):
        load_config(write(tmp_path, {**TINY, "slo": {"ttft_p90_s": -1}}))
    with pytest.raises(ConfigError, match=r"slo\.ttft"):
        load_config(write(tmp_path, {**TINY, "slo": {"ttft": 1}}))


def test_every_run_reports_goodput_when_an_slo_is_set(tmp_path):
    out = tmp_path / "sweep"
    assert run_main([str(write(tmp_path, TINY)), "--out", str(out), "--no-progress"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert {"goodput", "slo_attainment", "meets_slo"} <= set(summary.columns)
    assert (summary["goodput"] <= summary["request_throughput"] + 1e-12).all()


def test_capacity_cli_writes_results_per_policy(tmp_path, capsys):
    out = tmp_path / "cap"
    argv = [str(write(tmp_path, TINY)), "--out", str(out), "--rel-tol", "0.2",
            "--max-rate", "64", "--probe-s", "0", "--probe-kv", "0"]
    assert capacity_main(argv) == 0
    table = pd.read_csv(out / "capacity.csv")
    assert table["label"].tolist() == ["vanilla", "vllm_v0"]
    assert (table["capacity_rps"] > 0).all()
    # continuous batching sustains more than static batches of 4 under the same SLO
    assert table.loc[1, "capacity_rps"] > table.loc[0, "capacity_rps"]
    probes = pd.read_csv(out / "capacity_probes.csv")
    for row in table.itertuples():
        mine = probes[probes["label"] == row.label]
        assert mine[mine["meets_slo"]]["rate"].max() == row.capacity_rps
        failing = mine[~mine["meets_slo"]]["rate"]
        assert (failing.min() if len(failing) else math.inf) == row.failing_rps
    assert len(json.loads((out / "capacity.json").read_text())) == 2
    assert "vllm_v0: capacity" in capsys.readouterr().out


def test_run_capacity_flag_and_errors(tmp_path, capsys):
    out = tmp_path / "cap2"
    # static batches of 2: a low capacity, so the default (steady-state) probes stay short
    cfg = write(tmp_path, {**TINY, "policies": [{"name": "vanilla", "params": {"batch_size": 2}}]})
    assert run_main([str(cfg), "--capacity", "--out", str(out), "--no-progress",
                     "--set", "workload.synthetic.num_requests=20"]) == 0
    assert pd.read_csv(out / "capacity.csv")["label"].tolist() == ["vanilla"]
    no_slo = {k: v for k, v in TINY.items() if k != "slo"}
    assert capacity_main([str(write(tmp_path, no_slo))]) == 2
    assert "slo" in capsys.readouterr().err


def test_capacity_probes_run_as_ray_tasks_with_the_same_results(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    raw = {**TINY, "policies": [{"name": "vllm_v0", "params": {"max_num_seqs": 16}}]}
    argv = [str(write(tmp_path, raw)), "--rel-tol", "0.3", "--max-rate", "16", "--probe-s", "0",
            "--probe-kv", "0", "--no-progress"]
    try:
        assert capacity_main([*argv, "--out", str(tmp_path / "ray"), "--ray"]) == 0
    finally:
        ray.shutdown()
    assert capacity_main([*argv, "--out", str(tmp_path / "local")]) == 0
    a = pd.read_csv(tmp_path / "ray" / "capacity_probes.csv").drop(columns="wall_s")
    b = pd.read_csv(tmp_path / "local" / "capacity_probes.csv").drop(columns="wall_s")
    pd.testing.assert_frame_equal(a, b)

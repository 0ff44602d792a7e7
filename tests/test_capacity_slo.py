"""SLO capacity planning: attainment SLOs, ms units, no dummy rates, seeds, --jobs, the plot,
goodput columns."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.capacity.bisect import RateSearch, SearchConfig, search_capacity
from experiments.capacity.main import load_capacity_config, main as capacity_main
from experiments.config.backend import build_executors
from experiments.config.load import load_config
from policies.simulate import simulate
from sim.cluster.spec import ClusterSpec
from sim.metrics.slo import SLO, good_requests, meets_slo, slo_summary
from sim.util.errors import ConfigError

TINY = {
    "name": "tiny_slo",
    "workload": {"synthetic": {"num_requests": 24, "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}},
                 {"name": "vllm_v0", "params": {"max_num_seqs": 16}}],
    "slo": {"ttft_ms": 1000, "tbt_ms": 200, "attainment": 0.9},
}
FAST = ["--rel-tol", "0.25", "--max-rate", "32", "--no-progress",
        "--probe-s", "0", "--probe-kv", "0"]  # probes as configured: tiny and quick


def write(tmp_path: Path, raw: dict, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


# ---- attainment, by hand --------------------------------------------------------------------
def test_attainment_counts_rejected_and_failed_as_misses():
    rec = pd.DataFrame({
        "status": ["finished", "finished", "finished", "finished", "rejected", "failed"],
        "ttft_s": [0.1, 0.3, 0.1, 0.1, math.nan, 0.1],
        "tpot_s": [0.04, 0.04, 0.06, math.nan, math.nan, 0.01],
        "max_itl_s": [0.05] * 6, "e2e_s": [1.0] * 6, "normalized_latency_s": [0.1] * 6})
    slo = SLO(ttft_ms=200, tpot_ms=50, attainment=0.5)
    # good: row 0, and row 3 (one output: no TPOT); 2 of 6 requests
    assert good_requests(rec, slo).tolist() == [True, False, False, True, False, False]
    out = slo_summary(rec, {"duration_s": 4.0, "failed": 1}, slo)
    assert out == {"goodput": 0.5, "slo_attainment": pytest.approx(2 / 6), "meets_slo": 0.0}
    assert meets_slo({"slo_attainment": 0.5, "failed": 1}, slo)  # failures are only misses
    assert not meets_slo({"slo_attainment": 0.49}, slo)


def test_attainment_on_a_tiny_run_matches_a_hand_count():
    trace = pd.DataFrame({"arrival_s": [0.0, 0.05, 0.1, 0.15, 0.2, 0.25],
                          "prompt_tokens": [100, 3000, 200, 5000, 50, 400],
                          "output_tokens": [20, 30, 1, 10, 40, 25]})
    res = simulate(trace, "vllm_v0", {}, build_executors(ClusterSpec()), max_model_len=4096)
    rec = res.records
    assert (rec["status"] == "rejected").sum() == 1  # the 5000-token prompt
    ttft_bound, tpot_bound = float(rec["ttft_s"].median()), 0.05
    by_hand = 0
    for row in rec.itertuples():
        tpot_ok = math.isnan(row.tpot_s) or row.tpot_s <= tpot_bound
        by_hand += row.status == "finished" and row.ttft_s <= ttft_bound and tpot_ok
    slo = SLO(ttft_s=ttft_bound, tpot_s=tpot_bound)
    assert slo.attainment == 0.9  # DistServe's default
    out = slo_summary(rec, res.summary, slo)
    assert out["slo_attainment"] == pytest.approx(by_hand / 6)
    assert out["goodput"] == pytest.approx(by_hand / res.summary["duration_s"])
    assert out["meets_slo"] == float(by_hand / 6 >= 0.9)


# ---- units and validation -----------------------------------------------------------------------
def test_ms_and_seconds_are_the_same_slo(tmp_path):
    assert SLO(ttft_ms=200, tpot_ms=50, attainment=0.9) == SLO(ttft_s=0.2, tpot_s=0.05)
    assert SLO(ttft_p90_ms=1500, tbt_p99_ms=200) == SLO(ttft_p90_s=1.5, tbt_p99_s=0.2)
    in_ms = load_capacity_config(write(tmp_path, TINY, "ms.yaml"))
    in_s = load_capacity_config(write(tmp_path, {**TINY, "slo": {
        "ttft_s": 1.0, "tbt_s": 0.2, "attainment": 0.9}}, "s.yaml"))
    assert in_ms.slo == in_s.slo and in_ms.slo.describe() == {
        "ttft_s": 1.0, "tbt_s": 0.2, "attainment": 0.9}


@pytest.mark.parametrize("slo, field", [
    ({"ttft_ms": 200, "ttft_s": 0.2}, r"slo\.ttft_ms"),
    ({"tpot_ms": -5}, r"slo\.tpot_ms"),
    ({"tbt_p99_ms": "fast"}, r"slo\.tbt_p99_ms"),
    ({"ttft_s": 1, "attainment": 1.5}, r"slo\.attainment"),
    ({"ttft_p90_s": 1, "attainment": 0.9}, r"slo\.attainment"),
    ({"ttft_p90_s": 1, "ttft_s": 1}, r"slo=.*one form"),
    ({"ttft_msec": 1}, r"slo\.ttft_msec"),
])
def test_slo_errors_name_the_field(tmp_path, slo, field):
    with pytest.raises(ConfigError, match=field):
        load_capacity_config(write(tmp_path, {**TINY, "slo": slo}))


# ---- the search ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 3, 8])
def test_lookahead_gives_the_sequential_result(k):
    for true_capacity in (0.3, 5.0, 700.0, 5000.0):
        search = SearchConfig(rel_tol=0.02, max_probes=12)
        state = RateSearch(search)
        while rates := state.next_rates(k):
            state.record([(r, r <= true_capacity) for r in rates])
        assert state.result == search_capacity(lambda r: r <= true_capacity, search)


# ---- the CLI ------------------------------------------------------------------------------------
def test_capacity_needs_no_request_rates_but_a_sweep_does(tmp_path, capsys):
    path = write(tmp_path, TINY)
    with pytest.raises(ConfigError, match="request_rates"):
        load_config(path)
    out = tmp_path / "cap"
    assert capacity_main([str(path), "--out", str(out), *FAST]) == 0
    table = pd.read_csv(out / "capacity.csv")
    assert table["label"].tolist() == ["vanilla", "vllm_v0"] and (table["capacity_rps"] > 0).all()
    with pytest.raises(ConfigError, match=r"request_rates\[0\]"):  # given rates still checked
        load_capacity_config(write(tmp_path, {**TINY, "request_rates": [-1]}))


def test_seeds_min_mean_spread(tmp_path, capsys):
    path = write(tmp_path, {**TINY, "seeds": [0, 1, 2], "policies": TINY["policies"][:1]})
    out = tmp_path / "cap"
    assert capacity_main([str(path), "--out", str(out), *FAST]) == 0
    row = pd.read_csv(out / "capacity.csv").iloc[0]
    seeds = [row[f"capacity_seed{s}_rps"] for s in (0, 1, 2)]
    assert row["capacity_rps"] == row["capacity_min_rps"] == min(seeds)
    assert row["capacity_mean_rps"] == pytest.approx(sum(seeds) / 3)
    assert row["capacity_spread_rps"] == pytest.approx(max(seeds) - min(seeds))
    assert row["seed_aggregate"] == "min"
    probes = pd.read_csv(out / "capacity_probes.csv")
    for s, cap in zip((0, 1, 2), seeds):
        mine = probes[probes["seed"] == s]
        assert mine[mine["meets_slo"]]["rate"].max() == cap
    assert "capacity (min over seeds)" in capsys.readouterr().out
    mean_out = tmp_path / "mean"
    assert capacity_main([str(path), "--out", str(mean_out), "--seed-aggregate", "mean",
                          *FAST]) == 0
    mean_row = pd.read_csv(mean_out / "capacity.csv").iloc[0]
    assert mean_row["capacity_rps"] == pytest.approx(row["capacity_mean_rps"])
    assert "capacity (mean over seeds)" in capsys.readouterr().out


def test_jobs_2_gives_the_same_results_as_1(tmp_path):
    path = write(tmp_path, {**TINY, "seeds": [0, 1]})
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        assert capacity_main([str(path), "--out", str(out), "--jobs", jobs, *FAST]) == 0
        tables.append([pd.read_csv(out / name).drop(columns="wall_s")
                       for name in ("capacity.csv", "capacity_probes.csv")])
    for one, two in zip(*tables):
        pd.testing.assert_frame_equal(one, two)


def test_progress_plot_and_goodput_columns(tmp_path, capsys):
    path = write(tmp_path, {**TINY, "policies": ["vllm_v0"]})
    out = tmp_path / "cap"
    assert capacity_main([str(path), "--out", str(out), "--rel-tol", "0.25",
                          "--max-rate", "8"]) == 0
    printed = capsys.readouterr().out
    probes = pd.read_csv(out / "capacity_probes.csv")
    assert printed.count("probe vllm_v0 seed 0 @ ") == len(probes)
    assert "attainment" in printed and "goodput" in printed and "-> pass" in printed
    assert {"request_goodput", "slo_attainment", "meets_slo"} <= set(probes.columns)
    # goodput reads the measured window: never above the rate offered over it
    assert (probes["request_goodput"] <= probes["offered_rps"] + 1e-12).all()
    assert {"steady", "steady_reason", "delivered_rps", "all_slo_attainment"} <= \
        set(probes.columns)
    table = pd.read_csv(out / "capacity.csv")
    assert {"request_goodput", "slo_attainment"} <= set(table.columns)
    assert table.loc[0, "slo_attainment"] >= 0.9
    # cost and energy per output token: every probe, and their mean at capacity
    at_cap = probes[probes["meets_slo"] & (probes["rate"] == table.loc[0, "capacity_rps"])]
    assert (probes["usd_per_m_output_tokens"] > 0).all()
    assert (probes["j_per_output_token"] > 0).all()
    assert table.loc[0, "usd_per_m_output_tokens"] == pytest.approx(
        at_cap["usd_per_m_output_tokens"].mean())
    png = out / "capacity.png"
    assert png.stat().st_size > 0 and png.read_bytes()[:4] == b"\x89PNG"
    png.unlink()
    assert capacity_main(["--plot-only", str(out)]) == 0 and png.is_file()
    assert capacity_main(["--plot-only", str(tmp_path / "nothing")]) == 2

"""Steady state (issue 26): the measured window excludes warm-up and drain by rule, the check
flags an overload and a probe too short for its queue to settle, capacity and sweeps report it,
and every new option rejects a bad value naming it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.capacity.args import parse_rates
from experiments.capacity.main import CapacityExperiment, main as capacity_main
from experiments.capacity.probe import ProbeSettings, probe
from experiments.capacity.probe_length import ProbeRule
from experiments.config.experiment import experiment_from_dict
from experiments.run import main as run_main
from sim.metrics.measured_slo import measured_slo_summary
from sim.metrics.slo import SLO, slo_summary
from sim.metrics.steady import SteadyRule, measured_mask, measured_window, steady_summary
from sim.util.errors import ConfigError


def records(arrival: np.ndarray, finish: np.ndarray, ttft: np.ndarray | float = 0.1,
            status: str = "finished") -> pd.DataFrame:
    """Hand-made records: one output token's worth of latencies per request."""
    n = len(arrival)
    df = pd.DataFrame({"arrival_s": arrival, "finish_s": finish, "status": [status] * n})
    df["ttft_s"] = np.broadcast_to(ttft, n).astype(float)
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    df["tpot_s"] = 0.01
    df["max_itl_s"] = 0.01
    df["normalized_latency_s"] = df["e2e_s"] / 10
    return df


# ---- the rule's exclusions, by hand ---------------------------------------------------------
def test_warmup_and_drain_are_excluded_by_the_rule():
    arrival = np.arange(101, dtype=float)  # 0 .. 100 s, one a second: a 100 s window
    rule = SteadyRule(warmup_frac=0.1, drain_frac=0.2)
    assert measured_window(arrival, rule) == (10.0, 80.0)
    mask = measured_mask(arrival, rule)
    assert mask.sum() == 70 and arrival[mask].min() == 10 and arrival[mask].max() == 79
    # no drain: the last arrival is measured too
    assert measured_mask(arrival, SteadyRule(warmup_frac=0.5, drain_frac=0.0)).sum() == 51


def test_the_slo_reads_only_the_measured_requests():
    arrival = np.arange(100, dtype=float)
    ttft = np.where((arrival < 10) | (arrival >= 80), 5.0, 0.1)  # warm-up and drain miss it
    recs = records(arrival, arrival + 1.0, ttft)
    slo = SLO(ttft_s=1.0, attainment=0.9)
    rule = SteadyRule(warmup_frac=0.1, drain_frac=0.2)
    everything = slo_summary(recs, {"duration_s": 100.0}, slo)
    assert everything["slo_attainment"] == pytest.approx(0.7) and not everything["meets_slo"]
    measured = measured_slo_summary(recs, {"p99_itl_s": 0.01}, slo, rule)
    window = 99 * 0.7  # the measured window: from 9.9 s to 79.2 s
    assert measured["measured_slo_attainment"] == 1.0 and measured["measured_meets_slo"] == 1.0
    assert measured["measured_goodput"] == pytest.approx(70 / window)


def test_a_steady_run_and_an_overload():
    arrival = np.arange(0, 300, 0.5)  # 2 req/s for 300 s
    steady = steady_summary(records(arrival, arrival + 3.0), SteadyRule())
    assert steady["steady"] == 1.0 and steady["steady_reason"] == ""
    assert steady["offered_rps"] == pytest.approx(2.0, rel=0.01)
    assert steady["delivered_rps"] == pytest.approx(2.0, rel=0.01)
    # served one a second: the queue grows by 1 req/s, half of what is offered
    finish = np.arange(1, len(arrival) + 1, dtype=float) + 0.5
    over = steady_summary(records(arrival, finish), SteadyRule())
    assert over["steady"] == 0.0
    assert over["delivered_rps"] == pytest.approx(1.0, rel=0.02)
    assert over["queue_growth_rps"] == pytest.approx(1.0, rel=0.05)
    assert "delivered" in over["steady_reason"] and "grew" in over["steady_reason"]
    assert steady_summary(records(arrival, finish), SteadyRule(tolerance=1))["steady"] == 1.0
    # rejected requests leave at once but are never delivered
    turned = steady_summary(records(arrival, arrival, status="rejected"), SteadyRule())
    assert turned["steady"] == 0.0 and "rejected" in turned["steady_reason"]
    at_once = steady_summary(records(np.zeros(5), np.ones(5)), SteadyRule())
    assert at_once["steady"] == 0.0 and "one instant" in at_once["steady_reason"]


# ---- a too-short probe is flagged -----------------------------------------------------------
BURST = {"name": "burst",
         "workload": {"synthetic": {"num_requests": 40, "lengths": "alpaca"}},
         "cluster": {"model": "llama-2-7b", "gpu": "A10G"},
         "policies": [{"name": "vllm_v0"}],
         "slo": {"ttft_ms": 1000, "tbt_ms": 200, "attainment": 0.9}}


def test_a_too_short_probe_is_flagged():
    """40 requests at 40 req/s (about 3x what this GPU sustains): the KV cache admits them all,
    every one meets the SLO, but the probe ends before any finishes; 60 s shows the overload."""
    cfg = experiment_from_dict(BURST, "burst", cls=CapacityExperiment)
    short = probe(cfg, 0, cfg.slo, None, 40.0, 0,
                  ProbeSettings(SteadyRule(), ProbeRule(0, 0, max_doublings=0)))
    assert short["num_requests"] == 40 and short["all_slo_attainment"] >= 0.9  # looks fine
    assert not short["steady"] and "delivered" in short["steady_reason"]
    assert not short["meets_slo"] and "not steady" in short["missed"]
    long = probe(cfg, 0, cfg.slo, None, 40.0, 0,
                 ProbeSettings(SteadyRule(), ProbeRule(60, 0, max_doublings=0)))
    assert long["num_requests"] >= 2000 and not long["steady"]
    assert long["slo_attainment"] < 0.5 and not long["meets_slo"]


def test_capacity_of_a_burst_against_steady_state(tmp_path, capsys):
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(BURST), encoding="utf-8")
    common = ["--no-progress", "--max-rate", "64", "--rel-tol", "0.1"]
    old = ["--steady-tol", "1", "--warmup-frac", "0", "--drain-frac", "0", "--probe-s", "0",
           "--probe-kv", "0", "--probe-doublings", "0"]  # the check off: the old search
    assert capacity_main([str(path), "--out", str(tmp_path / "old"), *common, *old]) == 0
    assert capacity_main([str(path), "--out", str(tmp_path / "new"), *common,
                          "--probe-s", "60", "--probe-kv", "0"]) == 0
    burst = pd.read_csv(tmp_path / "old" / "capacity.csv").iloc[0]
    steady = pd.read_csv(tmp_path / "new" / "capacity.csv").iloc[0]
    # the burst's "capacity" delivers a fraction of its rate; the steady one delivers it
    assert burst["delivered_rps"] < 0.5 * burst["capacity_rps"]
    assert steady["delivered_rps"] == pytest.approx(steady["capacity_rps"], rel=0.1)
    assert steady["capacity_rps"] < 0.75 * burst["capacity_rps"]
    assert "steady-state rule" in steady["steady_rule"] and "probe length" in steady["probe_rule"]
    out = capsys.readouterr().out
    assert "delivered" in out and "steady-state rule: requests arriving in the first 10%" in out


def test_unsteady_probes_warn_loudly_and_show_in_the_table(tmp_path, capsys):
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(BURST), encoding="utf-8")
    assert capacity_main([str(path), "--out", str(tmp_path / "cap"), "--no-progress",
                          "--max-rate", "64", "--rel-tol", "0.1", "--probe-s", "0",
                          "--probe-kv", "0", "--probe-doublings", "0"]) == 0
    captured = capsys.readouterr()
    row = pd.read_csv(tmp_path / "cap" / "capacity.csv").iloc[0]
    assert row["unsteady_probes"] >= 1 and "WARNING: vllm_v0:" in captured.err
    header = next(line for line in captured.out.splitlines() if "capacity (min" in line)
    assert "delivered" in header and "unsteady" in header
    probes = pd.read_csv(tmp_path / "cap" / "capacity_probes.csv")
    assert (~probes.loc[~probes["steady"], "meets_slo"]).all()  # unsteady never passes


def test_fixed_rates_print_offered_and_delivered(tmp_path, capsys):
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(BURST), encoding="utf-8")
    assert capacity_main([str(path), "--out", str(tmp_path / "rates"), "--no-progress",
                          "--rates", "5,40", "--probe-s", "60", "--probe-kv", "0",
                          "--probe-doublings", "0"]) == 0
    rows = pd.read_csv(tmp_path / "rates" / "rate_probes.csv")
    assert rows["rate"].tolist() == [5.0, 40.0]
    assert rows["steady"].tolist() == [True, False]
    out = capsys.readouterr().out
    assert "offered" in out and "delivered" in out and "attainment (all requests)" in out


# ---- sweeps report it -----------------------------------------------------------------------
def test_every_sweep_run_reports_steady_state(tmp_path, capsys):
    raw = {**BURST, "request_rates": [2, 40]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = tmp_path / "sweep"
    assert run_main([str(path), "--out", str(out), "--no-progress"]) == 0
    summary = pd.read_csv(out / "summary.csv").set_index("rate")
    assert {"steady", "steady_reason", "offered_rps", "delivered_rps", "queue_growth_rps",
            "steady_rule", "measured_slo_attainment"} <= set(summary.columns)
    assert summary.loc[40, "steady"] == 0 and summary.loc[40, "delivered_rps"] < 20
    captured = capsys.readouterr()
    assert "WARNING: vllm_v0__rate40__seed0: not in steady state" in captured.err
    assert "steady-state rule" in captured.out and "delivered req/s" in captured.out


# ---- bad values name their field ------------------------------------------------------------
@pytest.mark.parametrize("fields, name", [
    ({"warmup_frac": -0.1}, "warmup_frac"), ({"warmup_frac": 1.0}, "warmup_frac"),
    ({"drain_frac": "a"}, "drain_frac"), ({"warmup_frac": 0.5, "drain_frac": 0.45}, "drain_frac"),
    ({"tolerance": 0}, "tolerance"), ({"tolerance": 1.5}, "tolerance"),
    ({"tolerance": True}, "tolerance")])
def test_steady_rule_rejects_bad_values(fields, name):
    with pytest.raises(ConfigError) as err:
        SteadyRule(**fields)
    assert err.value.field == name


@pytest.mark.parametrize("fields, name", [
    ({"min_window_s": -1}, "min_window_s"), ({"min_window_s": math.inf}, "min_window_s"),
    ({"kv_multiple": -0.5}, "kv_multiple"), ({"max_doublings": -1}, "max_doublings"),
    ({"max_doublings": 1.5}, "max_doublings"), ({"max_doublings": 11}, "max_doublings")])
def test_probe_rule_rejects_bad_values(fields, name):
    with pytest.raises(ConfigError) as err:
        ProbeRule(**fields)
    assert err.value.field == name


@pytest.mark.parametrize("flag, value", [
    ("--warmup-frac", "1.2"), ("--drain-frac", "-1"), ("--steady-tol", "0"),
    ("--probe-s", "-5"), ("--probe-kv", "-1"), ("--probe-doublings", "20"), ("--rates", "1,x"),
    ("--rates", "0"), ("--min-rate", "0"), ("--min-rate", "-1"), ("--max-probes", "0")])
def test_capacity_flags_reject_bad_values_naming_the_flag(tmp_path, capsys, flag, value):
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(BURST), encoding="utf-8")
    assert capacity_main([str(path), "--out", str(tmp_path / "x"), flag, value]) == 2
    assert f"error: {flag}=" in capsys.readouterr().err
    assert not (tmp_path / "x" / "capacity.csv").exists()


def test_parse_rates():
    assert parse_rates("28,30.5") == [28.0, 30.5]
    with pytest.raises(ConfigError, match="--rates"):
        parse_rates("inf")



def test_too_few_requests_leave_steadiness_undetermined_not_steady():
    """Three requests, none delivered in the window: a shortfall that small hides in a
    steady count's noise, so the run is neither called steady nor counted as a capacity."""
    out = steady_summary(records(np.array([0.0, 1.0, 2.0]), np.array([50.0, 51.0, 52.0])),
                         SteadyRule())
    assert math.isnan(out["steady"]) and out["steady_reason"].startswith("too few requests")
    many = np.arange(400, dtype=float) / 4  # 100 s at 4 req/s, each done in 0.5 s
    assert steady_summary(records(many, many + 0.5), SteadyRule())["steady"] == 1.0


def test_requests_no_load_could_serve_are_no_shortfall_but_turned_away_ones_are():
    """A tenth of the prompts are over max_model_len (rejected at arrival, as vLLM does): the
    run keeps pace with everything servable and is steady; the same tenth turned away by
    admission control is load shed, and the run is not."""
    arrival = np.arange(0, 300, 0.5)
    finish = arrival + 3.0
    df = records(arrival, finish)
    df["reason"] = ""
    tenth = np.arange(len(df)) % 10 == 0
    for reason, steady in (("prompt_too_long", 1.0), ("queue_full", 0.0)):
        shaped = df.copy()
        shaped.loc[tenth, ["status", "reason"]] = ["rejected", reason]
        shaped.loc[tenth, "finish_s"] = shaped.loc[tenth, "arrival_s"]
        out = steady_summary(shaped, SteadyRule())
        assert out["steady"] == steady, (reason, out["steady_reason"])
        assert out["offered_rps"] == pytest.approx(2.0, rel=0.01)  # every arrival, as before
    every = df.assign(status="rejected", reason="prompt_too_long", finish_s=df["arrival_s"])
    assert "rejected for its shape" in steady_summary(every, SteadyRule())["steady_reason"]


def test_experiments_run_capacity_passes_the_capacity_flags_through(tmp_path, capsys):
    """`python -m experiments.run CONFIG --capacity` takes `experiments.capacity.main`'s flags (the
    README teaches that command); without --capacity they are unknown arguments."""
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(BURST), encoding="utf-8")
    assert run_main([str(path), "--capacity", "--out", str(tmp_path / "x"),
                     "--steady-tol", "0"]) == 2
    assert "error: --steady-tol=0.0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        run_main([str(path), "--steady-tol", "0.1"])
    assert info.value.code == 2 and "unrecognized arguments: --steady-tol 0.1" in \
        capsys.readouterr().err

"""Bring-your-own workloads: trace column mapping and timestamps, re-timing (Poisson, Gamma,
Weibull) by rate and CV, rate inf, multi-client mixes, and their config sections."""

import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from experiments.config.experiment import experiment_from_dict
from experiments.config.load import load_config
from experiments.sweep.workload import build_workload, load_base_trace
from policies.simulate import simulate
from sim.util.errors import ConfigError, TraceError
from tests.factories import LinearExecutor
from traces.arrivals import arrivals, weibull_cv, weibull_shape
from traces.clients import ClientSpec, MultiClientConfig, multi_client_trace
from traces.mapping import TimestampFormat, TraceMapping, load_mapped
from traces.synthetic import SyntheticConfig, synthetic_trace
from traces.transform import gamma_from_lengths, poisson_from_lengths

ROOT = Path(__file__).resolve().parents[1]
CUSTOM_CSV = """when,in_len,out_len,who
2024-03-10T12:00:00+01:00,100,20,alice
2024-03-10T11:00:00.250Z,50,10,bob
2024-03-10T06:00:01-05:00,70,5,alice
2024-03-10T11:00:02.5,30,8,carol
"""
MAP = {"arrival_s": "when", "prompt_tokens": "in_len", "output_tokens": "out_len", "app": "who"}
CLUSTER = {"model": "llama-2-7b", "gpu": "A100-80GB"}


def write(tmp_path: Path, text: str, name: str = "mine.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config(workload: dict, rates: list | None = None, **extra: object):
    raw = {"workload": workload, "cluster": CLUSTER, "policies": [{"name": "orca"}], **extra}
    if rates is not None:
        raw["request_rates"] = rates
    return experiment_from_dict(raw, "t")


# ---- column mapping and timestamps ---------------------------------------------------------
def test_custom_columns_with_iso_timestamps_replay(tmp_path):
    path = write(tmp_path, CUSTOM_CSV)
    cfg = config({"trace": {"path": str(path), "columns": MAP,
                            "timestamp": {"format": "iso8601"}}})
    base = load_base_trace(cfg)
    # timezones to UTC: 11:00:00 (+01:00), 11:00:00.25, 11:00:01 (-05:00), 11:00:02.5 (naive)
    assert base["arrival_s"].tolist() == [0.0, 0.25, 1.0, 2.5]
    assert base["prompt_tokens"].tolist() == [100, 50, 70, 30]
    assert base["app"].tolist() == ["alice", "bob", "alice", "carol"]
    assert base.attrs["arrival_origin"] == 1710068400.0  # 2024-03-10T11:00:00Z, epoch s
    trace = build_workload(cfg, base, None, 0)
    res = simulate(trace, "orca", {}, [LinearExecutor()])
    assert (res.records["status"] == "finished").all() and len(res.records) == 4
    assert res.records["arrival_s"].tolist() == [0.0, 0.25, 1.0, 2.5]


@pytest.mark.parametrize("unit,scale", [("s", 1.0), ("ms", 1e3), ("us", 1e6), ("ns", 1e9)])
def test_epoch_units(tmp_path, unit, scale):
    units = Decimal(int(scale))  # per second
    rows = "\n".join(f"{(Decimal(1_700_000_000) + Decimal(t)) * units},10,5"
                     for t in ("0", "1.5", "4"))
    path = write(tmp_path, "ts,p,o\n" + rows + "\n")
    mapping = TraceMapping.from_columns({"arrival_s": "ts", "prompt_tokens": "p",
                                         "output_tokens": "o"}, TimestampFormat(unit=unit))
    df = load_mapped(path, "csv", mapping)
    assert df["arrival_s"].tolist() == [0.0, 1.5, 4.0]


def test_strftime_pattern(tmp_path):
    path = write(tmp_path, "t,p,o\n10/03/2024 11:00:00,1,1\n10/03/2024 11:01:30,2,2\n")
    mapping = TraceMapping.from_columns({"arrival_s": "t", "prompt_tokens": "p",
                                         "output_tokens": "o"},
                                        TimestampFormat(format="%d/%m/%Y %H:%M:%S"))
    assert load_mapped(path, "csv", mapping)["arrival_s"].tolist() == [0.0, 90.0]


def test_mapped_errors_name_the_file_column_row_and_value(tmp_path):
    bad_date = CUSTOM_CSV.replace("2024-03-10T06:00:01-05:00", "last tuesday")
    mapping = TraceMapping.from_columns(MAP, TimestampFormat(format="iso8601"))
    with pytest.raises(TraceError) as err:
        load_mapped(write(tmp_path, bad_date), "csv", mapping)
    assert (err.value.row, err.value.field, err.value.value) == (2, "when", "last tuesday")
    bad_len = CUSTOM_CSV.replace(",70,", ",seventy,")
    with pytest.raises(TraceError) as err:
        load_mapped(write(tmp_path, bad_len), "csv", mapping)
    assert err.value.row == 2 and "in_len" in err.value.field and err.value.value == "seventy"
    with pytest.raises(TraceError, match="'nope'"):
        load_mapped(write(tmp_path, CUSTOM_CSV), "csv",
                    TraceMapping.from_columns({**MAP, "output_tokens": "nope"}))


def test_mapping_config_errors_name_the_field():
    with pytest.raises(ConfigError) as err:
        config({"trace": {"path": "x.csv", "timestamp": {"unit": "minutes"}}})
    assert err.value.field == "workload.trace.timestamp.unit"
    with pytest.raises(ConfigError) as err:
        config({"trace": {"path": "x.csv", "columns": {"arrival": "ts"}}})
    assert err.value.field == "workload.trace.columns.arrival"
    with pytest.raises(ConfigError) as err:
        config({"trace": {"path": "x.csv", "retime": "poisson", "burstiness": 2}}, [1])
    assert err.value.field == "workload.trace.burstiness"


# ---- arrival processes: mean rate and CV ---------------------------------------------------
def gap_stats(times: np.ndarray) -> tuple[float, float]:
    gaps = np.diff(times)
    return 1.0 / gaps.mean(), gaps.std() / gaps.mean()


@pytest.mark.parametrize("process,burstiness,cv", [
    ("poisson", 1.0, 1.0), ("gamma", 0.5, 1 / math.sqrt(0.5)), ("gamma", 2.0, 1 / math.sqrt(2)),
    ("weibull", None, 0.5), ("weibull", None, 2.0)])
def test_arrival_processes_have_their_rate_and_cv(process, burstiness, cv):
    n, rate = 200_000, 4.0
    lengths = synthetic_trace(SyntheticConfig(num_requests=n, rate_per_s=1.0), 0)
    if process == "poisson":
        times = poisson_from_lengths(lengths, rate, seed=1)["arrival_s"].to_numpy()
    elif process == "gamma":
        times = gamma_from_lengths(lengths, rate, 1, burstiness=burstiness)["arrival_s"]
        times = times.to_numpy()
    else:
        cfg = SyntheticConfig(num_requests=n, rate_per_s=rate, arrival="weibull", cv=cv)
        times = synthetic_trace(cfg, 1)["arrival_s"].to_numpy()
    got_rate, got_cv = gap_stats(times)
    assert got_rate == pytest.approx(rate, rel=0.02)
    assert got_cv == pytest.approx(cv, rel=0.05)


def test_gamma_retiming_at_burstiness_one_is_the_poisson_retiming():
    lengths = synthetic_trace(SyntheticConfig(num_requests=500), 0)
    poisson = poisson_from_lengths(lengths, 3.0, seed=4)
    gamma = gamma_from_lengths(lengths, 3.0, 4, burstiness=1.0)
    assert poisson.equals(gamma)


def test_weibull_shape_inverts_its_cv():
    for cv in (0.1, 0.5, 1.0, 3.0, 10.0):
        assert weibull_cv(weibull_shape(cv)) == pytest.approx(cv, rel=1e-9)
    assert weibull_shape(1.0) == pytest.approx(1.0, rel=1e-9)  # exponential


def test_rate_inf_puts_every_request_at_zero(tmp_path):
    rng = np.random.default_rng(0)
    assert arrivals(math.inf, 5, rng=rng).tolist() == [0.0] * 5
    path = write(tmp_path, CUSTOM_CSV)
    trace = {"path": str(path), "columns": MAP, "timestamp": {"format": "iso8601"}}
    for retime in ("poisson", "gamma", "scale"):
        cfg = config({"trace": {**trace, "retime": retime}}, ["inf"])
        assert cfg.request_rates == (math.inf,)
        df = build_workload(cfg, load_base_trace(cfg), math.inf, 0)
        assert df["arrival_s"].tolist() == [0.0] * 4
        assert df["prompt_tokens"].tolist() == [100, 50, 70, 30]
    cfg = config({"synthetic": {"num_requests": 7}}, [math.inf, 2])
    assert build_workload(cfg, None, math.inf, 0)["arrival_s"].tolist() == [0.0] * 7
    with pytest.raises(ConfigError) as err:
        config({"synthetic": {"duration_s": 10}}, ["inf"])
    assert err.value.field.startswith("workload")


# ---- multi-client ----------------------------------------------------------------------------
def test_clients_shares_and_rates():
    clients = (ClientSpec("chat", 3), ClientSpec("agent", 1, "gamma", burstiness=0.5),
               ClientSpec("batch", 1, "weibull", cv=2.0, lengths="alpaca"))
    rate, n = 10.0, 60_000
    df = multi_client_trace(MultiClientConfig(clients, rate, num_requests=n), seed=3)
    assert len(df) == n and (np.diff(df["arrival_s"]) >= 0).all()
    span = float(df["arrival_s"].iloc[-1] - df["arrival_s"].iloc[0])
    assert n / span == pytest.approx(rate, rel=0.03)
    for name, share, cv in (("chat", 0.6, 1.0), ("agent", 0.2, math.sqrt(2)), ("batch", 0.2, 2)):
        mine = df[df["app"] == name]["arrival_s"].to_numpy()
        assert len(mine) / n == pytest.approx(share, abs=0.01)
        assert len(mine) / span == pytest.approx(rate * share, rel=0.04)
        assert gap_stats(mine)[1] == pytest.approx(cv, rel=0.1)
    assert df[df["app"] == "batch"]["prompt_tokens"].mean() < 40  # alpaca lengths


def test_clients_config_and_determinism():
    workload = {"num_requests": 200, "max_concurrency": 16, "clients": [
        {"name": "a", "share": 1},
        {"name": "b", "share": 1, "arrival": "gamma", "cv": 3.0,
         "output": {"kind": "constant", "mean": 7}}]}
    cfg = config(workload, [2, "inf"])
    assert cfg.workload.max_concurrency == 16
    one = build_workload(cfg, None, 2.0, 5)
    assert one.equals(build_workload(cfg, None, 2.0, 5)) and len(one) == 200
    assert set(one["app"]) == {"a", "b"}
    assert (one[one["app"] == "b"]["output_tokens"] == 7).all()
    at_once = build_workload(cfg, None, math.inf, 5)
    assert (at_once["arrival_s"] == 0).all() and len(at_once) == 200
    bad = {**workload, "clients": [{"name": "a", "arrival": "poisson", "burstiness": 2}]}
    with pytest.raises(ConfigError) as err:
        config(bad, [1])
    assert err.value.field == "workload.clients[0].burstiness"
    with pytest.raises(ConfigError) as err:
        config({"synthetic": {"num_requests": 5}, "num_requests": 5}, [1])
    assert err.value.field == "workload.num_requests"
    with pytest.raises(ConfigError) as err:
        config({"synthetic": {"num_requests": 5}, "max_concurrency": 0}, [1])
    assert err.value.field == "workload.max_concurrency"


def test_shipped_byo_configs_load():
    byo = load_config(ROOT / "experiments" / "configs" / "byo_workload.yaml")
    assert byo.request_rates == (2, math.inf) and byo.workload.max_concurrency == 8
    assert len(load_base_trace(byo)) == 40
    mix = load_config(ROOT / "experiments" / "configs" / "clients.yaml")
    assert [c.name for c in mix.workload.clients.clients] == ["chat", "agent", "batch"]

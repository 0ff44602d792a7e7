"""Early stop of a capacity probe (sim/engine/verdict.py): misses counted only when certain, the
stop exactly at the judge's comparison, and a search with it finding the same capacities."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from experiments.capacity.main import main as capacity_main
from experiments.capacity.probe import STOPPED, ProbeSettings, probe
from experiments.config.load import load_config
from sim.core.request import Request, RequestStatus
from sim.engine.verdict import SloWatch, VerdictReached
from sim.util.errors import ConfigError


def request(rid: int, arrival: float, first: float = math.nan, finish: float = math.nan,
            status: RequestStatus = RequestStatus.RUNNING) -> Request:
    r = Request(rid, arrival, 10, 5)
    r.first_token_s, r.finish_s, r.status = first, finish, status
    return r


def test_only_certain_misses_of_measured_requests_count():
    watch = SloWatch(1.0, 9.0, num_measured=10, attainment=0.8, ttft_s=0.5)
    done = [request(0, 0.5, status=RequestStatus.REJECTED),  # before the window: not judged
            request(1, 1.0, 1.2, 3.0, RequestStatus.FINISHED),  # good
            request(2, 2.0, 2.6, 4.0, RequestStatus.FINISHED),  # TTFT 0.6 > 0.5: a miss
            request(3, 3.0, status=RequestStatus.FAILED)]  # final, not finished: a miss
    watch.on_final(done, 4.0)
    assert watch.missed == {2, 3}
    live = {4: request(4, 3.6), 5: request(5, 3.4, first=3.5), 6: request(6, 9.5)}
    watch.look(live, 4.0)  # 4 has waited 0.4 s: not yet; 5 has its first token; 6 unmeasured
    assert watch.missed == {2, 3}
    with pytest.raises(VerdictReached, match="3 of 10 measured requests") as stop:
        watch.look(live, 4.2)  # 4 has waited 0.6 s: (10 - 3) / 10 = 0.7 < 0.8
    assert stop.value.now_s == 4.2


def test_the_stop_comes_exactly_when_the_target_is_out_of_reach():
    watch = SloWatch(0.0, 10.0, num_measured=10, attainment=0.9)
    watch.on_final([request(0, 1.0, status=RequestStatus.REJECTED)], 1.0)  # 9/10 still reachable
    with pytest.raises(VerdictReached):
        watch.on_final([request(1, 2.0, status=RequestStatus.REJECTED)], 2.0)  # 8/10 < 0.9


TINY = {
    "name": "tiny_early_stop",
    "workload": {"synthetic": {"num_requests": 200, "lengths": "sharegpt"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vllm"}, {"name": "sarathi"}],
    "request_rates": [1],
    "slo": {"ttft_s": 0.5, "tpot_s": 0.1, "attainment": 0.9},
    "seeds": [0],
}


def write(tmp_path, raw: dict):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_a_stopped_probe_fails_as_the_full_one_does_and_a_passing_one_is_unchanged(tmp_path):
    cfg = load_config(write(tmp_path, TINY))
    full, early = ProbeSettings(), ProbeSettings(early_stop=True)
    over_full = probe(cfg, 0, cfg.slo, None, 64.0, 0, full)
    over_early = probe(cfg, 0, cfg.slo, None, 64.0, 0, early)
    assert not over_full["meets_slo"] and not over_early["meets_slo"]
    assert over_early["missed"].startswith("certain before the end")
    assert math.isnan(over_early["slo_attainment"])
    low_full = probe(cfg, 0, cfg.slo, None, 0.5, 0, full)
    low_early = probe(cfg, 0, cfg.slo, None, 0.5, 0, early)
    assert low_full["meets_slo"]
    assert {k: v for k, v in low_early.items() if k != "wall_s"} == \
        {k: v for k, v in low_full.items() if k != "wall_s"}


def test_a_capacity_search_with_early_stop_finds_the_same_capacities(tmp_path):
    path = write(tmp_path, TINY)
    base = ["--rel-tol", "0.2", "--max-rate", "64", "--probe-s", "0", "--probe-kv", "0",
            "--no-progress"]
    assert capacity_main([str(path), "--out", str(tmp_path / "full"), *base]) == 0
    assert capacity_main([str(path), "--out", str(tmp_path / "early"), *base,
                          "--early-stop"]) == 0
    full = pd.read_csv(tmp_path / "full" / "capacity.csv")
    early = pd.read_csv(tmp_path / "early" / "capacity.csv")
    assert early["capacity_rps"].tolist() == full["capacity_rps"].tolist()
    assert early["failing_rps"].tolist() == full["failing_rps"].tolist()
    probes = pd.read_csv(tmp_path / "early" / "capacity_probes.csv")
    stopped = probes["missed"].fillna("").str.startswith("certain before the end")
    assert stopped.any()
    assert (probes.loc[stopped, "steady_reason"] == STOPPED).all()
    unsteady = (~probes["steady"].astype(bool) & ~stopped).sum()  # stopped: not judged on it
    assert early["unsteady_probes"].sum() == unsteady


def test_early_stop_takes_only_a_boolean():
    with pytest.raises(ConfigError, match="early_stop"):
        ProbeSettings(early_stop="yes")

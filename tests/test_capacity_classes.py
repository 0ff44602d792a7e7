"""Per-class SLOs in a capacity search (issue 26): a rate passes only when every class meets its
own SLO; a class SLO the search cannot check is refused, naming its field."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from experiments.capacity.main import CapacityExperiment, main as capacity_main
from experiments.capacity.probe import ProbeSettings, probe
from experiments.capacity.probe_length import ProbeRule
from experiments.config.experiment import experiment_from_dict
from sim.metrics.steady import SteadyRule

MIX = {"name": "mix",
       "workload": {"num_requests": 60, "clients": [
           {"name": "chat", "class": "chat", "lengths": "alpaca"},
           {"name": "docs", "class": "docs", "lengths": "alpaca"}]},
       "cluster": {"model": "llama-2-7b", "gpu": "A10G"},
       "policies": [{"name": "vllm_v0"}],
       "slo": {"ttft_ms": 1000, "tbt_ms": 200, "attainment": 0.9}}
SETTINGS = ProbeSettings(SteadyRule(), ProbeRule(60, 0, max_doublings=0))
FAST = ["--no-progress", "--max-rate", "32", "--rel-tol", "0.1", "--probe-s", "60",
        "--probe-kv", "0"]


def config(**classes: dict) -> CapacityExperiment:
    raw = copy.deepcopy(MIX)
    if classes:
        raw["classes"] = classes
    return experiment_from_dict(raw, "mix", cls=CapacityExperiment)


def test_a_class_that_fails_makes_the_rate_fail():
    plain = probe(config(), 0, config().slo, None, 2.0, 0, SETTINGS)
    assert plain["meets_slo"] and not any(k.startswith("class.") for k in plain)
    strict = config(docs={"slo": {"e2e_s": 0.001}})  # no docs request can meet it
    row = probe(strict, 0, strict.slo, None, 2.0, 0, SETTINGS)
    assert row["steady"] and not row["meets_slo"]
    assert row["class.docs.slo_attainment"] == 0.0 and row["class.chat.slo_attainment"] >= 0.9
    assert "class docs: slo_attainment=0 < 0.9" in row["missed"]
    assert "class chat" not in row["missed"]
    loose = config(docs={"slo": {"e2e_s": 60}})
    assert probe(loose, 0, loose.slo, None, 2.0, 0, SETTINGS)["meets_slo"]


def test_the_search_uses_every_class_slo_and_says_so(tmp_path, capsys):
    paths = {}
    for name, raw in (("plain", MIX), ("classes", {**MIX, "classes": {
            "docs": {"slo": {"e2e_s": 4}}}})):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(raw), encoding="utf-8")
        assert capacity_main([str(paths[name]), "--out", str(tmp_path / name), *FAST]) == 0
    plain = pd.read_csv(tmp_path / "plain" / "capacity.csv").iloc[0]
    classes = pd.read_csv(tmp_path / "classes" / "capacity.csv").iloc[0]
    assert 0 < classes["capacity_rps"] < plain["capacity_rps"]
    probes = pd.read_csv(tmp_path / "classes" / "capacity_probes.csv")
    assert {"class.docs.slo_attainment", "class.chat.slo_attainment"} <= set(probes.columns)
    capsys.readouterr()
    assert capacity_main([str(paths["classes"]), "--out", str(tmp_path / "again"),
                          "--max-rate", "1", "--probe-s", "60", "--probe-kv", "0"]) == 0
    assert "per-class SLOs, a rate passes only when every class meets its own: chat, docs" in \
        capsys.readouterr().out


def test_class_slos_without_an_experiment_slo(tmp_path, capsys):
    raw = {k: v for k, v in MIX.items() if k != "slo"}
    raw["classes"] = {"docs": {"slo": {"e2e_s": 60}}}
    path = tmp_path / "only.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert capacity_main([str(path), "--out", str(tmp_path / "only"), "--max-rate", "1",
                          "--probe-s", "60", "--probe-kv", "0"]) == 0
    assert "no SLO, not checked: chat" in capsys.readouterr().out


@pytest.mark.parametrize("raw, field", [
    ({**MIX, "classes": {"batch": {"slo": {"e2e_s": 60}}}}, "classes.batch.slo"),
    ({**MIX, "policies": [{"name": "vllm_v0", "classes": {"urgent": {"slo": {"ttft_s": 1}}}}]},
     "policies[0].classes.urgent.slo"),
    ({**MIX, "workload": {"synthetic": {"num_requests": 20, "lengths": "alpaca"}},
      "classes": {"chat": {"slo": {"ttft_s": 1}}}}, "classes.chat.slo")])
def test_a_class_slo_the_search_cannot_check_is_refused(tmp_path, capsys, raw, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert capacity_main([str(path), "--out", str(tmp_path / "bad"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    # the workload checks name the class (experiments/config/workload_checks.py) before the search's
    # own check would name its slo: either way the field, and never a silent capacity
    assert f"error: {field.removesuffix('.slo')}" in err
    assert "would be ignored" in err or "cannot check this SLO" in err
    assert not (tmp_path / "bad" / "capacity.csv").exists()

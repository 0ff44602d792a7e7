"""experiments/configs/magnus.yaml: per-policy cluster overrides, and its docs page run and drawn
end to end on a tiny sweep (python -m experiments.figures magnus)."""

from pathlib import Path

import pytest

from experiments.config.experiment import experiment_from_dict
from experiments.figures import main
from experiments.run import load_config
from sim.util.errors import ConfigError
from traces.magnus_workload import default_magnus_path

CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "magnus.yaml"


def test_config_runs_vsq_on_int8_weights_and_the_rest_on_fp16():
    cfg = load_config(CONFIG)
    labels = [e.label for e in cfg.policies]
    assert labels[:6] == ["VS", "VSQ", "CCB", "GLP", "ABP", "Magnus"]
    dtypes = {e.label: cfg.cluster_for(e).weight_dtype for e in cfg.policies}
    assert dtypes["VSQ"] == "int8" and dtypes["VS"] == dtypes["Magnus"] == "fp16"
    assert cfg.cluster_for(cfg.policies[1]).gpu == "V100-32GB"  # the rest is inherited
    magnus = cfg.policies[labels.index("Magnus")].resolve("policies[5]")
    assert magnus.predictor.kind == "semantic" and magnus.batch_size is None


def test_a_bad_cluster_override_names_its_policy_entry():
    raw = {"workload": {"synthetic": {"num_requests": 5}}, "request_rates": [1],
           "policies": [{"name": "vanilla"}, {"name": "vanilla", "label": "q",
                                              "cluster": {"gpu": "B300"}}]}
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(raw, "x")
    assert err.value.field.startswith("policies[1].cluster")


@pytest.mark.skipif(not default_magnus_path().is_file()
                    or not (CONFIG.parents[2] / ".." / "shared").is_dir(),
                    reason="shared data not present beside the repo (the config's paths)")
def test_tiny_sweep_and_report(tmp_path, monkeypatch):
    monkeypatch.chdir(CONFIG.parents[2])  # the config's data paths are relative to the repo
    results, figures = tmp_path / "results", tmp_path / "figures"
    overrides = ["max_requests=30", "request_rates=[4]"]
    for i in (3, 4, 5):  # GLP, ABP, Magnus: torch-free embedder, small training set
        overrides += [f"policies.{i}.params.predictor.model=hashing",
                      f"policies.{i}.params.predictor.max_train_per_task=40",
                      f"policies.{i}.params.predictor.cache_dir={tmp_path / 'cache'}"]
    args = ["magnus", "--results", str(results), "--out", str(figures), "--no-progress"]
    assert main(args + [f"--set={o}" for o in overrides]) == 0  # runs the sweep, then draws
    assert {p.name for p in figures.glob("*.png")} == {
        "magnus_request_throughput.png", "magnus_mean_latency.png", "magnus_p99_latency.png",
        "magnus_token_throughput.png"}
    table = (results / "magnus" / "magnus_ratios.md").read_text()
    assert "\n| 4 | " in table and "| Magnus | VS (all rates) |" in table and "paper" in table


def test_headline_table_ranges_over_the_rates_where_vs_saturates():
    import pandas as pd

    from experiments.figures.magnus import headline_table, saturated_rates, valid_share_table

    rows = []
    for rate, vs, magnus in ((1.0, 1.0, 1.0), (4.0, 2.0, 3.0), (8.0, 2.0, 4.0)):
        for label, tput in (("VS", vs), ("Magnus", magnus)):
            waste = 3.0 if label == "VS" else 1.0  # generated tokens per valid one
            rows.append({"label": label, "rate": rate, "request_throughput": tput,
                         "valid_token_throughput": 10 * tput,
                         "total_token_generated_throughput": 10 * tput * waste,
                         "mean_e2e_s": 10 / tput, "p99_e2e_s": 20 / tput})
    frame = pd.DataFrame(rows)
    assert saturated_rates(frame) == [4.0, 8.0]
    table = headline_table(frame)
    # total tokens: Magnus 30 and 40 a second against VS's 60 and 60: -50% and -33%
    assert "| Magnus vs VS | +50% to +100% | +50% to +100% | -50% to -33% | -50% to -33% " \
        "| -50% to -33% |" in table
    assert "| **paper**: Magnus vs VS, VSQ, CCB | +66% to +234% | +70% to +240% " \
        "| +115% to +489% | -60.3% to -89.7% | -53.2% to -91.7% |" in table
    assert "Magnus vs VSQ" not in table  # pairs missing from the sweep are left out
    shares = valid_share_table(frame)
    assert "| VS | 33% | 33% |" in shares and "| Magnus | 100% | 100% |" in shares

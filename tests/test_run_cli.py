"""The experiment CLI end to end on tiny configs (real cost model, a few dozen requests)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.run import apply_overrides, load_config, main
from sim.util.errors import ConfigError

TINY = {
    "name": "tiny",
    "workload": {"synthetic": {"num_requests": 20, "arrival": "poisson", "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB", "num_instances": 1},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}},
                 {"name": "orca", "params": {"max_batch_size": 8}}],
    "request_rates": [2, 4],
    "seeds": [0],
}
RUN_FILES = ("records.parquet", "steps.parquet", "summary.json", "config.json")
SUMMARY_COLUMNS = ("run", "label", "policy", "rate", "seed", "num_requests", "completed",
                   "rejected", "failed", "num_oom_events", "request_throughput",
                   "output_throughput", "total_token_throughput", "mean_e2e_s", "p99_e2e_s",
                   "mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_itl_s", "busy_fraction",
                   "mean_batch_size")


def write_config(tmp_path: Path, raw: dict, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def run_cli(config: Path, out: Path, *extra: str) -> int:
    return main([str(config), "--out", str(out), "--no-progress", *extra])


def test_sweep_writes_every_run_and_the_summary(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(write_config(tmp_path, TINY), out) == 0
    for label in ("vanilla", "orca"):
        for rate in (2, 4):
            run_dir = out / "runs" / f"{label}__rate{rate}__seed0"
            assert all((run_dir / f).is_file() for f in RUN_FILES), run_dir
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 4
    assert set(SUMMARY_COLUMNS) <= set(summary.columns)
    assert sorted(zip(summary["label"], summary["rate"])) == [
        ("orca", 2), ("orca", 4), ("vanilla", 2), ("vanilla", 4)]
    assert (summary["num_requests"] == 20).all()
    assert len(json.loads((out / "summary.json").read_text())) == 4
    records = pd.read_parquet(out / "runs" / "orca__rate2__seed0" / "records.parquet")
    assert len(records) == 20
    config = json.loads((out / "runs" / "vanilla__rate4__seed0" / "config.json").read_text())
    assert config["run"]["params"] == {"batch_size": 4, "on_oom": "fail"}
    assert config["run"]["rate"] == 4
    text = capsys.readouterr().out
    assert "vanilla" in text and "orca" in text and "p99 E2E s" in text


def test_set_overrides_a_policy_parameter_and_label(tmp_path):
    out = tmp_path / "out"
    rc = run_cli(write_config(tmp_path, TINY), out, "--set", "policies.0.params.batch_size=2",
                 "--set", "policies[0].label=vanilla2", "--set", "request_rates=[3]")
    assert rc == 0
    config = json.loads((out / "runs" / "vanilla2__rate3__seed0" / "config.json").read_text())
    assert config["run"]["params"]["batch_size"] == 2
    assert len(pd.read_csv(out / "summary.csv")) == 2


def test_apply_overrides_paths():
    raw = {"a": {"b": [1, {"c": 2}]}, "p": None}
    new = apply_overrides(raw, ["a.b.1.c=[3, 4]", "a.b.0=x", "p.q=true", "d=1.5"])
    assert new == {"a": {"b": ["x", {"c": [3, 4]}]}, "p": {"q": True}, "d": 1.5}
    assert raw["a"]["b"] == [1, {"c": 2}]  # the input is not modified
    with pytest.raises(ConfigError, match="a.b.5"):
        apply_overrides(raw, ["a.b.5.c=1"])
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides(raw, ["novalue"])


def test_unknown_policy_fails_before_any_run(tmp_path, capsys):
    raw = dict(TINY, policies=[{"name": "vanilla"}, {"name": "nope"}])
    out = tmp_path / "out"
    assert run_cli(write_config(tmp_path, raw), out) != 0
    err = capsys.readouterr().err
    assert "policies[1].name" in err and "'nope'" in err and "orca" in err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("override, field", [
    ("policies.0.params.bogus=1", "policies[0].params.bogus"),
    ("policies.1.params.max_batch_size=0", "policies[1].params.max_batch_size"),
    ("cluster.model=no-such-model", "cluster.model"),
    ("cluster.gpu=no-such-gpu", "cluster.gpu"),
    ("request_rates=[1, 0]", "request_rates[1]"),
    ("colour=blue", "colour"),
    ("workload.synthetic.arrival=weird", "workload.synthetic.arrival"),
])
def test_bad_fields_are_named(tmp_path, override, field):
    path = write_config(tmp_path, TINY)
    with pytest.raises(ConfigError) as info:
        load_config(path, [override])
    assert info.value.field == field


def test_list_names_policies_models_gpus_and_formats(capsys):
    assert main(["--list"]) == 0
    text = capsys.readouterr().out
    for name in ("vanilla", "orca", "batch_size", "llama-2-7b", "A100-80GB", "azure"):
        assert name in text


def test_results_are_written_as_each_run_finishes(tmp_path, monkeypatch):
    import policies.simulate

    real = policies.simulate.simulate
    calls: list[int] = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(policies.simulate, "simulate", flaky)
    out = tmp_path / "out"
    assert run_cli(write_config(tmp_path, TINY), out) == 1  # a run failed, the others landed
    assert len(pd.read_csv(out / "summary.csv")) == 3
    assert (out / "runs" / "vanilla__rate2__seed0" / "summary.json").is_file()
    failures = json.loads((out / "failures.json").read_text())
    assert len(failures) == 1 and "boom" in failures[0]["error"]


def test_trace_replay_and_poisson_retiming(tmp_path):
    trace = pd.DataFrame({"arrival_s": [0.0, 0.5, 1.0, 4.0], "prompt_tokens": [10, 20, 30, 40],
                          "output_tokens": [5, 6, 7, 8]})
    trace.to_csv(tmp_path / "t.csv", index=False)
    raw = dict(TINY, workload={"trace": {"path": str(tmp_path / "t.csv"), "format": "csv"}})
    del raw["request_rates"]
    assert run_cli(write_config(tmp_path, raw), tmp_path / "replay") == 0
    assert (tmp_path / "replay" / "runs" / "orca__ratetrace__seed0" / "records.parquet").is_file()
    raw["workload"]["trace"]["retime"] = "poisson"
    raw["request_rates"] = [1]
    assert run_cli(write_config(tmp_path, raw), tmp_path / "poisson") == 0
    assert len(pd.read_csv(tmp_path / "poisson" / "summary.csv")) == 2


def test_missing_trace_file_is_a_one_line_error(tmp_path, capsys):
    raw = dict(TINY, workload={"trace": {"path": str(tmp_path / "none.csv")}})
    del raw["request_rates"]
    assert run_cli(write_config(tmp_path, raw), tmp_path / "out") != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "none.csv" in err and "\n" not in err


def test_shipped_configs_validate():
    root = Path(__file__).resolve().parents[1] / "experiments" / "configs"
    quick = load_config(root / "quickstart.yaml")
    assert [p.name for p in quick.policies] == ["vanilla", "orca"]
    azure = load_config(root / "azure_conv.yaml")
    assert azure.workload.trace is not None and azure.workload.trace.name == "azure_conv"

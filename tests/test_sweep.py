"""Resumable, parallel sweeps: skip finished runs, record failures, same results in parallel."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments import run
from experiments.run import load_config
from experiments.sweep import expand, run_hash

TINY = {
    "name": "sweep",
    "workload": {"synthetic": {"num_requests": 30, "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}}, {"name": "orca"}],
    "request_rates": [1, 4],
    "seeds": [0, 1],
}
METRICS = ["request_throughput", "mean_e2e_s", "p99_itl_s", "num_computed_tokens"]


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def sweep(tmp_path: Path, out: Path, *extra: str, raw: dict = TINY) -> int:
    return run.main([str(write(tmp_path, raw)), "--out", str(out), "--no-progress", *extra])


def test_runs_have_stable_hashes_that_ignore_labels(tmp_path):
    cfg = load_config(write(tmp_path, TINY))
    specs = expand(cfg)
    assert len(specs) == 8
    hashes = [run_hash(cfg, s) for s in specs]
    assert len(set(hashes)) == 8 and hashes == [run_hash(cfg, s) for s in expand(cfg)]
    relabelled = dict(TINY, policies=[{"name": "vanilla", "label": "vs",
                                       "params": {"batch_size": 4}}, {"name": "orca"}])
    cfg2 = load_config(write(tmp_path, relabelled))
    assert [run_hash(cfg2, s) for s in expand(cfg2)] == hashes


def test_resume_skips_finished_runs_and_reruns_changed_ones(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    import sim.simulate
    calls = []
    real = sim.simulate.simulate
    monkeypatch.setattr(sim.simulate, "simulate",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    assert sweep(tmp_path, out) == 0
    assert calls == []  # everything was finished
    changed = dict(TINY, policies=[{"name": "vanilla", "params": {"batch_size": 2}},
                                   {"name": "orca"}])
    assert sweep(tmp_path, out, raw=changed) == 0
    assert len(calls) == 4  # only vanilla's runs changed hash
    assert len(pd.read_csv(out / "summary.csv")) == 8


def test_a_run_that_raises_is_recorded_and_the_sweep_goes_on(tmp_path):
    raw = dict(TINY, policies=[{"name": "vanilla", "params": {"batch_size": 4}},
                               {"name": "orca", "params": {"max_tokens": 8}}])
    # orca with max_tokens 8 rejects most requests: fine; make a run crash instead
    raw["policies"][1]["params"] = {"max_batch_size": 4}
    out = tmp_path / "out"
    import sim.simulate
    real = sim.simulate.simulate

    def crash_on_orca(trace, policy, *a, **k):
        if policy == "orca":
            raise ZeroDivisionError("injected")
        return real(trace, policy, *a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(sim.simulate, "simulate", crash_on_orca)
    try:
        assert sweep(tmp_path, out, raw=raw) == 1
    finally:
        mp.undo()
    failures = json.loads((out / "failures.json").read_text())
    assert len(failures) == 4 and all("ZeroDivisionError: injected" in f["error"]
                                      for f in failures)
    assert len(pd.read_csv(out / "summary.csv")) == 4  # vanilla's runs landed
    assert not list((out / "runs").glob(".*tmp*"))
    assert sweep(tmp_path, out, raw=raw) == 0  # resumed: only the failed runs ran again
    assert not (out / "failures.json").exists()


def test_two_processes_give_the_same_results_as_one(tmp_path):
    assert sweep(tmp_path, tmp_path / "one") == 0
    assert sweep(tmp_path, tmp_path / "two", "--jobs", "2") == 0
    one = pd.read_csv(tmp_path / "one" / "summary.csv").set_index("run").sort_index()
    two = pd.read_csv(tmp_path / "two" / "summary.csv").set_index("run").sort_index()
    pd.testing.assert_frame_equal(one[METRICS], two[METRICS])


def test_ray_path_runs_on_a_local_ray_instance(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    raw = dict(TINY, seeds=[0])
    try:
        assert sweep(tmp_path, tmp_path / "ray", "--ray", raw=raw) == 0
    finally:
        ray.shutdown()
    assert sweep(tmp_path, tmp_path / "local", raw=raw) == 0
    a = pd.read_csv(tmp_path / "ray" / "summary.csv").set_index("run").sort_index()
    b = pd.read_csv(tmp_path / "local" / "summary.csv").set_index("run").sort_index()
    pd.testing.assert_frame_equal(a[METRICS], b[METRICS])


def test_bad_jobs_is_a_clear_error(tmp_path, capsys):
    assert sweep(tmp_path, tmp_path / "out", "--jobs", "0") == 2
    err = capsys.readouterr().err
    assert "--jobs=0" in err and "must be >= 1" in err


def test_ray_without_the_extra_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert sweep(tmp_path, tmp_path / "out", "--ray") == 2
    err = capsys.readouterr().err
    assert "--ray" in err and "pip install" in err

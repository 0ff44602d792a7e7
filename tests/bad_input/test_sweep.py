"""Honest resume and safe output: stale or corrupt results on disk are rerun (saying why), and
a results directory that cannot be written gives one clear error naming the path, not a
traceback."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments import run
from experiments.files.outdir import check_dir_name, prepare_out_dir, run_dir
from experiments.files.resume import RESULT_SCHEMA_VERSION
from experiments.run import load_config
from experiments.sweep.runner import check_finished, expand, run_hash
from sim.util.errors import ConfigError

TRACE = pd.DataFrame({"arrival_s": [0.0, 0.3, 0.6, 1.0, 1.5, 2.0],
                      "prompt_tokens": [10, 20, 30, 40, 50, 60],
                      "output_tokens": [5, 6, 7, 8, 9, 10]})
SYNTH = {
    "name": "bad_sweep",
    "workload": {"synthetic": {"num_requests": 12, "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}}, {"name": "orca"}],
    "request_rates": [2],
    "seeds": [0],
}
RUN = "vanilla__rate2__seed0"  # a run of SYNTH


def write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def printed(capsys) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def sweep(tmp_path: Path, out: Path, raw: dict = SYNTH) -> int:
    return run.main([str(write(tmp_path, raw)), "--out", str(out), "--no-progress"])


def trace_config(tmp_path: Path) -> dict:
    TRACE.to_csv(tmp_path / "t.csv", index=False)
    raw = dict(SYNTH, workload={"trace": {"path": str(tmp_path / "t.csv"), "format": "csv"}})
    del raw["request_rates"]
    return raw


@pytest.fixture
def count_runs(monkeypatch) -> list:
    """Each simulated run appends to the returned list."""
    import policies.simulate
    calls: list = []
    real = policies.simulate.simulate
    monkeypatch.setattr(policies.simulate, "simulate",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


# ---- stale results ---------------------------------------------------------------------------
def test_trace_edited_in_place_is_rerun_as_stale(tmp_path, capsys, count_runs):
    raw = trace_config(tmp_path)
    out = tmp_path / "out"
    assert sweep(tmp_path, out, raw) == 0
    records = out / "runs" / "vanilla__ratetrace__seed0" / "records.parquet"
    before = pd.read_parquet(records)["output_tokens"].sum()
    assert len(count_runs) == 2
    TRACE.assign(output_tokens=TRACE["output_tokens"] * 3).to_csv(tmp_path / "t.csv", index=False)
    capsys.readouterr()
    assert sweep(tmp_path, out, raw) == 0
    err = printed(capsys)
    assert "vanilla__ratetrace__seed0: not reused: stale: trace changed" in err
    assert len(count_runs) == 4  # both runs simulated again
    assert pd.read_parquet(records)["output_tokens"].sum() == 3 * before  # the new trace


def test_trace_content_is_in_the_run_hash(tmp_path):
    raw = trace_config(tmp_path)
    cfg = load_config(write(tmp_path, raw))
    first = [run_hash(cfg, s) for s in expand(cfg)]
    TRACE.iloc[:5].to_csv(tmp_path / "t.csv", index=False)
    assert [run_hash(cfg, s) for s in expand(cfg)] != first


@pytest.mark.parametrize("name, value, reason", [
    ("simulator_version", lambda: "9.9.9", "stale: servesim version"),
    ("RESULT_SCHEMA_VERSION", 999, f"stale: result schema {RESULT_SCHEMA_VERSION} -> 999"),
])
def test_new_simulator_or_result_schema_is_rerun(tmp_path, capsys, monkeypatch, count_runs,
                                                 name, value, reason):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    monkeypatch.setattr(f"experiments.sweep.runner.{name}", value)
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    err = printed(capsys)
    assert f"{RUN}: not reused: {reason}" in err
    assert "9.9.9" in err or "999" in err
    assert len(count_runs) == 4


def test_edited_simulation_code_is_rerun(tmp_path, capsys, monkeypatch, count_runs):
    """A run is not reused after a change to sim/, policies/ or traces/ (same package version)."""
    from experiments.files import resume

    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    assert "+src." in resume.simulator_version()
    monkeypatch.setattr(resume, "code_digest", lambda: "0123456789abcdef")
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    assert f"{RUN}: not reused: stale: servesim version or simulation code" in printed(capsys)
    assert len(count_runs) == 4


def test_results_of_an_older_servesim_are_stale(tmp_path, capsys, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    path = out / "runs" / RUN / "config.json"
    config = json.loads(path.read_text())
    del config["run"]["identity"]
    config["run"]["hash"] = "0123456789abcdef"
    path.write_text(json.dumps(config))
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    assert f"{RUN}: not reused: stale: written by an older servesim" in printed(capsys)
    assert len(count_runs) == 3


# ---- corrupt results -------------------------------------------------------------------------
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _fewer_rows(path: Path) -> None:
    pd.read_parquet(path).iloc[:3].to_parquet(path, index=False)


@pytest.mark.parametrize("damage, reason", [
    (lambda d: _truncate(d / "records.parquet"), "corrupt: records.parquet unreadable"),
    (lambda d: _fewer_rows(d / "records.parquet"),
     "corrupt: records.parquet has 3 rows, 12 were written"),
    (lambda d: (d / "steps.parquet").unlink(), "corrupt: steps.parquet missing"),
    (lambda d: _truncate(d / "events.parquet"), "corrupt: events.parquet unreadable"),
    (lambda d: (d / "summary.json").write_text("{}"),
     "corrupt: summary.json lacks num_requests, completed, request_throughput"),
    (lambda d: (d / "summary.json").write_text("[1, 2]"),
     "corrupt: summary.json is not a JSON object"),
    (lambda d: _truncate(d / "summary.json"), "corrupt: summary.json unreadable"),
    (lambda d: (d / "config.json").write_text("null"), "corrupt: config.json is not a JSON"),
    (lambda d: (d / "config.json").unlink(), "corrupt: config.json missing"),
])
def test_corrupt_run_files_are_rerun_saying_why(tmp_path, capsys, count_runs, damage, reason):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0
    damage(out / "runs" / RUN)
    capsys.readouterr()
    assert sweep(tmp_path, out) == 0
    err = printed(capsys)
    assert f"{RUN}: not reused: {reason}" in err
    assert len(count_runs) == 3  # only the damaged run again
    cfg = load_config(write(tmp_path, SYNTH))
    assert all(check_finished(out, cfg, spec)[0] is not None for spec in expand(cfg))


def test_resume_reads_no_parquet_data(tmp_path, monkeypatch, count_runs):
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 0

    def forbidden(*args, **kwargs):
        raise AssertionError("resume loaded a whole parquet file")

    monkeypatch.setattr(pd, "read_parquet", forbidden)
    monkeypatch.setattr("pyarrow.parquet.read_table", forbidden)
    assert sweep(tmp_path, out) == 0
    assert len(count_runs) == 2  # the first sweep only


# ---- the results directory -------------------------------------------------------------------
def test_out_naming_a_file_is_a_clear_error(tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    assert sweep(tmp_path, target) == 2
    err = capsys.readouterr().err
    assert f"error: --out='{target}': is a file" in err and "Traceback" not in err
    assert target.read_text() == "keep me"


def test_read_only_out_is_a_clear_error(tmp_path, capsys, monkeypatch):
    out = tmp_path / "ro"
    out.mkdir()
    if os.geteuid() == 0:  # root ignores permissions: make the OS refuse instead
        def refuse(self, *args, **kwargs):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        monkeypatch.setattr(Path, "touch", refuse)
    else:
        out.chmod(0o500)
    try:
        assert sweep(tmp_path, out) == 2
    finally:
        out.chmod(0o700)
    err = capsys.readouterr().err
    assert f"--out='{out}': not writable: Permission denied" in err
    assert "Traceback" not in err


def test_disk_full_mid_sweep_keeps_finished_runs_and_names_the_file(tmp_path, capsys,
                                                                     monkeypatch):
    real = pd.DataFrame.to_parquet
    writes: list = []

    def fill_up(self, path, *args, **kwargs):
        writes.append(path)
        if len(writes) > 4:  # the first run's four tables fit, then the disk is full
            raise OSError(errno.ENOSPC, "Error writing bytes to file")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", fill_up)
    out = tmp_path / "out"
    assert sweep(tmp_path, out) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "records.parquet" in err
    assert str(out / "runs") in err and "Traceback" not in err
    assert len(pd.read_csv(out / "summary.csv")) == 1
    assert not list((out / "runs").glob(".*"))  # the half-written run is cleaned up
    monkeypatch.setattr(pd.DataFrame, "to_parquet", real)
    cfg = load_config(write(tmp_path, SYNTH))
    assert check_finished(out, cfg, expand(cfg)[0])[0] is not None  # intact, will be reused


def test_failing_summary_write_is_a_clear_error(tmp_path, capsys, monkeypatch):
    real = pd.DataFrame.to_csv

    def refuse(self, path, *args, **kwargs):
        raise OSError(errno.EACCES, "denied", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", refuse)
    assert sweep(tmp_path, tmp_path / "out") == 1
    monkeypatch.setattr(pd.DataFrame, "to_csv", real)
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path / 'out' / 'summary.csv'}: Permission denied" in err
    assert "Traceback" not in err


def test_out_dir_is_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert prepare_out_dir("a/../b") == (tmp_path / "b").resolve()
    assert (tmp_path / "b").is_dir() and not (tmp_path / "a").exists()


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "..", ""])
def test_run_directory_names_cannot_escape(tmp_path, name):
    with pytest.raises(ConfigError) as info:
        run_dir(tmp_path, name)
    assert info.value.field == "run directory" and repr(name) in str(info.value)
    with pytest.raises(ConfigError) as info:
        check_dir_name("policies[0].label", name)
    assert f"policies[0].label={name!r}" in str(info.value)


def test_run_directory_linked_outside_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "runs").mkdir(parents=True)
    (out / "runs" / RUN).symlink_to(elsewhere)
    assert sweep(tmp_path, out) == 2
    err = capsys.readouterr().err
    assert f"run directory='{elsewhere}': is not inside {out / 'runs'}" in err
    assert not list(elsewhere.iterdir())


def test_trace_changed_while_the_sweep_ran_is_refused(tmp_path, capsys, monkeypatch):
    raw = trace_config(tmp_path)
    import experiments.sweep.runner
    real = experiments.sweep.runner.write_run

    def edit_after_first(run_dir, result, config, *measured):
        real(run_dir, result, config, *measured)
        TRACE.iloc[:4].to_csv(tmp_path / "t.csv", index=False)

    monkeypatch.setattr(experiments.sweep.runner, "write_run", edit_after_first)
    out = tmp_path / "out"
    assert sweep(tmp_path, out, raw) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 't.csv'}: changed while the sweep ran" in err
    assert len(pd.read_csv(out / "summary.csv")) == 1


def test_capacity_out_naming_a_file_is_a_clear_error(tmp_path, capsys):
    from experiments.capacity.main import main as capacity_main
    target = tmp_path / "capacity.txt"
    target.write_text("keep me")
    raw = dict(SYNTH, slo={"ttft_p90_s": 2.0})
    assert capacity_main([str(write(tmp_path, raw)), "--out", str(target), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: --out='{target}': is a file" in err and "Traceback" not in err
    assert target.read_text() == "keep me"


def test_capacity_write_failure_is_a_clear_error(tmp_path, capsys, monkeypatch):
    from experiments.capacity.main import main as capacity_main

    def refuse(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "full", str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", refuse)
    raw = dict(SYNTH, slo={"ttft_p90_s": 2.0}, policies=[{"name": "orca"}])
    out = tmp_path / "cap"
    args = [str(write(tmp_path, raw)), "--out", str(out), "--no-progress", "--max-probes", "2"]
    assert capacity_main(args) == 1
    err = capsys.readouterr().err
    assert f"cannot write {out / 'capacity.csv'}: No space left on device" in err
    assert "Traceback" not in err


def test_files_a_cluster_reads_are_in_its_identity(tmp_path):
    from experiments.files.resume import referenced_files

    params = tmp_path / "params.json"
    params.write_text('{"cpu_step_s": 0.001}')
    tables = tmp_path / "profiles" / "a100"
    tables.mkdir(parents=True)
    (tables / "mlp.csv").write_text("num_tokens\n1\n")
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("name: x\n")
    cluster = {"model": "llama-2-7b", "gpu": str(gpu),
               "cost_model": {"kind": "profile", "profiles": str(tmp_path / "profiles"),
                              "params": str(params)}}
    first = referenced_files(cluster)
    assert set(first) == {"gpu", "cost_model.params", "cost_model.profiles/a100/mlp.csv"}
    (tables / "mlp.csv").write_text("num_tokens\n1\n2\n")
    assert referenced_files(cluster)["cost_model.profiles/a100/mlp.csv"] != \
        first["cost_model.profiles/a100/mlp.csv"]

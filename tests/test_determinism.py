"""Two runs of one config write the same files, byte for byte, except the host-timing files
(experiments/files/host_files.py HOST_FILES), which hold everything measured on the wall clock."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from experiments import run
from experiments.files.host_files import HOST_FILES, write_step_tables
from real.sched_fit import read_steps
from sim.metrics.host_timing import HOST_STEP_COLUMNS, RESULT_STEP_COLUMNS
from sim.util.errors import ConfigError

CONFIG = {
    "name": "determinism",
    "workload": {"synthetic": {"num_requests": 40, "lengths": "alpaca"}},
    "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
    "policies": [{"name": "vanilla", "params": {"batch_size": 4}}, {"name": "orca"}],
    "request_rates": [2, 8],
    "seeds": [0],
}
RUNS = ("vanilla__rate2__seed0", "orca__rate2__seed0", "vanilla__rate8__seed0",
        "orca__rate8__seed0")


def sweep(tmp_path: Path, out: Path, *flags: str) -> Path:
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    assert run.main([str(config), "--out", str(out), "--no-progress", *flags]) == 0
    return out


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root`, hidden ones included: relative path -> bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_two_runs_of_one_config_are_identical_file_for_file(tmp_path):
    # inline (steps streamed to a file, then split) and in a process pool (steps as a frame)
    a = files(sweep(tmp_path, tmp_path / "a"))
    b = files(sweep(tmp_path, tmp_path / "b", "--jobs", "2"))
    assert sorted(a) == sorted(b)
    excluded = sorted(f"runs/{r}/{name}" for r in RUNS for name in HOST_FILES)
    print("excluded from the comparison:", ", ".join(excluded))
    assert set(excluded) <= set(a)  # the excluded files exist: nothing else is skipped
    compared = [name for name in a if name not in excluded]
    assert {".sweep.lock", "config.json", "summary.csv", "summary.json", "table.txt"} <= \
        set(compared)
    for r in RUNS:
        assert {f"runs/{r}/{n}" for n in ("bench.json", "config.json", "summary.json",
                                          "records.parquet", "steps.parquet",
                                          "instances.parquet", "events.parquet")} <= set(compared)
    assert [name for name in compared if a[name] != b[name]] == []
    assert [name for name in excluded if a[name] != b[name]]  # measured: they do differ


def test_results_hold_no_measured_time_and_host_timing_holds_it(tmp_path):
    out = sweep(tmp_path, tmp_path / "out")
    run_dir = out / "runs" / "orca__rate2__seed0"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not [k for k in summary if "host" in k or "wall" in k]
    assert "policy_host_s_per_step" not in pd.read_csv(out / "summary.csv").columns
    config = json.loads((run_dir / "config.json").read_text())
    assert "wall_s" not in config["run"] and set(config["digests"]).isdisjoint(HOST_FILES)
    steps = pd.read_parquet(run_dir / "steps.parquet")
    assert tuple(steps.columns) == RESULT_STEP_COLUMNS
    assert "policy_host_s" not in pd.read_parquet(run_dir / "instances.parquet").columns
    assert json.loads((run_dir / "bench.json").read_text())["date"] == "19700101-000000"
    assert json.loads((out / ".sweep.lock").read_text()) == {
        "name": "determinism", "config": str((tmp_path / "sweep.yaml").resolve())}
    host = json.loads((run_dir / "host_timing.json").read_text())
    assert host["wall_s"] > 0 and host["policy_host_s"] > 0 and host["num_steps"] == len(steps)
    assert host["policy_host_s_per_step"] == pytest.approx(host["policy_host_s"] / len(steps))
    assert [i["instance_id"] for i in host["instances"]] == [0]
    per_step = pd.read_parquet(run_dir / "host_timing.parquet")
    assert tuple(per_step.columns) == HOST_STEP_COLUMNS
    keys = ["instance_id", "start_s", "num_iterations", "num_seqs"]
    pd.testing.assert_frame_equal(per_step[keys], steps[keys])
    assert (per_step["policy_host_s"] > 0).all()


def orca_run(tmp_path: Path, streamed: bool):
    from policies.simulate import simulate
    from sim.cluster.spec import ClusterSpec, build_executors

    rng = np.random.default_rng(0)
    trace = pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.2, 60)),
                          "prompt_tokens": rng.integers(10, 400, 60),
                          "output_tokens": rng.integers(1, 60, 60)})
    ex = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB"))
    stream = {"steps_path": tmp_path / "s.parquet"} if streamed else {}
    return simulate(trace, "orca", {}, ex, seed=0, **stream)


def test_streamed_and_in_memory_steps_are_split_into_the_same_bytes(tmp_path):
    streamed, whole = orca_run(tmp_path, True), orca_run(tmp_path, False)
    assert streamed.steps_path is not None and whole.steps_path is None
    expected = streamed.steps  # read back before the split consumes the file
    for name, res in (("a", streamed), ("b", whole)):
        (tmp_path / name).mkdir()
        write_step_tables(tmp_path / name, res)
    assert not (tmp_path / "s.parquet").exists()  # the streamed file is consumed
    for name, columns in (("steps.parquet", RESULT_STEP_COLUMNS),
                          ("host_timing.parquet", HOST_STEP_COLUMNS)):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a" / name),
                                      expected[list(columns)])
    assert (tmp_path / "a" / "steps.parquet").read_bytes() == \
        (tmp_path / "b" / "steps.parquet").read_bytes()


def test_columns_are_copied_one_row_group_at_a_time(tmp_path, monkeypatch):
    import sim.records.step_store
    from experiments.files.host_files import copy_columns

    frame = orca_run(tmp_path, False).steps
    monkeypatch.setattr(sim.records.step_store, "ROW_GROUP", 16)  # a source of many row groups
    sim.records.step_store.write_parquet(tmp_path / "src.parquet", len(frame), list(frame.columns),
                                 lambda name, a, b: frame[name].to_numpy()[a:b])
    monkeypatch.setattr(sim.records.step_store, "ROW_GROUP", 10)  # copied in groups that straddle them
    copy_columns(tmp_path / "src.parquet", tmp_path / "out.parquet", RESULT_STEP_COLUMNS)
    assert pq.ParquetFile(tmp_path / "src.parquet").metadata.num_row_groups > 3
    assert pq.ParquetFile(tmp_path / "out.parquet").metadata.num_row_groups == \
        -(-len(frame) // 10)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out.parquet"),
                                  frame[list(RESULT_STEP_COLUMNS)])


def test_calibrate_reads_the_host_times_beside_a_runs_steps(tmp_path):
    run_dir = sweep(tmp_path, tmp_path / "out") / "runs" / "orca__rate2__seed0"
    for given in ("steps.parquet", "host_timing.parquet"):
        steps = read_steps([run_dir / given])
        assert len(steps) and (steps["policy_host_s"] > 0).all()
    alone = tmp_path / "steps.parquet"
    pd.read_parquet(run_dir / "steps.parquet").to_parquet(alone)
    with pytest.raises(ConfigError, match="host_timing.parquet"):
        read_steps([alone])

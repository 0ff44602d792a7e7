"""The benchmark scripts and the GPU-check shell scripts on bad input (issue 28,
docs/bad_input.md): a usage error (exit 2) naming the flag and value, or one `error:` line naming
the file, before any trace is read, child started or phase run. Before, sim_speed.py and
scale.py died with tracebacks (an unknown policy, `--repeat 0`, `--sizes abc`), sweep_scaling.py
ran a sweep to fail it, and gpu_check.sh ran every phase into an OUT that was a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import scale, scale_engine, sim_speed, sweep_scaling

ROOT = Path(__file__).resolve().parents[2]


def usage_error(monkeypatch, capsys, main, argv: list[str]) -> str:
    """The last stderr line `main()` exits 2 with, run as `script.py ARGV`."""
    monkeypatch.setattr(sys, "argv", ["script.py", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, named", [
    (["--policy", "orac"], "--policy='orac': unknown; known: abp"),
    (["--repeat", "0"], "--repeat=0: must be >= 1"),
    (["--instances", "0"], "--instances=0: must be >= 1"),
])
def test_sim_speed_refuses_before_reading_the_trace(monkeypatch, capsys, argv, named):
    monkeypatch.setattr(sim_speed, "load_trace", lambda *a: pytest.fail("trace read"))
    assert named in usage_error(monkeypatch, capsys, sim_speed.main, argv)


def test_sim_speed_names_missing_shared_data(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SIMSERVE_DATA_DIR", str(tmp_path))
    line = usage_error(monkeypatch, capsys, sim_speed.main, [])
    assert line.startswith("error: shared trace 'azure_conv' not found at") and str(tmp_path) \
        in line


@pytest.mark.parametrize("argv, named", [
    (["--sizes", "10k"], "argument --sizes: '10k': comma-separated integers"),
    (["--sizes", "1000,0"], "argument --sizes: '1000,0': each size must be >= 1"),
    (["--policies", "orca,vllm_v9"], "--policies: policy 'vllm_v9' is not registered"),
    (["--rate", "0"], "--rate=0.0: must be > 0"),
])
def test_scale_engine_refuses_before_any_child_runs(monkeypatch, capsys, argv, named):
    monkeypatch.setattr(scale_engine, "run_child", lambda *a: pytest.fail("a child ran"))
    assert named in usage_error(monkeypatch, capsys, scale_engine.main, argv)


@pytest.mark.parametrize("argv, named", [
    (["--sizes", "10k"], "argument --sizes: '10k': comma-separated integers"),
    (["--policies", "orca,vllm_v9"], "--policies: vllm_v9 not registered"),
    (["--rate", "-1"], "--rate=-1.0: must be > 0"),
])
def test_scale_refuses_before_any_run(monkeypatch, capsys, argv, named):
    monkeypatch.setattr(scale, "run_one", lambda *a: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as info:
        scale.main(argv)
    assert info.value.code == 2 and named in capsys.readouterr().err


def test_scale_times_the_users_command_and_reads_its_files(capsys):
    """A tiny size end to end: the row names the policy, the requests done and the run's
    phases as the run measured them (no timing is checked)."""
    assert scale.main(["--sizes", "40", "--policies", "orca"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].split()[4:7] == ["simulate", "summarise", "write"]
    line = out[-1].split()
    assert line[0] == "orca" and line[1] == "40" and int(line[-1].replace(",", "")) > 0
    assert all(float(v) >= 0 for v in line[3:6])  # phases reported, none NaN


@pytest.mark.parametrize("argv, named", [
    (["--jobs", "1", "0"], "--jobs=0: must be >= 1"),
    (["--requests", "0"], "--requests=0: must be >= 1"),
])
def test_sweep_scaling_refuses_before_any_sweep(monkeypatch, capsys, argv, named):
    monkeypatch.setattr(sweep_scaling, "timed", lambda *a: pytest.fail("a sweep ran"))
    assert named in usage_error(monkeypatch, capsys, sweep_scaling.main, argv)


def bash(script: str, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_gpu_check_refuses_an_out_that_is_a_file(tmp_path):
    out = tmp_path / "report.txt"
    out.write_text("keep me")
    proc = bash("gpu_check.sh", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: OUT='{out}': exists and is not a folder"
    assert proc.stdout == "" and out.read_text() == "keep me"


def test_gpu_carry_names_the_missing_trace(tmp_path):
    proc = bash("gpu_carry.sh", env={"SIMSERVE_DATA_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith(
        f"error: {tmp_path}/traces/azure_llm_2023_conv.csv: no such file")

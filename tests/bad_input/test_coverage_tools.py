"""Command-line tools that had no bad-input test (issue 28, docs/bad_input.md): a missing file, a
folder where a file belongs, an unknown name or a count below 1 exits 2 with one line naming
the flag or file and the value, before anything runs and with nothing written. Before this file
most of them died with a traceback (exit 1), and a few ran and exited 0 on garbage."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from experiments import cli, regression
from experiments.fidelity import main as fidelity
from experiments.figures import magnus as magnus_figures
from experiments.papers import magnus_ccb_breakdown, magnus_predictor_eval, magnus_table1
from real import calibrate, check_report

CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "configs"


def error_line(capsys) -> str:
    """stderr of the call, checked to be one `error:` line and no traceback."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in err, err
    return err


def usage_error(capsys, call) -> str:
    """The argparse usage error `call()` exits 2 with (its last stderr line)."""
    with pytest.raises(SystemExit) as info:
        call()
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# ---- servesim subcommands --------------------------------------------------------------------
def test_servesim_list_refuses_an_option_it_does_not_take(capsys):
    assert "unrecognized arguments: --all" in usage_error(capsys,
                                                          lambda: cli.main(["list", "--all"]))


def test_servesim_regression_refuses_jobs_below_1_before_the_sweep(capsys, monkeypatch):
    monkeypatch.setattr(regression, "run_canonical", lambda jobs: pytest.fail("sweep ran"))
    assert "--jobs=0: must be >= 1" in usage_error(capsys,
                                                   lambda: cli.main(["regression", "--jobs", "0"]))


def test_servesim_fidelity_names_a_missing_profile_folder_and_an_unknown_gpu(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["fidelity", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert f"profile_dir=['{tmp_path / 'none'}']" in error_line(capsys)
    assert fidelity.main([str(tmp_path), "--gpu", "Z100", "--model", "llama-2-7b",
                          "--out", str(out)]) == 2
    assert "gpu='Z100': unknown GPU" in error_line(capsys)
    assert not out.exists()


# ---- Magnus tools ------------------------------------------------------------------------------
def test_magnus_headline_names_a_folder_without_a_magnus_sweep(tmp_path, capsys):
    assert magnus_figures.main([str(tmp_path / "none")]) == 2
    assert "no summary.csv in" in error_line(capsys)
    pd.DataFrame({"run": ["a"], "label": ["vllm"], "rate": [1.0], "output_throughput": [9.0],
                  "duration_s": [4.0]}).to_csv(tmp_path / "summary.csv", index=False)
    (tmp_path / "runs" / "a").mkdir(parents=True)
    pd.DataFrame({"num_seqs": [2], "num_iterations": [3]}).to_parquet(
        tmp_path / "runs" / "a" / "steps.parquet")
    assert magnus_figures.main([str(tmp_path)]) == 2
    assert "none of the headline pairs" in error_line(capsys)
    assert not (tmp_path / "magnus_headline.md").exists()


def test_magnus_workload_tools_name_a_missing_or_folder_path(tmp_path, capsys):
    out = tmp_path / "out"
    missing = str(tmp_path / "apps.jsonl")
    assert magnus_predictor_eval.main(["--path", missing, "--out", str(out)]) == 2
    assert f"trace file not found: {missing}" in error_line(capsys)
    assert magnus_table1.main(["--path", str(tmp_path)]) == 2
    assert "not a regular file (a folder)" in error_line(capsys)
    assert "--train-per-task=0: must be >= 1" in usage_error(
        capsys, lambda: magnus_predictor_eval.main(["--train-per-task", "0", "--path", missing]))
    assert not out.exists()


def test_ccb_breakdown_names_a_missing_config_an_unknown_label_and_a_bad_rate(tmp_path, capsys):
    main = magnus_ccb_breakdown.main
    assert main([str(tmp_path / "none.yaml"), "--rate", "4"]) == 2
    assert "config file not found" in error_line(capsys)
    assert main([str(CONFIGS / "magnus_paper.yaml"), "--label", "CCB-H", "--rate", "4"]) == 2
    assert "--label='CCB-H': no policy entry" in error_line(capsys)
    assert "--rate=-4.0: must be" in usage_error(
        capsys, lambda: main([str(CONFIGS / "magnus_paper.yaml"), "--rate", "-4"]))


# ---- the real engine's tools -----------------------------------------------------------------
def test_real_calibrate_names_a_missing_profile(tmp_path, capsys):
    out = tmp_path / "cal.json"
    assert calibrate.main([str(tmp_path / "p.csv"), "--out", str(out)]) == 2
    assert f"profile not found: {tmp_path / 'p.csv'}" in error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("argv, named", [
    (["--reps", "0"], "--reps=0: must be > 0"),
    (["--device", "tpu"], "real.device='tpu'"),
    (["--model", "llama-9b"], "model='llama-9b': unknown model"),
])
def test_real_profile_refuses_before_profiling(tmp_path, capsys, argv, named):
    from real.profile import main

    out = tmp_path / "p.csv"
    assert main(["--device", "cpu", "--kv-tokens", "4096", "--out", str(out), *argv]) == 2
    assert named in error_line(capsys) and not out.exists()


@pytest.mark.parametrize("argv, named", [
    (["--batches", "1", "0"], "--batches=0: must be > 0"),
    (["--reps", "0"], "--reps=0: must be > 0"),
    (["--model", "llama-9b"], "model='llama-9b': unknown model"),
])
def test_real_engine_benchmark_refuses_before_timing(tmp_path, capsys, argv, named):
    from benchmarks.real_engine import main

    out = tmp_path / "bench.json"
    assert main(["--device", "cpu", "--out", str(out), *argv]) == 2
    assert named in error_line(capsys) and not out.exists()


def test_check_report_names_a_missing_or_file_out(tmp_path, capsys):
    for out in (tmp_path / "none", tmp_path / "file"):
        out.parent.mkdir(exist_ok=True)
        if out.name == "file":
            out.write_text("x")
        assert check_report.main([str(out)]) == 2
        assert f"OUT='{out}': not a folder" in error_line(capsys)


@pytest.mark.parametrize("name, text, why", [
    ("bench.json", '{"engine": "e", "decode": [', "not JSON"),
    ("validate/validation.json", "\xff", "not JSON"),
    ("tests.xml", "<testsuite tests='3'", "not JUnit XML"),
])
def test_check_report_names_a_truncated_file_and_writes_no_report(tmp_path, capsys, name, text,
                                                                   why):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text, encoding="latin-1")
    assert check_report.main([str(tmp_path)]) == 2
    assert f"{tmp_path / name}: {why}" in error_line(capsys)
    assert not (tmp_path / "report.md").exists()


def test_a_valid_report_still_writes_json_and_markdown(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"device_name": "H100"}))
    assert check_report.main([str(tmp_path)]) == 1  # targets unmet, not bad input
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.json").is_file()

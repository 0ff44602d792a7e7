"""The whole CPU pipeline with the tiny model: profile -> calibrate -> validate on 200 requests
of the Azure conv trace, and `experiments.run --backend real`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")

from real.spec import TINY_CONFIG  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "configs" / "validate_tiny_cpu.yaml"
TINY = str(TINY_CONFIG.parent)


def azure_conv_available() -> bool:
    from traces.registry import shared_trace_path

    try:
        shared_trace_path("azure_conv")
    except FileNotFoundError:
        return False
    return True


needs_trace = pytest.mark.skipif(not azure_conv_available(), reason="needs the shared trace")


@needs_trace
def test_profile_calibrate_validate_on_cpu(tmp_path, capsys):
    from experiments.validate.main import main as validate
    from real.calibrate import main as calibrate
    from real.profile import main as profile

    prof = tmp_path / "profile.csv"
    assert profile(["--model", "tiny", "--device", "cpu", "--quick", "--reps", "3",
                    "--threads", "1", "--cpu-clock", "thread", "--kv-tokens", "32768",
                    "--out", str(prof)]) == 0
    frame = pd.read_csv(prof)
    assert len(frame) >= 20 and (frame["seconds"] > 0).all()
    meta = json.loads(prof.with_suffix(".json").read_text())
    assert meta["attention_backend"] == "sdpa" and meta["peak_flops"] > 0

    cal = tmp_path / "calibration.json"
    assert calibrate([str(prof), "--out", str(cal)]) == 0
    data = json.loads(cal.read_text())
    assert (tmp_path / data["learned"]["path"]).is_file()
    assert 0 < data["roofline"]["compute_efficiency"] <= 1
    assert math.isfinite(data["fit"]["roofline"]["median_abs_rel_err"])

    out = tmp_path / "validate"
    assert validate([str(CONFIG), "--out", str(out), "--calibration", str(cal),
                     "--set", f"cluster.model={TINY}"]) == 0
    report = capsys.readouterr().out
    for name in ("metric_errors.csv", "step_errors.csv", "validation.json", "report.txt",
                 "step_scatter.png", "latency_cdf.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    summary = json.loads((out / "validation.json").read_text())
    assert summary["num_requests"] == 200 and not summary["failures"]
    metrics = pd.read_csv(out / "metric_errors.csv")
    assert set(metrics["policy"]) == {"vanilla", "orca"}
    assert set(metrics["kind"]) == {"roofline", "learned", "engine"}
    assert metrics["rel_error"].map(math.isfinite).all()
    steps = pd.read_csv(out / "step_errors.csv")
    assert (steps["n"] > 0).all() and steps["median_abs_rel_err"].map(math.isfinite).all()
    for label in ("vanilla", "orca"):
        real = pd.read_parquet(out / "runs" / f"{label}__real" / "records.parquet")
        assert (real["status"] == "finished").all() and len(real) == 200
        engine_steps = pd.read_parquet(out / "runs" / f"{label}__real" / "engine_steps.parquet")
        assert len(engine_steps) == len(pd.read_parquet(out / "runs" / f"{label}__real"
                                                        / "steps.parquet"))
    refit = tmp_path / "refit.json"  # the engine model refitted on the replays' steps
    assert calibrate([str(prof), "--out", str(refit), "--no-learned", "--steps",
                      str(out / "runs" / "vanilla__real"), str(out / "runs" / "orca__real"),
                      "--folds", "3"]) == 0
    held = json.loads(refit.read_text())["engine"]["fit"]["held_out"]
    assert held["orca__real"]["n"] > 0 and math.isfinite(held["orca__real"]["p90_abs_rel_err"])
    print(report)  # the measured errors, for the log (pytest -s)
    check_replayed(tmp_path, out, cal, refit, metrics)


def check_replayed(tmp_path: Path, out: Path, cal: Path, refit: Path,
                   metrics: pd.DataFrame) -> None:
    """The recorded replays re-checked without the engine: the same calibration gives the
    same errors to the digit, another one runs, another slice is refused by name."""
    from experiments.validate.replayed import main as replayed

    tiny = ["--set", f"cluster.model={TINY}"]
    again = tmp_path / "again"
    assert replayed([str(CONFIG), str(out), "--calibration", str(cal), "--out", str(again),
                     *tiny]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(again / "metric_errors.csv"), metrics)
    summary = json.loads((again / "validation.json").read_text())
    assert summary["replayed_from"] == str(out) and len(summary["host_pace"]) == 2
    assert replayed([str(CONFIG), str(out), "--calibration", str(refit), "--out",
                     str(tmp_path / "refit_check"), *tiny,
                     "--set", "validate.kinds=[roofline, engine]"]) == 0
    assert replayed([str(CONFIG), str(out), "--calibration", str(cal), "--out",
                     str(tmp_path / "bad"), *tiny, "--set", "workload.trace.limit=100"]) == 2


def test_experiments_run_with_the_real_backend(tmp_path):
    from experiments.run import main

    config = {"name": "tiny_real",
              "workload": {"synthetic": {"num_requests": 12, "lengths": "alpaca",
                                         "prompt": {"kind": "uniform", "min_tokens": 4,
                                                    "max_tokens": 64},
                                         "output": {"kind": "uniform", "min_tokens": 1,
                                                    "max_tokens": 16}}},
              "cluster": {"model": TINY, "real": {"device": "cpu", "kv_tokens": 4096,
                                                  "num_threads": 1}},
              "policies": [{"name": "orca", "params": {"max_tokens": 64}},
                           {"name": "vanilla", "params": {"batch_size": 4}}],
              "request_rates": [20], "seeds": [0]}
    path = tmp_path / "tiny_real.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--no-progress", "--backend", "real"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 2 and (summary["completed"] == 12).all()
    run_cfg = json.loads((out / "runs" / "orca__rate20__seed0" / "config.json").read_text())
    assert run_cfg["experiment"]["cluster"]["backend"] == "real"

"""The GPU check's report (real/check_report.py): targets met only when measured."""

from __future__ import annotations

import json
from pathlib import Path

from real.check_report import build_report, format_markdown, main

JUNIT = """<testsuites><testsuite tests="3" failures="{f}" errors="0" skipped="0">
<testcase classname="tests.test_real_gpu" name="a"/><testcase classname="tests.test_real_gpu"
name="b"/><testcase classname="tests.test_real_gpu" name="c">{fail}</testcase>
</testsuite></testsuites>"""


def write_out(out: Path, fraction_b1: float, ttft_err: float, failed: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps({"device_name": "NVIDIA H100 80GB HBM3"}))
    (out / "tests.xml").write_text(JUNIT.format(f=int(failed),
                                                fail="<failure>x</failure>" if failed else ""))
    decode = [{"batch": 1, "step_s": 0.007, "fraction_of_bound": fraction_b1},
              {"batch": 64, "step_s": 0.014, "fraction_of_bound": 0.65}]
    (out / "bench.json").write_text(json.dumps({"engine": "e", "decode": decode,
                                                "prefill": {"tokens": 2048, "seconds": 0.04,
                                                            "fraction_of_bound": 0.6}}))
    metrics = [{"policy": p, "kind": "engine", "metric": m,
                "rel_error": ttft_err if m == "mean_ttft_s" else 0.02}
               for p in ("vanilla", "orca", "vllm", "sarathi")
               for m in ("mean_ttft_s", "mean_tpot_s", "mean_e2e_s")]
    steps = [{"policy": p, "kind": "engine", "match": "same_shape_step",
              "median_abs_rel_err": 0.05} for p in ("vanilla", "orca", "vllm", "sarathi")]
    (out / "validate").mkdir(exist_ok=True)
    (out / "validate" / "validation.json").write_text(json.dumps(
        {"num_requests": 150, "metrics": metrics, "steps": steps, "failures": {}}))


def test_targets_met_when_every_measurement_meets_them(tmp_path):
    write_out(tmp_path, fraction_b1=0.55, ttft_err=-0.04)
    report = build_report(tmp_path)
    assert all(report["targets_met"].values())
    assert main([str(tmp_path)]) == 0 and (tmp_path / "report.md").is_file()


def test_each_miss_is_reported_not_met(tmp_path):
    write_out(tmp_path, fraction_b1=0.3, ttft_err=0.15, failed=True)
    met = build_report(tmp_path)["targets_met"]
    assert not met["decode_batch1"] and met["decode_batch64"]
    assert not met["validation"] and not met["gpu_tests_pass"]
    assert main([str(tmp_path)]) == 1


def test_missing_pieces_are_never_met(tmp_path):
    report = build_report(tmp_path)
    assert not any(report["targets_met"].values())
    assert "NOT met" in format_markdown(report)

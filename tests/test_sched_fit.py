"""Calibrating the scheduling overhead from measured policy host times (real/sched_fit.py)."""

import json

import numpy as np
import pandas as pd
import pytest

from policies.simulate import simulate
from real.calibrate import main as calibrate_main
from real.sched_fit import fit_scheduling
from sim.cost.overhead import SchedulingOverhead, build_overhead
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, random_trace

FIXED, PER_REQUEST = 1.2e-4, 6e-6


def measured_steps(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Steps whose host time is FIXED + PER_REQUEST * batch, jittered, with 5% preemptions and
    multi-iteration steps that cost more (their update covers several iterations)."""
    rng = np.random.default_rng(seed)
    b = rng.integers(1, 65, n)
    k = np.where(rng.random(n) < 0.3, rng.integers(2, 50, n), 1)
    host = (FIXED + PER_REQUEST * b) * rng.normal(1.0, 0.03, n) + 2e-5 * (k - 1)
    host[rng.random(n) < 0.05] += 5e-3  # the OS ran something else meanwhile
    return pd.DataFrame({"num_seqs": b, "num_iterations": k, "policy_host_s": host})


def test_fit_recovers_fixed_and_per_request_despite_outliers():
    fit = fit_scheduling(measured_steps())
    assert fit["fixed_s"] == pytest.approx(FIXED, rel=0.05)
    assert fit["per_request_s"] == pytest.approx(PER_REQUEST, rel=0.05)
    assert fit["fit"]["single_iteration_steps_only"] and fit["fit"]["num_outliers"] > 0
    assert fit["fit"]["r2_inliers"] > 0.9


def test_fit_never_returns_negative_costs():
    flat = pd.DataFrame({"num_seqs": [1, 2, 3, 4], "num_iterations": 1,
                         "policy_host_s": [4e-4, 3e-4, 2e-4, 1e-4]})
    fit = fit_scheduling(flat)
    assert fit["per_request_s"] == 0.0 and fit["fixed_s"] == pytest.approx(2.5e-4)
    with pytest.raises(ConfigError, match="at least 2"):
        fit_scheduling(flat.head(1))


def test_calibrate_cli_writes_a_section_clusters_can_use(tmp_path, capsys):
    steps = tmp_path / "steps.parquet"
    measured_steps().to_parquet(steps)
    out = tmp_path / "cal.json"
    out.write_text(json.dumps({"version": 1, "roofline": {"step_overhead_s": 1e-3}}))
    assert calibrate_main(["--scheduling", str(steps), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["roofline"] == {"step_overhead_s": 1e-3}  # an existing calibration is kept
    assert data["scheduling_overhead"]["fit"]["steps_files"] == [str(steps)]
    ov = build_overhead({"calibration": str(out), "mode": "async"})
    assert ov.fixed_s == pytest.approx(FIXED, rel=0.05) and ov.mode == "async"
    assert "scheduling_overhead" in capsys.readouterr().out


def test_calibrate_cli_errors(tmp_path, capsys):
    bad = tmp_path / "steps.parquet"
    pd.DataFrame({"num_seqs": [1, 2]}).to_parquet(bad)
    out = str(tmp_path / "cal.json")
    assert calibrate_main(["--scheduling", str(bad), "--out", out]) == 2
    assert "policy_host_s" in capsys.readouterr().err
    assert calibrate_main(["--scheduling", str(tmp_path / "none.parquet"), "--out", out]) == 2
    with pytest.raises(SystemExit):
        calibrate_main(["--out", out])


def test_the_engine_measures_the_policy_host_time_it_fits():
    res = simulate(random_trace(np.random.default_rng(1), 80, rate=10.0), "vllm_v0", {},
                   [LinearExecutor(capacity=6000)])
    assert (res.steps["policy_host_s"] > 0).all()
    # idle polls count in the host timing only, so it is at least the steps' mean; how much
    # more is measured time (any machine, any load), so it is not asserted
    assert res.host_timing["policy_host_s_per_step"] >= res.steps["policy_host_s"].mean() * (
        1 - 1e-9)
    assert "policy_host_s_per_step" not in res.summary  # measured, not a simulated result
    fit = fit_scheduling(res.steps)
    assert fit["fixed_s"] >= 0 and fit["per_request_s"] >= 0
    SchedulingOverhead(fit["fixed_s"], fit["per_request_s"])  # valid as a config

"""experiments.report.plot draws the standard figures from a sweep's results folder."""

from pathlib import Path

import yaml

from experiments import run
from experiments.report import plot


def test_plot_draws_rate_curves_and_cdfs(tmp_path: Path):
    cfg = {
        "name": "tiny",
        "workload": {"synthetic": {"num_requests": 40, "lengths": "alpaca"}},
        "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
        "policies": [{"name": "vanilla", "params": {"batch_size": 4}}, {"name": "orca"}],
        "request_rates": [1, 4],
        "seeds": [0, 1],
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "res"
    assert run.main([str(path), "--out", str(out), "--no-progress"]) == 0
    assert plot.main([str(out), "--rate", "4"]) == 0
    for stem in ("vs_rate", "cdf"):
        for fmt in ("png", "svg"):
            assert (out / "figures" / f"{stem}.{fmt}").stat().st_size > 1000
    assert plot.main([str(out), "--rate", "3"]) == 2  # no runs at that rate: clear error

"""The plotting modules leave the matplotlib backend alone: a notebook's inline backend stays, so
the figures drawn after a capacity search still render; figures are bare Figures outside pyplot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from experiments.capacity.plot import plot_capacity, plot_results

# run in a fresh interpreter whose backend is "svg": import, draw and save, then report
SCRIPT = """import json, sys
from pathlib import Path
import matplotlib
import experiments.capacity.main, experiments.capacity.plot, experiments.report.plot
experiments.capacity.plot.plot_results(Path(sys.argv[1]))
print(json.dumps({"backend": matplotlib.get_backend(),
                  "pyplot": "matplotlib.pyplot" in sys.modules}))
"""


def write_capacity_folder(out: Path) -> None:
    """A capacity search's capacity_probes.csv and capacity.json: two policies, two seeds."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [{"label": label, "rate": rate, "seed": seed, "slo_attainment": att,
             "request_goodput": rate * att}
            for label, scale in (("vanilla", 1.0), ("vllm", 4.0)) for seed in (0, 1)
            for rate, att in ((0.5 * scale, 1.0), (1.0 * scale, 0.95), (2.0 * scale, 0.5))]
    pd.DataFrame(rows).to_csv(out / "capacity_probes.csv", index=False)
    results = [{"label": "vanilla", "capacity_rps": 1.0, "slo": {"attainment": 0.9}},
               {"label": "vllm", "capacity_rps": 4.0, "slo": {"attainment": 0.9}}]
    (out / "capacity.json").write_text(json.dumps(results), encoding="utf-8")


def test_importing_and_plotting_keep_the_users_backend(tmp_path: Path):
    write_capacity_folder(tmp_path / "cap")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MPLBACKEND": "svg", "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cap")], env=env,
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"backend": "svg",
                                                                "pyplot": False}
    assert (tmp_path / "cap" / "capacity.png").stat().st_size > 1000


def test_the_capacity_figure_is_returned_outside_pyplot(tmp_path: Path):
    write_capacity_folder(tmp_path)
    fig = plot_capacity(pd.read_csv(tmp_path / "capacity_probes.csv"),
                        json.loads((tmp_path / "capacity.json").read_text(encoding="utf-8")))
    assert fig.canvas.manager is None  # pyplot does not hold it: nothing to close, no leak
    assert [len(ax.get_lines()) for ax in fig.axes] == [5, 4]  # 2 policies, 2 capacities, target
    assert plot_results(tmp_path) == tmp_path / "capacity.png"

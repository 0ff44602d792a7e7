"""The notebook runs headless, draws data in every figure and writes only into a temp folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments import run

NOTEBOOK = Path(__file__).resolve().parents[1] / "experiments" / "notebooks" / \
    "throughput_vs_rate.ipynb"
NUM_FIGURES = 4  # vs rate (or per policy for a replay), latency CDFs, timeline, capacity

# appended to the notebook: how much data each open figure's axes hold (Agg keeps them open)
CHECK = """import json as _json
import numpy as _np
import matplotlib.pyplot as _plt


def _points(ax):
    lines = sum(int(_np.isfinite(_np.asarray(line.get_ydata(), float)).sum())
                for line in ax.get_lines() if not line.get_label().startswith("_"))
    bars = sum(1 for p in ax.patches if _np.isfinite(p.get_height()) and p.get_height() > 0)
    return lines + bars


print(_json.dumps([[_points(ax) for ax in _plt.figure(n).axes] for n in _plt.get_fignums()]))
"""


def replay_results(tmp_path: Path) -> Path:
    """A two-policy replay of a 40-request trace file as is (no request rate)."""
    rng = np.random.default_rng(0)
    trace = tmp_path / "trace.csv"
    pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, 20, 40)),
                  "prompt_tokens": rng.integers(20, 400, 40),
                  "output_tokens": rng.integers(5, 200, 40)}).to_csv(trace, index=False)
    cfg = {"name": "nb", "workload": {"trace": {"path": str(trace)}},
           "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
           "policies": [{"name": "vanilla"}, {"name": "orca"}], "seeds": [0, 1]}
    path = tmp_path / "nb.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = tmp_path / "replay"
    assert run.main([str(path), "--out", str(out), "--no-progress"]) == 0
    return out


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file under `folder`."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else {}


def execute(monkeypatch: pytest.MonkeyPatch, results: Path, tmp: Path) -> list[list[int]]:
    """Run the notebook on `results` in a fresh kernel (Agg backend, TMPDIR=`tmp`); the data
    points of every figure's axes."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    tmp.mkdir()
    monkeypatch.setenv("RESULTS_DIR", str(results))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the notebook itself forces no backend
    monkeypatch.setenv("TMPDIR", str(tmp))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CHECK))
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o["output_type"] == "stream")
    return json.loads(text.strip().splitlines()[-1])


def test_notebook_forces_no_backend_and_names_no_results_file():
    source = NOTEBOOK.read_text(encoding="utf-8")
    assert "matplotlib.use" not in source and "savefig" not in source


@pytest.mark.parametrize("case", ["trace_replay", "no_results_yet"])
def test_notebook_draws_data_and_writes_only_into_a_temp_folder(tmp_path, monkeypatch, case):
    results = replay_results(tmp_path) if case == "trace_replay" else tmp_path / "missing"
    before, notebooks = snapshot(results), snapshot(NOTEBOOK.parent)
    figures = execute(monkeypatch, results, tmp_path / "tmp")
    assert len(figures) == NUM_FIGURES, figures
    assert all(points > 0 for axes in figures for points in axes), figures
    assert snapshot(results) == before and snapshot(NOTEBOOK.parent) == notebooks
    work = list((tmp_path / "tmp").glob("servesim_notebook_*"))
    assert len(work) == 1 and (work[0] / "capacity" / "capacity_probes.csv").is_file()
    if case == "no_results_yet":  # the quickstart ran into the temp folder instead
        assert (work[0] / "quickstart" / "summary.csv").is_file()

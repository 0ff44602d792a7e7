"""The notebook runs in a fresh ipykernel with Jupyter's own (inline) backend, shows an image in
every figure cell, draws data in every figure and writes only into a temp folder."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments import run

NOTEBOOK = Path(__file__).resolve().parents[1] / "experiments" / "notebooks" / \
    "throughput_vs_rate.ipynb"
NUM_FIGURES = 4  # vs rate (or per policy for a replay), latency CDFs, timeline, capacity
FIGURE_TAG = "figure"  # the tag of every cell that draws a figure
PLOTTING = re.compile(r"\bplt\.(subplots|figure|subplot_mosaic)\(|\bplot_\w+\(")  # makes a figure

# prepended to the notebook: after each cell, before the inline backend shows and closes its
# figures, how much data each open figure's axes hold (post_execute hooks run in registration order)
RECORD = """import json as _json
import sys as _sys
import numpy as _np

_FIGURES = []  # per figure drawn: data points per axes


def _points(ax):
    lines = sum(int(_np.isfinite(_np.asarray(line.get_ydata(), float)).sum())
                for line in ax.get_lines() if not line.get_label().startswith("_"))
    bars = sum(1 for p in ax.patches if _np.isfinite(p.get_height()) and p.get_height() > 0)
    return lines + bars


def _record_figures():
    plt = _sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        _FIGURES.extend([_points(ax) for ax in plt.figure(n).axes] for n in plt.get_fignums())


get_ipython().events.register("post_execute", _record_figures)
"""
REPORT = "print(_json.dumps(_FIGURES))"  # appended: the figures recorded


def figure_cells(nb: Any) -> list[tuple[str, Any]]:
    """(cell id, cell) of every code cell tagged FIGURE_TAG."""
    return [(cell.get("id", str(i)), cell) for i, cell in enumerate(nb["cells"])
            if cell["cell_type"] == "code" and FIGURE_TAG in cell["metadata"].get("tags", [])]


def untagged_figure_cells(nb: Any) -> list[str]:
    """Ids of code cells that call a plotting function but lack the FIGURE_TAG tag."""
    tagged = {cid for cid, _ in figure_cells(nb)}
    return [cell.get("id", str(i)) for i, cell in enumerate(nb["cells"])
            if cell["cell_type"] == "code" and PLOTTING.search("".join(cell["source"]))
            and cell.get("id", str(i)) not in tagged]


def missing_images(nb: Any) -> list[str]:
    """One line per figure cell of an executed notebook without an image/png output."""
    return [f"cell {cid!r} has no image/png output (outputs: "
            f"{[o['output_type'] for o in cell['outputs']]})"
            for cid, cell in figure_cells(nb)
            if not any("image/png" in o.get("data", {}) for o in cell["outputs"])]


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


def execute(monkeypatch: pytest.MonkeyPatch, results: Path,
            tmp: Path) -> tuple[Any, list[list[int]]]:
    """Run the notebook on `results` in a fresh kernel with Jupyter's inline backend (TMPDIR=`tmp`,
    60 requests per capacity probe): the executed notebook (its own cells only) and the data
    points of every figure's axes."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    tmp.mkdir()
    monkeypatch.setenv("RESULTS_DIR", str(results))
    monkeypatch.setenv("NOTEBOOK_CAPACITY_REQUESTS", "60")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel picks the inline backend
    monkeypatch.setenv("TMPDIR", str(tmp))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = [nbformat.v4.new_code_cell(RECORD), *nb.cells, nbformat.v4.new_code_cell(REPORT)]
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o["output_type"] == "stream")
    nb.cells = nb.cells[1:-1]
    return nb, json.loads(text.strip().splitlines()[-1])


def test_notebook_forces_no_backend_and_names_no_results_file():
    source = NOTEBOOK.read_text(encoding="utf-8")
    assert "matplotlib.use" not in source and "savefig" not in source


def test_every_plotting_cell_is_tagged_and_the_check_names_an_untagged_one():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert untagged_figure_cells(nb) == [] and len(figure_cells(nb)) == NUM_FIGURES
    cell = dict(figure_cells(nb))["timeline"]
    cell["metadata"]["tags"].remove(FIGURE_TAG)
    assert untagged_figure_cells(nb) == ["timeline"]


def test_missing_images_names_a_figure_cell_without_an_image():
    nbformat = pytest.importorskip("nbformat")
    image = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=",
                                                         "text/plain": "<Figure>"})
    text = nbformat.v4.new_output("stream", name="stdout", text="drawn\n")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("fig, ax = plt.subplots()", id="drawn", outputs=[image],
                                  metadata={"tags": [FIGURE_TAG]}),
        nbformat.v4.new_code_cell("fig, ax = plt.subplots()", id="lost", outputs=[text],
                                  metadata={"tags": [FIGURE_TAG]}),
        nbformat.v4.new_code_cell("print(1)", id="plain", outputs=[text])])
    assert missing_images(nb) == ["cell 'lost' has no image/png output (outputs: ['stream'])"]


@pytest.mark.parametrize("case", ["trace_replay", "no_results_yet"])
def test_notebook_draws_data_and_writes_only_into_a_temp_folder(tmp_path, monkeypatch, case):
    results = replay_results(tmp_path) if case == "trace_replay" else tmp_path / "missing"
    before, notebooks = snapshot(results), snapshot(NOTEBOOK.parent)
    nb, figures = execute(monkeypatch, results, tmp_path / "tmp")
    missing = missing_images(nb)
    assert not missing, "\n".join(missing)
    stripped = copy.deepcopy(nb)  # the check itself catches a figure that did not render
    cell = dict(figure_cells(stripped))["capacity-plot"]
    cell["outputs"] = [o for o in cell["outputs"] if "image/png" not in o.get("data", {})]
    assert [line.split("'")[1] for line in missing_images(stripped)] == ["capacity-plot"]
    assert len(figures) == NUM_FIGURES, figures
    assert all(points > 0 for axes in figures for points in axes), figures
    assert snapshot(results) == before and snapshot(NOTEBOOK.parent) == notebooks
    work = list((tmp_path / "tmp").glob("servesim_notebook_*"))
    assert len(work) == 1 and (work[0] / "capacity" / "capacity_probes.csv").is_file()
    if case == "no_results_yet":  # the quickstart ran into the temp folder instead
        assert (work[0] / "quickstart" / "summary.csv").is_file()

"""The throughput-vs-rate notebook runs headless on a tiny sweep."""

from pathlib import Path

import pytest
import yaml

from experiments import run

NOTEBOOK = Path(__file__).resolve().parents[1] / "experiments" / "notebooks" / \
    "throughput_vs_rate.ipynb"


def test_notebook_executes_on_a_tiny_sweep(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    cfg = {"name": "nb", "workload": {"synthetic": {"num_requests": 30, "lengths": "alpaca"}},
           "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
           "policies": [{"name": "vanilla"}, {"name": "orca"}],
           "request_rates": [1, 2, 4], "seeds": [0, 1]}
    path = tmp_path / "nb.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    assert run.main([str(path), "--out", str(out), "--no-progress"]) == 0
    monkeypatch.setenv("RESULTS_DIR", str(out))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert (out / "notebook_vs_rate.png").stat().st_size > 1000

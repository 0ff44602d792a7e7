"""The capacity figure: SLO attainment and goodput against request rate, one line per policy.

    python -m experiments.capacity --plot-only OUT      (redraws OUT/capacity.png)

Drawn from a capacity search's OUT/capacity_probes.csv (every probe, each seed a dot, the line
through the mean over seeds at each rate) and OUT/capacity.json (each policy's capacity, a
dashed vertical line; the attainment target, a horizontal line, in the attainment form).

A library module: it never switches the matplotlib backend (a notebook's inline backend stays) and
draws on a bare matplotlib.figure.Figure, outside pyplot's figure list; a notebook displays the
returned Figure, and `fig.savefig` writes files under any backend.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
import pandas as pd

PANELS = (("slo_attainment", "SLO attainment (fraction of requests)"),
          ("request_goodput", "goodput (req/s meeting every SLO)"))  # (probe column, y label)


def plot_capacity(probes: pd.DataFrame, results: Sequence[dict[str, Any]],
                  title: str = "") -> Figure:
    """Attainment and goodput against rate per policy, capacities and the target marked (a
    Figure outside pyplot: nothing to close; a notebook displays it)."""
    fig = Figure(figsize=(5.2 * len(PANELS), 3.8))  # inches
    axes = fig.subplots(1, len(PANELS))
    target = next((r["slo"].get("attainment") for r in results if r.get("slo")), None)
    caps = {r["label"]: r["capacity_rps"] for r in results}
    for n, (label, grp) in enumerate(probes.groupby("label", sort=False)):
        color = f"C{n}"
        for ax, (col, _) in zip(axes, PANELS):
            mean = grp.groupby("rate")[col].mean().sort_index()
            ax.plot(mean.index, mean.to_numpy(), color=color, marker="o", ms=3,
                    label=str(label))
            if grp["seed"].nunique() > 1:
                ax.scatter(grp["rate"], grp[col], color=color, s=8, alpha=0.4)
            if caps.get(label, 0) > 0:
                ax.axvline(caps[label], color=color, ls="--", lw=1,
                           label=f"{label} capacity {caps[label]:.3g} req/s")
    if target is not None:
        axes[0].axhline(target, color="k", ls=":", lw=1, label=f"target {target:g}")
    axes[0].set_ylim(-0.02, 1.02)
    for ax, (_, ylabel) in zip(axes, PANELS):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_results(out_dir: Path) -> Path:
    """Write OUT/capacity.png from OUT/capacity_probes.csv and OUT/capacity.json."""
    probes_path, results_path = out_dir / "capacity_probes.csv", out_dir / "capacity.json"
    for path in (probes_path, results_path):
        if not path.is_file():
            raise FileNotFoundError(f"no {path.name} in {out_dir} (run a capacity search first)")
    probes = pd.read_csv(probes_path)
    results = json.loads(results_path.read_text(encoding="utf-8"))
    fig = plot_capacity(probes, results, title=f"capacity: {out_dir.name}")
    path = out_dir / "capacity.png"
    fig.savefig(path, dpi=130)
    return path

"""The search's Pareto figure: throughput per GPU and per dollar against latency at capacity.

Two panels, one point per simulated candidate with a capacity: capacity per GPU (left) and
requests per dollar (right) against the p90 TTFT of its probe at capacity. Colour: GPU type;
marker: colocated (o) or disaggregated (^). The Pareto front (no other point has both a lower
TTFT and a higher value) is joined by a line and labelled. A library module: it never switches
the matplotlib backend and draws on a bare matplotlib.figure.Figure (experiments/capacity/plot.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

PANELS = (("capacity_per_gpu", "capacity per GPU (req/s)"),
          ("requests_per_usd", "requests per dollar"))  # (row key, y label)
MARKERS = {"colocated": "o", "disagg": "^"}  # marker per candidate kind


def front(points: Sequence[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The (x, y, label) points no other point beats on both lower x and higher y, by x."""
    out: list[tuple[float, float, str]] = []
    for x, y, label in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or y > out[-1][1]:
            out.append((x, y, label))
    return out


def plot_pareto(rows: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """The figure of a search's rows (search.csv's simulated ones)."""
    fig = Figure(figsize=(5.6 * len(PANELS), 4.2))  # inches
    axes = fig.subplots(1, len(PANELS))
    served = [r for r in rows if r["status"] == "simulated" and r["capacity_rps"] > 0
              and math.isfinite(r["p90_ttft_s"])]
    colors = {gpu: f"C{n}" for n, gpu in enumerate(dict.fromkeys(r["gpu"] for r in served))}
    for ax, (key, ylabel) in zip(axes, PANELS):
        points = [(r["p90_ttft_s"] * 1e3, r[key], r["label"]) for r in served
                  if math.isfinite(r[key])]
        for r in served:
            if math.isfinite(r[key]):
                ax.scatter(r["p90_ttft_s"] * 1e3, r[key], color=colors[r["gpu"]],
                           marker=MARKERS.get(r["kind"], "s"), s=30, alpha=0.8)
        best = front(points)
        if best:
            ax.plot([p[0] for p in best], [p[1] for p in best], color="k", lw=0.8, ls="--")
            for x, y, label in best:
                ax.annotate(label, (x, y), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xlabel("p90 TTFT at capacity (ms)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    for gpu, color in colors.items():
        axes[0].scatter([], [], color=color, label=gpu)
    for kind, marker in MARKERS.items():
        axes[0].scatter([], [], color="grey", marker=marker, label=kind)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def write_pareto(rows: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Draw the figure into `path` (PNG)."""
    plot_pareto(rows, title).savefig(path, dpi=130)
    return path

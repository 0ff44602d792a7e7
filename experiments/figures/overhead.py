"""docs/overhead.md: the scheduling-overhead sweeps.

RESULTS/overhead (experiments/configs/overhead.yaml): GPU busy fraction, mean / p99 TPOT and mean
TTFT against the request rate, one line per label (FIGURES/overhead_vs_rate.png).
RESULTS/overhead_per_request (experiments/configs/overhead_per_request.yaml): the same against the
per-request CPU cost, serial and async, the run without overhead as a dashed line
(FIGURES/overhead_vs_per_request.png). Prints both tables (markdown).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage  # noqa: E402
from experiments.report.plot import load_summary, plot_against_rate, save  # noqa: E402

METRICS: tuple[tuple[str, str, float], ...] = (  # (summary column, axis label, scale)
    ("gpu_busy_frac", "GPU busy fraction", 1.0),
    ("mean_tpot_s", "mean TPOT (ms)", 1e3),
    ("p99_tpot_s", "p99 TPOT (ms)", 1e3),
    ("mean_ttft_s", "mean TTFT (s)", 1.0),
    ("request_throughput", "request throughput (req/s)", 1.0),
    ("scheduling_gap_s", "GPU idle on the scheduler (s)", 1.0),
)
TABLE_COLUMNS = ("gpu_busy_frac", "mean_tpot_s", "p99_tpot_s", "mean_ttft_s",
                 "request_throughput")
TITLE = "vllm, llama-2-7b on A100-80GB, Azure conv (1500 requests); 2 seeds"


def with_overhead(results: Path, df: pd.DataFrame) -> pd.DataFrame:
    """`df` plus each run's mode and per_request_s (from its config.json; none: no overhead)."""
    modes, per_request = [], []
    for run in df["run"]:
        config = json.loads((results / "runs" / run / "config.json").read_text())
        ov = config["run"]["cluster"].get("scheduling_overhead") or {}
        modes.append(ov.get("mode", "serial") if ov else "none")
        per_request.append(float(ov.get("per_request_s", 0.0)) * 1e6)
    return df.assign(mode=modes, per_request_us=per_request)


def plot_per_request(df: pd.DataFrame) -> plt.Figure:
    """Metrics against the per-request CPU cost: one line per mode, none dashed."""
    fig, axes = plt.subplots(2, 3, figsize=(12.6, 6.4))
    for ax, (col, label, scale) in zip(axes.flat, METRICS):
        for mode, grp in df[df["mode"] != "none"].groupby("mode", sort=False):
            stats = grp.groupby("per_request_us")[col].mean().sort_index() * scale
            ax.plot(stats.index, stats.to_numpy(), marker="o", ms=3, label=mode)
        base = df.loc[df["mode"] == "none", col]
        if len(base):
            ax.axhline(float(base.mean()) * scale, color="gray", ls="--", label="none")
        ax.set_xlabel("scheduler CPU per request (us)")
        ax.set_ylabel(label)
        if "TTFT" in label or "TPOT" in label:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    rate = df["rate"].iloc[0]
    fig.suptitle(f"vllm, llama-2-7b on A100-80GB, Azure conv at {rate:g} req/s, "
                 f"2 ms + per-request CPU per iteration")
    fig.tight_layout()
    return fig


def table(df: pd.DataFrame, keys: Sequence[str]) -> str:
    """A markdown table of TABLE_COLUMNS (seed means) by `keys`."""
    grp = df.groupby(list(keys), sort=False)[list(TABLE_COLUMNS)].mean().reset_index()
    head = "| " + " | ".join(keys) + " | GPU busy | TPOT mean ms | TPOT p99 ms | TTFT mean s " \
           "| req/s |"
    lines = [head, "|" + "---|" * (len(keys) + 5)]
    for _, r in grp.iterrows():
        cells = [str(r[k]) for k in keys] + [
            f"{r['gpu_busy_frac']:.3f}", f"{r['mean_tpot_s'] * 1e3:.1f}",
            f"{r['p99_tpot_s'] * 1e3:.1f}", f"{r['mean_ttft_s']:.2f}",
            f"{r['request_throughput']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw(results: list[Path], figures: Path) -> list[Path]:
    """Both figures and both tables, from RESULTS/overhead and RESULTS/overhead_per_request."""
    by_rate = load_summary(results[0])
    per_req = with_overhead(results[1], load_summary(results[1]))
    written = save(plot_against_rate(by_rate, METRICS, TITLE), figures, "overhead_vs_rate",
                   ["png"])
    written += save(plot_per_request(per_req), figures, "overhead_vs_per_request", ["png"])
    print(table(by_rate, ("label", "rate")) + "\n")
    print(table(per_req.sort_values(["mode", "per_request_us"]), ("mode", "per_request_us")))
    return written


PAGE = FigurePage(
    "overhead", "docs/overhead.md",
    ("experiments/configs/overhead.yaml", "experiments/configs/overhead_per_request.yaml"),
    draw, "scheduler CPU time: GPU busy, TPOT, TTFT against rate and per-request cost")

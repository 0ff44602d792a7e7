"""Figures and tables of the scheduling-overhead sweeps (docs/overhead.md).

    python -m experiments.overhead_report [RATE_RESULTS] [PER_REQUEST_RESULTS] [--figures DIR]

RATE_RESULTS (default results/overhead, from experiments/configs/overhead.yaml): GPU busy
fraction, mean / p99 TPOT and mean TTFT against the request rate, one line per label
(FIGURES/overhead_vs_rate.png). PER_REQUEST_RESULTS (default results/overhead_per_request, from
experiments/configs/overhead_per_request.yaml): the same against the per-request CPU cost, serial
and async, the run without overhead as a dashed line (FIGURES/overhead_vs_per_request.png).
Prints both tables (markdown) on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.plot import load_summary, plot_against_rate, save  # noqa: E402

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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Draw the scheduling-overhead figures.")
    ap.add_argument("rate_results", type=Path, nargs="?", default=Path("results/overhead"))
    ap.add_argument("per_request_results", type=Path, nargs="?",
                    default=Path("results/overhead_per_request"))
    ap.add_argument("--figures", type=Path, default=Path("docs/figures"))
    args = ap.parse_args(argv)
    try:
        by_rate = load_summary(args.rate_results)
        per_req = with_overhead(args.per_request_results, load_summary(args.per_request_results))
    except (FileNotFoundError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    title = "vllm, llama-2-7b on A100-80GB, Azure conv (1500 requests); 2 seeds"
    written = save(plot_against_rate(by_rate, METRICS, title), args.figures,
                   "overhead_vs_rate", ["png"])
    written += save(plot_per_request(per_req), args.figures, "overhead_vs_per_request", ["png"])
    print(table(by_rate, ("label", "rate")) + "\n")
    print(table(per_req.sort_values(["mode", "per_request_us"]), ("mode", "per_request_us")))
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

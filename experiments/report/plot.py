"""Standard figures of a sweep: metrics against request rate, and latency CDFs.

    python -m experiments.report.plot RESULTS_DIR [--rate R] [--out DIR] [--formats png,svg]

Reads RESULTS_DIR/summary.csv (one row per run) and, for the CDFs, the runs' records.parquet.
One line per policy label; the band spans the seeds (min to max) around their mean.
Figures are bare matplotlib.figure.Figure objects, outside pyplot: importing this module never
switches the backend (a notebook's inline backend stays), and a notebook displays what it returns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from matplotlib.figure import Figure
import pandas as pd

# (summary column, axis label, scale)
RATE_METRICS: tuple[tuple[str, str, float], ...] = (
    ("request_throughput", "request throughput (req/s)", 1.0),
    ("output_throughput", "output throughput (tok/s)", 1.0),
    ("mean_e2e_s", "mean E2E latency (s)", 1.0),
    ("p99_e2e_s", "p99 E2E latency (s)", 1.0),
    ("mean_ttft_s", "mean TTFT (s)", 1.0),
    ("mean_tpot_s", "mean TPOT (ms)", 1e3),
)
CDF_METRICS: tuple[tuple[str, str], ...] = (("e2e_s", "E2E latency (s)"),
                                            ("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (s)"))


def load_summary(results: Path) -> pd.DataFrame:
    path = results / "summary.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no summary.csv in {results} (run a sweep into it first)")
    df = pd.read_csv(path)
    return df[pd.to_numeric(df["rate"], errors="coerce").notna()].astype({"rate": float})


def plot_against_rate(df: pd.DataFrame, metrics=RATE_METRICS, title: str = "") -> Figure:
    """A grid of metric-vs-rate panels, one line per label, seed spread as a band."""
    cols = 3
    rows = -(-len(metrics) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows))  # inches
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (col, label, scale) in zip(axes.flat, metrics):
        for name, grp in df.groupby("label", sort=False):
            stats = grp.groupby("rate")[col].agg(["mean", "min", "max"]).sort_index() * scale
            ax.plot(stats.index, stats["mean"], marker="o", ms=3, label=str(name))
            if grp["seed"].nunique() > 1:
                ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.2)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        if "latency" in label or "TTFT" in label:  # spans orders of magnitude past saturation
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_cdfs(results: Path, df: pd.DataFrame, rate: float) -> Figure:
    """Latency CDFs of every label at one rate (records of all its seeds pooled)."""
    runs = df[(df["rate"] - rate).abs() < 1e-9]
    if runs.empty:
        raise ValueError(f"rate={rate}: no runs at that rate; rates: {sorted(df['rate'].unique())}")
    fig = Figure(figsize=(4.2 * len(CDF_METRICS), 3.2))  # inches
    axes = fig.subplots(1, len(CDF_METRICS))
    for name, grp in runs.groupby("label", sort=False):
        rec = pd.concat([pd.read_parquet(results / "runs" / r / "records.parquet")
                         for r in grp["run"]])
        rec = rec[rec["status"] == "finished"]
        for ax, (col, label) in zip(axes, CDF_METRICS):
            x = rec[col].dropna().sort_values().to_numpy()
            ax.plot(x, (pd.RangeIndex(1, len(x) + 1) / max(len(x), 1)), label=str(name))
            ax.set_xlabel(label)
    for ax in axes:
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"latency CDFs at {rate:g} req/s")
    fig.tight_layout()
    return fig


def save(fig: Figure, out: Path, stem: str, formats: Sequence[str],
         dpi: int = 130) -> list[Path]:
    """Write OUT/<stem>.<format> for each format (dots per inch: dpi); a figure pyplot made (the
    scripts under experiments/figures/) is closed after, a bare Figure needs no closing."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{fmt}" for fmt in formats]
    for p in paths:
        fig.savefig(p, dpi=dpi)
    if fig.canvas.manager is not None:  # pyplot's: it is imported already, and holds the figure
        import matplotlib.pyplot as plt

        plt.close(fig)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Draw the standard figures of a sweep.")
    ap.add_argument("results", type=Path)
    ap.add_argument("--rate", type=float, default=None, help="rate of the CDFs (default: median)")
    ap.add_argument("--out", type=Path, default=None, help="default: RESULTS/figures")
    ap.add_argument("--formats", default="png,svg")
    args = ap.parse_args(argv)
    try:
        df = load_summary(args.results)
        out = args.out or args.results / "figures"
        formats = [f for f in args.formats.split(",") if f]
        written = save(plot_against_rate(df, title=args.results.name), out, "vs_rate", formats)
        rates = sorted(df["rate"].unique())
        if rates:
            rate = args.rate if args.rate is not None else rates[len(rates) // 2]
            written += save(plot_cdfs(args.results, df, rate), out, "cdf", formats)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

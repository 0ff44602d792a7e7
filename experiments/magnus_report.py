"""Plots and ratio tables of a Magnus sweep (`experiments/configs/magnus.yaml`).

    python -m experiments.magnus_report [RESULTS_DIR] [--figures DIR] [--target Magnus]

Reads RESULTS_DIR/summary.csv and each run's steps.parquet, then
- plots request throughput, mean and p99 latency, and valid / total generated-token throughput
  against the request rate, one line per policy label (FIGURES/magnus_*.png);
- writes RESULTS_DIR/magnus_ratios.md: the target's change against every other label at each
  rate, and the range over rates, next to the paper's ranges.
Valid tokens are the outputs of finished requests; total generated tokens count every sampled
slot of every iteration, wasted slots of finished requests in a static batch and iterations
lost to OOM included.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

PAPER = {"request_throughput": "+66% to +234%", "mean_e2e_s": "-60.3% to -89.7%",
         "p99_e2e_s": "-53.2% to -91.7%"}  # Magnus vs the baselines, arXiv 2406.04785
METRICS: tuple[tuple[str, str], ...] = (  # (summary column, axis label)
    ("request_throughput", "request throughput (req/s)"),
    ("mean_e2e_s", "mean latency (s)"),
    ("p99_e2e_s", "p99 latency (s)"),
)


def generated_tokens(run_dir: Path) -> int:
    """Tokens sampled by every slot of every iteration of a run (its steps.parquet)."""
    steps = pd.read_parquet(run_dir / "steps.parquet", columns=["num_seqs", "num_iterations"])
    return int((steps["num_seqs"] * steps["num_iterations"]).sum())


def load(results: Path) -> pd.DataFrame:
    """summary.csv plus valid / total generated-token throughput per run."""
    frame = pd.read_csv(results / "summary.csv")
    totals = [generated_tokens(results / "runs" / run) for run in frame["run"]]
    frame["valid_token_throughput"] = frame["output_throughput"]
    frame["total_token_generated_throughput"] = pd.Series(totals) / frame["duration_s"]
    return frame.groupby(["label", "rate"], sort=False).mean(numeric_only=True).reset_index()


def plot(frame: pd.DataFrame, labels: Sequence[str], figures: Path) -> list[Path]:
    """One figure per metric against the request rate; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    written = []
    panels = [(m, t, None) for m, t in METRICS] + [
        ("valid_token_throughput", "token throughput (tok/s)", "total_token_generated_throughput")]
    for metric, title, dashed in panels:
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for i, label in enumerate(labels):
            rows = frame[frame["label"] == label].sort_values("rate")
            color = f"C{i}"
            ax.plot(rows["rate"], rows[metric], "o-", color=color, label=label)
            if dashed:
                ax.plot(rows["rate"], rows[dashed], "x--", color=color, alpha=0.6)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(title + (" — solid valid, dashed total" if dashed else ""))
        if metric != "request_throughput" and not dashed:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = "token_throughput" if dashed else metric.replace("_e2e_s", "_latency")
        path = figures / f"magnus_{name}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def change(target: float, base: float) -> float:
    """Relative change of target against base, % (positive = higher)."""
    return 100.0 * (target / base - 1.0)


def ratio_table(frame: pd.DataFrame, target: str, baselines: Sequence[str]) -> str:
    """Markdown: per baseline and rate, the target's throughput / latency change in %."""
    lines = [f"| {target} vs | rate | req/s | mean latency | p99 latency |",
             "|---|---|---|---|---|"]
    ranges = []
    mine = frame[frame["label"] == target].set_index("rate")
    for base in baselines:
        theirs = frame[frame["label"] == base].set_index("rate")
        rates = sorted(set(mine.index) & set(theirs.index))
        cells: dict[str, list[float]] = {m: [] for m, _ in METRICS}
        for rate in rates:
            row = [change(mine.loc[rate, m], theirs.loc[rate, m]) for m, _ in METRICS]
            for (m, _), value in zip(METRICS, row):
                cells[m].append(value)
            lines.append(f"| {base} | {rate:g} | " + " | ".join(f"{v:+.1f}%" for v in row) + " |")
        if rates:
            ranges.append(f"| {base} | all rates | " + " | ".join(
                f"{min(cells[m]):+.1f}% to {max(cells[m]):+.1f}%" for m, _ in METRICS) + " |")
    lines += ranges
    lines.append("| paper (vs baselines) | | " + " | ".join(PAPER[m] for m, _ in METRICS) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.magnus_report")
    parser.add_argument("results", nargs="?", default="results/magnus")
    parser.add_argument("--figures", default="docs/figures")
    parser.add_argument("--target", default="Magnus")
    args = parser.parse_args(argv)
    results = Path(args.results)
    frame = load(results)
    labels = list(dict.fromkeys(frame["label"]))
    if args.target not in labels:
        print(f"error: no runs labelled {args.target!r} in {results}", file=sys.stderr)
        return 2
    for path in plot(frame, labels, Path(args.figures)):
        print(f"wrote {path}", file=sys.stderr)
    table = ratio_table(frame, args.target, [lab for lab in labels if lab != args.target])
    (results / "magnus_ratios.md").write_text(table + "\n", encoding="utf-8")
    columns = ["label", "rate", "request_throughput", "mean_e2e_s", "p99_e2e_s",
               "valid_token_throughput", "total_token_generated_throughput",
               "num_oom_events", "completed"]
    print(frame[columns].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print()
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

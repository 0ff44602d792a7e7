"""Figure and table of the length-aware continuous batching sweep
(`experiments/configs/length_aware.yaml`, docs/length_aware.md).

    python -m experiments.length_aware_report [RESULTS_DIR] [--figures DIR] [--rates 16,32,40,48]

Reads RESULTS_DIR/summary.csv; draws request throughput, mean and p99 latency, mean and p99 TTFT
and preemptions against the request rate, one line per policy label, the band spanning the
seeds (FIGURES/length_aware_vs_rate.png); prints and writes RESULTS_DIR/length_aware_table.md:
the metrics at the chosen rates, averaged over seeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from experiments.plot import load_summary, plot_against_rate, save

METRICS: tuple[tuple[str, str, float], ...] = (  # (summary column, axis label, scale)
    ("request_throughput", "request throughput (req/s)", 1.0),
    ("mean_e2e_s", "mean E2E latency (s)", 1.0),
    ("p99_e2e_s", "p99 E2E latency (s)", 1.0),
    ("mean_ttft_s", "mean TTFT (s)", 1.0),
    ("p99_ttft_s", "p99 TTFT (s)", 1.0),
    ("num_preemptions", "preemptions per run", 1.0),
)
TABLE = {"request_throughput": "req/s", "mean_e2e_s": "mean s", "p99_e2e_s": "p99 s",
         "mean_ttft_s": "TTFT s", "p99_ttft_s": "p99 TTFT s", "mean_tpot_s": "TPOT s",
         "num_preemptions": "preempt"}


def table(df: pd.DataFrame, rates: Sequence[float]) -> str:
    """Markdown: one row per label and rate, metrics averaged over seeds."""
    rows = df[df["rate"].isin(rates)]
    mean = rows.groupby(["label", "rate"], sort=False)[list(TABLE)].mean().reset_index()
    mean["order"] = mean["label"].map({k: i for i, k in enumerate(dict.fromkeys(df["label"]))})
    mean = mean.sort_values(["rate", "order"])
    lines = ["| rate | policy | " + " | ".join(TABLE.values()) + " |",
             "|---" * (2 + len(TABLE)) + "|"]
    for _, r in mean.iterrows():
        cells = [f"{r[c]:.0f}" if c == "num_preemptions" else
                 f"{r[c] * 1e3:.0f} ms" if c == "mean_tpot_s" else f"{r[c]:.2f}" for c in TABLE]
        lines.append(f"| {r['rate']:g} | {r['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.length_aware_report")
    ap.add_argument("results", nargs="?", type=Path, default=Path("results/length_aware"))
    ap.add_argument("--figures", type=Path, default=Path("docs/figures"))
    ap.add_argument("--rates", default="16,32,40,48", help="rates of the table (comma-separated)")
    args = ap.parse_args(argv)
    try:
        df = load_summary(args.results)
        rates = [float(x) for x in args.rates.split(",") if x]
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fig = plot_against_rate(df, METRICS, title="Magnus workload, ChatGLM-6B on one V100-32GB")
    for path in save(fig, args.figures, "length_aware_vs_rate", ["png"]):
        print(f"wrote {path}", file=sys.stderr)
    text = table(df, rates)
    (args.results / "length_aware_table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

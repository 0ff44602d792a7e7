"""docs/length_aware.md: length-aware continuous batching against the baselines, and its ablation.

From RESULTS/length_aware (experiments/configs/length_aware.yaml): request throughput, mean and
p99 latency, mean and p99 TTFT and preemptions against the request rate, one line per policy
label, the band spanning the seeds (FIGURES/length_aware_vs_rate.png), and the metrics at RATES
averaged over seeds, printed and written to RESULTS/length_aware/length_aware_table.md. The
ablation (experiments/configs/length_aware_ablation.yaml) gets the same at ABLATION_RATES, its
figure kept beside its results (RESULTS/length_aware_ablation/figures/).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from experiments.figures.page import FigurePage
from experiments.report.plot import load_summary, plot_against_rate, save

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
TITLE = "Magnus workload, ChatGLM-6B on one V100-32GB"
RATES = (24.0, 40.0, 48.0)  # req/s of the page's table
ABLATION_RATES = (40.0, 48.0)  # req/s of the ablation's table


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


def report(results: Path, figures: Path, rates: Sequence[float]) -> list[Path]:
    """One sweep's figure (FIGURES/length_aware_vs_rate.png) and table (printed, and written to
    RESULTS/length_aware_table.md); returns the files written."""
    df = load_summary(results)
    written = save(plot_against_rate(df, METRICS, title=TITLE), figures, "length_aware_vs_rate",
                   ["png"])
    text = table(df, rates)
    (results / "length_aware_table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return written + [results / "length_aware_table.md"]


def draw(results: list[Path], figures: Path) -> list[Path]:
    """The comparison into `figures`; the ablation, when its results exist, beside them."""
    written = report(results[0], figures, RATES)
    for ablation in results[1:]:
        if not (ablation / "summary.csv").is_file():
            print(f"skipped {ablation}: not run", file=sys.stderr)
            continue
        print(f"\n{ablation.name}")
        written += report(ablation, ablation / "figures", ABLATION_RATES)
    return written


PAGE = FigurePage(
    "length_aware", "docs/length_aware.md",
    ("experiments/configs/length_aware.yaml", "experiments/configs/length_aware_ablation.yaml"),
    draw, "length-aware continuous batching vs vllm, sarathi, CCB, Magnus; ablation")

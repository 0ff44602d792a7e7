"""docs/rolling_batch.md: DJL rolling-batch options (experiments/configs/rolling_batch.yaml).

Labels name the option varied: `B<n>` = max_rolling_batch_size n, `P<n>` =
max_rolling_batch_prefill_tokens n (B256 is also P4096, vLLM's default with max_model_len 4096).
Draws throughput, mean / p99 latency and mean TTFT against each option, one line per rate of
RATES (FIGURES/rolling_batch.png); prints the table and writes it to
RESULTS/rolling_batch/rolling_batch_table.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage  # noqa: E402
from experiments.report.plot import load_summary, save  # noqa: E402

METRICS: tuple[tuple[str, str], ...] = (  # (summary column, axis label)
    ("request_throughput", "request throughput (req/s)"),
    ("mean_e2e_s", "mean E2E latency (s)"),
    ("p99_e2e_s", "p99 E2E latency (s)"),
    ("mean_ttft_s", "mean TTFT (s)"),
)
DEFAULT_PREFILL = 4096  # tokens: vLLM's max(max_model_len=4096, 2048), what B* entries use
DEFAULT_BATCH = 256  # LMI's default max_rolling_batch_size for vllm
RATES = (2.0, 4.0, 5.0, 6.0)  # req/s drawn and tabulated


def option_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Seed means with `batch` and `prefill` columns parsed from the labels (others dropped)."""
    mean = df.groupby(["label", "rate"], sort=False).mean(numeric_only=True).reset_index()
    parsed = mean["label"].str.extract(r"^([BP])(\d+)$")
    mean = mean[parsed[0].notna()].copy()
    value = parsed.loc[mean.index, 1].astype(int)
    is_batch = parsed.loc[mean.index, 0] == "B"
    mean["batch"] = value.where(is_batch, DEFAULT_BATCH)
    mean["prefill"] = value.where(~is_batch, DEFAULT_PREFILL)
    return mean


def plot(rows: pd.DataFrame, rates: Sequence[float]) -> plt.Figure:
    """Row 1: metrics against the rolling batch size; row 2: against the prefill tokens."""
    fig, axes = plt.subplots(2, len(METRICS), figsize=(4.0 * len(METRICS), 6.4))
    sweeps = (("batch", rows["prefill"] == DEFAULT_PREFILL, "max_rolling_batch_size"),
              ("prefill", rows["batch"] == DEFAULT_BATCH, "max_rolling_batch_prefill_tokens"))
    for row_axes, (col, keep, xlabel) in zip(axes, sweeps):
        part = rows[keep]
        for ax, (metric, ylabel) in zip(row_axes, METRICS):
            for rate in rates:
                pts = part[part["rate"] == rate].sort_values(col)
                ax.plot(pts[col], pts[metric], marker="o", ms=3, label=f"{rate:g} req/s")
            ax.set_xscale("log", base=2)
            if metric != "request_throughput":
                ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("DJL rolling batch (vllm), Azure conv trace, Llama-2-7B on one A100-80GB")
    fig.tight_layout()
    return fig


def table(df: pd.DataFrame, rates: Sequence[float]) -> str:
    """Markdown: seed means of every label at the chosen rates."""
    mean = df.groupby(["label", "rate"], sort=False).mean(numeric_only=True).reset_index()
    mean = mean[mean["rate"].isin(rates)]
    cols = [m for m, _ in METRICS] + ["mean_batch_size", "num_preemptions"]
    lines = ["| policy | rate | req/s | mean s | p99 s | TTFT s | batch | preempt |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in mean.iterrows():
        lines.append(f"| {r['label']} | {r['rate']:g} | " + " | ".join(
            f"{r[c]:.0f}" if c == "num_preemptions" else f"{r[c]:.2f}" for c in cols) + " |")
    return "\n".join(lines)


def draw(results: list[Path], figures: Path, rates: Sequence[float] = RATES) -> list[Path]:
    """FIGURES/rolling_batch.png and the table at `rates` (printed and written)."""
    df = load_summary(results[0])
    written = save(plot(option_rows(df), rates), figures, "rolling_batch", ["png"], dpi=120)
    text = table(df, rates)
    (results[0] / "rolling_batch_table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return written + [results[0] / "rolling_batch_table.md"]


PAGE = FigurePage("rolling_batch", "docs/rolling_batch.md",
                  ("experiments/configs/rolling_batch.yaml",), draw,
                  "DJL rolling batch: max_rolling_batch_size and prefill tokens")

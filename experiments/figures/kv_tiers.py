"""docs/kv_tiers.md: KV memory tiers, from the sweeps experiments/configs/kv_tiers_swap.yaml and
kv_tiers_mooncake.yaml (a sweep that has not been run is skipped).

Writes to FIGURES:
- kv_tiers_swap.png: swap vs recompute preemption against the request rate: swap / recompute
  ratios of mean and p99 TTFT and throughput (seeds as bands), then mean TPOT, tokens
  recomputed and bytes swapped out;
- kv_tiers_mooncake.png: the prefix hit rate split by the tier that served it at one rate
  (stacked bars), and mean / p99 TTFT and throughput against the rate, per tier setting;
and prints both tables.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage, sweeps_run  # noqa: E402
from experiments.report.plot import load_summary, save  # noqa: E402

SWAP_RATIOS = (("mean_ttft_s", "mean TTFT, swap / recompute"),
               ("p99_ttft_s", "p99 TTFT, swap / recompute"),
               ("request_throughput", "throughput, swap / recompute"))
SWAP_METRICS: tuple[tuple[str, str, float], ...] = (  # (summary column, axis label, scale)
    ("mean_tpot_s", "mean TPOT (ms)", 1e3),
    ("num_recomputed_tokens", "tokens recomputed (k)", 1e-3),
    ("kv_swap_out_bytes", "swapped out (GB)", 1e-9),
)
RECOMPUTE = "recompute"  # labels <policy>_recompute are each policy's baseline
SWAP_TABLE = ["label", "rate", "num_preemptions", "num_recomputed_tokens", "num_swap_outs",
              "kv_swap_out_bytes", "mean_ttft_s", "p99_ttft_s", "mean_tpot_s",
              "request_throughput"]
TIERS = (("prefix_hit_rate_gpu", "GPU"), ("prefix_hit_rate_host", "host"),
         ("prefix_hit_rate_remote", "remote"))
TIER_TABLE = ["label", "rate", "prefix_hit_rate", "prefix_hit_rate_gpu", "prefix_hit_rate_host",
              "prefix_hit_rate_remote", "kv_host_in_bytes", "kv_host_out_bytes",
              "kv_remote_in_bytes", "mean_ttft_s", "p99_ttft_s", "mean_tpot_s",
              "request_throughput"]
BAR_RATE = 2.0  # req/s: the rate of the per-tier hit-rate bars
RATE_PANELS = (("mean_ttft_s", "mean TTFT (s)"), ("p99_ttft_s", "p99 TTFT (s)"),
               ("request_throughput", "throughput (req/s)"))


def columns(df: pd.DataFrame, wanted: list[str]) -> list[str]:
    """The columns of `wanted` that the sweep has (tier columns exist only where tiers ran)."""
    return [c for c in wanted if c in df.columns]


def baseline(label: str) -> str:
    """The recompute label a swap label compares with (same policy prefix)."""
    return label.split("_")[0] + "_" + RECOMPUTE


def plot_swap(df: pd.DataFrame) -> plt.Figure:
    """Swap / recompute ratios of TTFT and throughput (same policy, rate and seed; seeds as a
    band), then TPOT, tokens recomputed and bytes swapped out, against the request rate."""
    fig, axes = plt.subplots(2, 3, figsize=(12.6, 6.4))
    base = df.set_index(["label", "rate", "seed"])
    color = {name: f"C{i}" for i, name in enumerate(df["label"].unique())}  # one per label
    for ax, (col, label) in zip(axes[0], SWAP_RATIOS):
        for name, grp in df[~df["label"].str.endswith(RECOMPUTE)].groupby("label", sort=False):
            ref = base.loc[[(baseline(name), r, s) for r, s in zip(grp["rate"], grp["seed"])],
                           col].to_numpy()
            ratio = grp.assign(ratio=grp[col].to_numpy() / ref)
            stats = ratio.groupby("rate")["ratio"].agg(["mean", "min", "max"]).sort_index()
            ax.plot(stats.index, stats["mean"], marker="o", ms=3, label=str(name),
                    color=color[name])
            ax.fill_between(stats.index, stats["min"], stats["max"], alpha=0.2,
                            color=color[name])
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_ylabel(label)
    for ax, (col, label, scale) in zip(axes[1], SWAP_METRICS):
        for name, grp in df.groupby("label", sort=False):
            stats = grp.groupby("rate")[col].mean().sort_index() * scale
            ax.plot(stats.index, stats.to_numpy(), marker="o", ms=3, label=str(name),
                    color=color[name])
        ax.set_ylabel(label)
    for ax in axes.flat:
        ax.set_xlabel("request rate (req/s)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    axes[1][0].legend(fontsize=7)
    fig.suptitle("swap vs recompute preemption: Azure conv trace (2000 requests), Llama-2-7B "
                 "on A100-80GB at gpu_memory_utilization 0.3 (19.8k KV tokens)", fontsize=10)
    fig.tight_layout()
    return fig


def tier_shares(df: pd.DataFrame) -> pd.DataFrame:
    """Per label at BAR_RATE (or the nearest rate run): the hit rate each tier served."""
    rate = min(df["rate"].unique(), key=lambda r: abs(r - BAR_RATE))
    at = df[df["rate"] == rate].groupby("label", sort=False).mean(numeric_only=True)
    out = pd.DataFrame(index=at.index)
    for col, name in TIERS:
        out[name] = at[col] if col in at.columns else 0.0
    gpu_only = out.isna().all(axis=1)  # no tier columns: all of it from the GPU
    out.loc[gpu_only, "GPU"] = at.loc[gpu_only, "prefix_hit_rate"]
    out.attrs["rate"] = rate
    return out.fillna(0.0)


def plot_tiers(df: pd.DataFrame) -> plt.Figure:
    """Hit rate per tier (stacked bars at one rate), then TTFT and throughput against rate."""
    fig, axes = plt.subplots(1, 1 + len(RATE_PANELS), figsize=(4.4 * (1 + len(RATE_PANELS)),
                                                                 3.6))
    shares = tier_shares(df)
    bottom = pd.Series(0.0, index=shares.index)
    for name in shares.columns:
        axes[0].bar(range(len(shares)), shares[name] * 100, bottom=bottom * 100, label=name)
        bottom += shares[name]
    axes[0].set_xticks(range(len(shares)), shares.index, rotation=30, ha="right", fontsize=8)
    axes[0].set_ylabel(f"prefix hit rate at {shares.attrs['rate']:g} req/s (%)")
    axes[0].legend(fontsize=8, title="served from", title_fontsize=8)
    for ax, (col, label) in zip(axes[1:], RATE_PANELS):
        for name, grp in df.groupby("label", sort=False):
            stats = grp.groupby("rate")[col].mean().sort_index()
            ax.plot(stats.index, stats.to_numpy(), marker="o", ms=3, label=str(name))
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        if "TTFT" in label:
            ax.set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle("Mooncake conversation trace (2000 requests), Llama-3.1-8B on 4x H200 (TP 4, "
                 "0.75M GPU KV tokens), vllm_v0 with prefix caching", fontsize=10)
    fig.tight_layout()
    return fig


def draw(results: list[Path], figures: Path) -> list[Path]:
    """The swap figure and the tier figure, from the sweeps that have been run."""
    found = sweeps_run(results)
    pd.set_option("display.width", 200)
    written: list[Path] = []
    if "kv_tiers_swap" in found:
        df = load_summary(found["kv_tiers_swap"])
        table = df.groupby(["label", "rate"], sort=False)[columns(df, SWAP_TABLE[2:])].mean()
        print(f"\nkv_tiers_swap (mean over seeds)\n{table.round(4).to_string()}")
        written += save(plot_swap(df), figures, "kv_tiers_swap", ["png"])
    if "kv_tiers_mooncake" in found:
        df = load_summary(found["kv_tiers_mooncake"])
        table = df[columns(df, TIER_TABLE)].round(4).to_string(index=False)
        print(f"\nkv_tiers_mooncake\n{table}")
        written += save(plot_tiers(df), figures, "kv_tiers_mooncake", ["png"])
    return written


PAGE = FigurePage(
    "kv_tiers", "docs/kv_tiers.md",
    ("experiments/configs/kv_tiers_swap.yaml", "experiments/configs/kv_tiers_mooncake.yaml"),
    draw, "KV memory tiers: swap vs recompute preemption, host / remote prefix tiers")

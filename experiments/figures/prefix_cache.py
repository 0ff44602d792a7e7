"""docs/prefix_cache.md: prefix KV reuse, from the five prefix_* sweeps.

Reads RESULTS/<sweep>/summary.csv (and each run's instances.parquet for the KV capacity) of the
sweeps experiments/configs/prefix_{mooncake,sessions,affinity,mooncake_pressure,
sessions_pressure}.yaml; a sweep that has not been run is skipped. Writes prefix_mooncake.png,
prefix_sessions.png, prefix_affinity.png and prefix_pressure.png, and prints the numbers.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage, sweeps_run  # noqa: E402
from experiments.report.plot import load_summary, plot_against_rate, save  # noqa: E402

METRICS: tuple[tuple[str, str, float], ...] = (  # (summary column, axis label, scale)
    ("prefix_hit_rate", "prefix hit rate (cached / prompt tokens)", 1.0),
    ("mean_ttft_s", "mean TTFT (s)", 1.0),
    ("p99_ttft_s", "p99 TTFT (s)", 1.0),
)
TABLE = ["label", "rate", "prefix_hit_rate", "mean_ttft_s", "p99_ttft_s", "mean_tpot_s",
         "request_throughput", "num_preemptions"]
RATE_SWEEPS = {  # sweep -> (figure stem, title)
    "prefix_mooncake": ("prefix_mooncake", "Mooncake conversation trace (2000 requests), "
                        "Llama-3.1-8B, 4x H200 (TP 4), vllm_v0"),
    "prefix_sessions": ("prefix_sessions", "synthetic multi-turn sessions, Llama-2-7B, "
                        "1x A100-80GB, vllm_v0"),
    "prefix_affinity": ("prefix_affinity", "synthetic sessions on 4 instances (Llama-2-7B, "
                        "A100-80GB), vllm_v0: routers with prefix reuse"),
}
PRESSURE_SWEEPS = {  # sweep -> panel row title
    "prefix_mooncake_pressure": "Mooncake at 2 req/s (Llama-3.1-8B, TP 4 H200)",
    "prefix_sessions_pressure": "sessions at 3 req/s (Llama-2-7B, A100-80GB)",
}


def with_capacity(results: Path, df: pd.DataFrame) -> pd.DataFrame:
    """`df` plus each run's KV capacity (tokens per instance) and its reuse flag."""
    caps = [int(pd.read_parquet(results / "runs" / run / "instances.parquet")
                ["kv_capacity_tokens"].iloc[0]) for run in df["run"]]
    reuse = ["reuse" if str(label).startswith("prefix_reuse") else "no reuse"
             for label in df["label"]]
    return df.assign(kv_capacity_tokens=caps, reuse=reuse)


def plot_pressure(frames: dict[str, pd.DataFrame]) -> plt.Figure:
    """Hit rate and TTFT against KV capacity, one row per workload, reuse on / off."""
    fig, axes = plt.subplots(len(frames), len(METRICS), figsize=(4.2 * len(METRICS),
                                                                  3.2 * len(frames)),
                             squeeze=False)
    for row, (title, df) in zip(axes, frames.items()):
        for ax, (col, label, scale) in zip(row, METRICS):
            for name, grp in df.groupby("reuse", sort=False):
                grp = grp.sort_values("kv_capacity_tokens")
                ax.plot(grp["kv_capacity_tokens"] / 1e3, grp[col] * scale, marker="o", ms=3,
                        label=name)
            ax.set_xlabel("KV cache per instance (k tokens)")
            ax.set_ylabel(label)
            if "TTFT" in label:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        row[0].set_title(title, fontsize=9, loc="left")
        row[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw(results: list[Path], figures: Path) -> list[Path]:
    """A figure per rate sweep, one for the pressure sweeps; sweeps not run are skipped."""
    found = sweeps_run(results)
    pd.set_option("display.width", 160)
    written: list[Path] = []
    for sweep, (stem, title) in RATE_SWEEPS.items():
        if sweep in found:
            df = load_summary(found[sweep])
            print(f"\n{sweep}\n{df[TABLE].round(3).to_string(index=False)}")
            written += save(plot_against_rate(df, METRICS, title), figures, stem, ["png"])
    frames = {}
    for sweep, title in PRESSURE_SWEEPS.items():
        if sweep in found:
            df = with_capacity(found[sweep], load_summary(found[sweep]))
            table = df[["kv_capacity_tokens", *TABLE]].round(3).to_string(index=False)
            print(f"\n{sweep}\n{table}")
            frames[title] = df
    if frames:
        written += save(plot_pressure(frames), figures, "prefix_pressure", ["png"])
    return written


PAGE = FigurePage(
    "prefix_cache", "docs/prefix_cache.md",
    tuple(f"experiments/configs/{sweep}.yaml" for sweep in (*RATE_SWEEPS, *PRESSURE_SWEEPS)),
    draw, "prefix KV reuse: hit rate and TTFT against rate and KV capacity")

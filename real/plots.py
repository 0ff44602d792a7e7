"""Validation figures (matplotlib, Agg backend): simulated vs measured step time, latency CDFs."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def step_scatter(pairs: Mapping[tuple[str, str], pd.DataFrame], path: str | Path) -> None:
    """One panel per calibrated model: predicted vs measured seconds of every real step,
    coloured by policy (keys of `pairs` are (policy label, model kind))."""
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter

    kinds = sorted({kind for _, kind in pairs})
    fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 4.5), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        lo, hi = np.inf, 0.0
        for (label, k), df in pairs.items():
            if k != kind or df.empty:
                continue
            ax.scatter(df["measured_s"], df["predicted_s"], s=8, alpha=0.6, label=label)
            lo = min(lo, df["measured_s"].min(), df["predicted_s"].min())
            hi = max(hi, df["measured_s"].max(), df["predicted_s"].max())
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        ax.set(xscale="log", yscale="log", xlabel="measured step time (s)",
               ylabel="simulated step time (s)", title=f"calibrated {kind}")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def latency_cdfs(records: Mapping[tuple[str, str], pd.DataFrame], path: str | Path) -> None:
    """TTFT and E2E CDFs per policy: the real run and each simulated one (keys: (policy label,
    run kind: real | roofline | learned))."""
    plt = _pyplot()
    from matplotlib.ticker import NullFormatter

    labels = list(dict.fromkeys(label for label, _ in records))
    fig, axes = plt.subplots(len(labels), 2, figsize=(10, 3.5 * len(labels)), squeeze=False)
    for row, label in zip(axes, labels):
        for (lab, kind), df in records.items():
            if lab != label:
                continue
            done = df[df["status"] == "finished"]
            for ax, col in zip(row, ("ttft_s", "e2e_s")):
                x = np.sort(done[col].dropna().to_numpy())
                if len(x):
                    ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=kind,
                            lw=2 if kind == "real" else 1.2)
        for ax, name in zip(row, ("TTFT", "E2E latency")):
            ax.set(xscale="log", xlabel=f"{name} (s)", ylabel="CDF", title=f"{label}: {name}")
            ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

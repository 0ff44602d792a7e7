"""docs/classes.md: request classes (experiments/configs/classes_mix.yaml).

Reads RESULTS/classes_mix/summary.csv (per-class keys `class.<name>.<metric>`, averaged over
seeds) and writes to FIGURES:
- classes_slo.png: per rate, each policy's SLO attainment per class (bars, the 0.9 target as a
  line) above its p90 TTFT per class (the interactive 1 s bound as a line);
and RESULTS/classes_mix/classes_table.md (also printed): per rate and policy, each class's
attainment (and whether it meets its SLO), p90 / p99 TTFT, rejected and cancelled requests, and
the tokens computed for nothing (cancelled requests' KV).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage  # noqa: E402
from experiments.report.classes import class_names  # noqa: E402
from experiments.report.plot import save  # noqa: E402

TARGET = 0.9  # the classes' attainment target (classes_mix.yaml)
TTFT_BOUND_S = 1.0  # the interactive class's TTFT bound, seconds


def load(results: Path) -> tuple[pd.DataFrame, list[str], list[str]]:
    """summary.csv averaged over seeds per (label, rate); the labels in config order and the
    class names."""
    path = results / "summary.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no summary.csv in {results} (run a sweep into it first)")
    summary = pd.read_csv(path)
    labels = list(dict.fromkeys(summary["label"]))
    names = class_names(summary.to_dict("records"))
    if not names:
        raise ValueError(f"{results} has no per-class metrics (a workload without classes?)")
    numeric = summary.select_dtypes("number").drop(columns=["seed"], errors="ignore")
    means = numeric.groupby([summary["label"], summary["rate"]]).mean()
    return means, labels, names


def value(df: pd.DataFrame, label: str, rate: float, key: str) -> float:
    try:
        return float(df.loc[(label, rate), key])
    except KeyError:
        return float("nan")


def plot(df: pd.DataFrame, labels: list[str], names: list[str], out: Path) -> Path:
    rates = sorted({rate for _, rate in df.index})
    fig, axes = plt.subplots(2, len(rates), figsize=(5.2 * len(rates), 6.4), squeeze=False)
    x, width = np.arange(len(labels)), 0.8 / len(names)
    for col, rate in enumerate(rates):
        top, bottom = axes[0, col], axes[1, col]
        for j, name in enumerate(names):
            offset = x + (j - (len(names) - 1) / 2) * width
            attain = [value(df, lab, rate, f"class.{name}.slo_attainment") for lab in labels]
            ttft = [value(df, lab, rate, f"class.{name}.p90_ttft_s") for lab in labels]
            top.bar(offset, attain, width, label=name)
            bottom.bar(offset, ttft, width, label=name)
        top.axhline(TARGET, color="k", lw=0.8, ls="--")
        top.set_ylim(0, 1.05)
        top.set_ylabel("SLO attainment")
        top.set_title(f"{rate:g} req/s", fontsize=10)
        bottom.axhline(TTFT_BOUND_S, color="k", lw=0.8, ls="--")
        bottom.set_ylabel("p90 TTFT (s)")
        for ax in (top, bottom):
            ax.set_xticks(x)
            ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
            ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return save(fig, out, "classes_slo", ["png"])[0]


def table(df: pd.DataFrame, labels: list[str], names: list[str]) -> str:
    """Markdown: per rate and policy, each class's attainment, TTFT and losses."""
    head = "| rate | policy | " + " | ".join(
        f"{n}: attainment | {n}: p90 / p99 TTFT s | {n}: rejected / cancelled" for n in names)
    lines = [head + " | wasted tokens |", "|---|---|" + "---|" * (3 * len(names) + 1)]
    for rate in sorted({rate for _, rate in df.index}):
        for lab in labels:
            cells = []
            for n in names:
                attain = value(df, lab, rate, f"class.{n}.slo_attainment")
                meets = value(df, lab, rate, f"class.{n}.meets_slo")
                mark = (" (meets)" if meets == 1 else " (misses)" if meets == 0 else
                        f" (meets in {meets:.0%} of seeds)" if meets == meets else "")
                cells += [f"{attain:.3f}{mark}",
                          f"{value(df, lab, rate, f'class.{n}.p90_ttft_s'):.2f} / "
                          f"{value(df, lab, rate, f'class.{n}.p99_ttft_s'):.2f}",
                          f"{value(df, lab, rate, f'class.{n}.rejected'):.1f} / "
                          f"{value(df, lab, rate, f'class.{n}.cancelled'):.1f}"]
            wasted = value(df, lab, rate, "num_padding_tokens")
            lines.append(f"| {rate:g} | {lab} | " + " | ".join(cells) + f" | {wasted:,.0f} |")
    return "\n".join(lines)


def draw(results: list[Path], figures: Path) -> list[Path]:
    """The figure and the table of RESULTS/classes_mix."""
    df, labels, names = load(results[0])
    written = [plot(df, labels, names, figures)]
    text = table(df, labels, names)
    (results[0] / "classes_table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return written + [results[0] / "classes_table.md"]


PAGE = FigurePage("classes", "docs/classes.md", ("experiments/configs/classes_mix.yaml",), draw,
                  "request classes: per-class SLO attainment under fcfs, priority, admission, "
                  "timeouts")
